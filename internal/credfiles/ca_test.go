package credfiles

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/testcerts"
)

func TestReadCAPool(t *testing.T) {
	ca := testcerts.NewCA(t, "test CA")
	if pool, err := ReadCAPool("x-ca", ca.File); err != nil || !pool.Equal(ca.Pool()) {
		t.Fatalf("ReadCAPool(CA file): %v, %v", pool, err)
	}
	notPEM := writeFile(t, t.TempDir(), "ca.txt", "not a certificate")
	for path, want := range map[string]string{
		notPEM: `--x-ca="` + notPEM + `": holds no PEM certificate`,
		filepath.Join(t.TempDir(), "missing.pem"): "--x-ca: must be a readable PEM CA bundle: ",
	} {
		if _, err := ReadCAPool("x-ca", path); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("ReadCAPool(%s): %v, want %q", path, err, want)
		}
	}
}

// writeFile writes content to the file name in dir and returns its path.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
