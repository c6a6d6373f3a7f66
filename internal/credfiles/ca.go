package credfiles

import (
	"crypto/x509"
	"fmt"
	"os"
)

// ReadCAPool reads the PEM CA bundle at path, given with --flag.
func ReadCAPool(flag, path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--%s: must be a readable PEM CA bundle: %w", flag, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--%s=%q: holds no PEM certificate", flag, path)
	}
	return pool, nil
}
