package redistest

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/testcerts"
)

// TLSFiles are PEM files of a test CA, a server certificate for 127.0.0.1 and
// a client certificate, all signed by the CA.
type TLSFiles struct {
	CA         string
	ServerCert string
	ServerKey  string
	ClientCert string
	ClientKey  string
}

// GenerateTLS creates a CA, a server certificate (IP SAN 127.0.0.1 and ::1)
// and a client certificate in t.TempDir().
func GenerateTLS(t testing.TB) TLSFiles {
	t.Helper()
	ca := testcerts.NewCA(t, "envoy-rls test CA")
	f := TLSFiles{CA: ca.File}
	f.ServerCert, f.ServerKey = ca.Issue("server")
	f.ClientCert, f.ClientKey = ca.Issue("client")
	return f
}

// ClientConfig returns a TLS client configuration trusting the test CA and
// presenting the client certificate.
func (f TLSFiles) ClientConfig(t testing.TB) *tls.Config {
	t.Helper()
	ca, err := os.ReadFile(f.CA)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		t.Fatalf("redistest: no certificate in %s", f.CA)
	}
	cert, err := tls.LoadX509KeyPair(f.ClientCert, f.ClientKey)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
}

// RequireTLS skips the test when the installed redis-server was built without
// TLS support (it then does not link OpenSSL). This is a property of the
// machine's Redis build, not of the code under test, so it skips even when
// CI=true; Debian's and most distributions' builds include TLS.
func RequireTLS(t testing.TB) {
	t.Helper()
	p := RequireServer(t)
	if real, err := filepath.EvalSymlinks(p); err == nil {
		p = real
	}
	bin, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("redistest: read %s: %v", p, err)
	}
	if !bytes.Contains(bin, []byte("SSL_CTX_new")) {
		t.Skipf("redistest: %s was built without TLS support (no OpenSSL symbols)", p)
	}
}
