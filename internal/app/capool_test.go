package app

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/testcerts"
)

func TestReadCAPool(t *testing.T) {
	ca := testcerts.NewCA(t, "test CA")
	if pool, err := readCAPool("x-ca", ca.File); err != nil || !pool.Equal(ca.Pool()) {
		t.Fatalf("readCAPool(CA file): %v, %v", pool, err)
	}
	notPEM := filepath.Join(t.TempDir(), "ca.txt")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		notPEM: `--x-ca="` + notPEM + `": holds no PEM certificate`,
		filepath.Join(t.TempDir(), "missing.pem"): "--x-ca: must be a readable PEM CA bundle: ",
	} {
		if _, err := readCAPool("x-ca", path); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("readCAPool(%s): %v, want %q", path, err, want)
		}
	}
}
