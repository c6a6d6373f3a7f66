package redistest

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
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
// and a client certificate in t.TempDir(), valid for one hour.
func GenerateTLS(t testing.TB) TLSFiles {
	t.Helper()
	dir := t.TempDir()
	now := time.Now()
	caKey := mustKey(t)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "envoy-rls test CA"},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatalf("redistest: create CA: %v", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatalf("redistest: parse CA: %v", err)
	}
	leaf := func(serial int64, cn string, usage x509.ExtKeyUsage, ips []net.IP) ([]byte, *ecdsa.PrivateKey) {
		k := mustKey(t)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: cn},
			NotBefore:    now.Add(-time.Minute),
			NotAfter:     now.Add(time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
			IPAddresses:  ips,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &k.PublicKey, caKey)
		if err != nil {
			t.Fatalf("redistest: create %s certificate: %v", cn, err)
		}
		return der, k
	}
	srvDER, srvKey := leaf(2, "127.0.0.1", x509.ExtKeyUsageServerAuth, []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback})
	cliDER, cliKey := leaf(3, "envoy-rls test client", x509.ExtKeyUsageClientAuth, nil)
	f := TLSFiles{
		CA:         filepath.Join(dir, "ca.pem"),
		ServerCert: filepath.Join(dir, "server.pem"),
		ServerKey:  filepath.Join(dir, "server-key.pem"),
		ClientCert: filepath.Join(dir, "client.pem"),
		ClientKey:  filepath.Join(dir, "client-key.pem"),
	}
	writePEM(t, f.CA, "CERTIFICATE", caDER)
	writePEM(t, f.ServerCert, "CERTIFICATE", srvDER)
	writePEM(t, f.ServerKey, "PRIVATE KEY", marshalKey(t, srvKey))
	writePEM(t, f.ClientCert, "CERTIFICATE", cliDER)
	writePEM(t, f.ClientKey, "PRIVATE KEY", marshalKey(t, cliKey))
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

func mustKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("redistest: generate key: %v", err)
	}
	return k
}

func marshalKey(t testing.TB, k *ecdsa.PrivateKey) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatalf("redistest: marshal key: %v", err)
	}
	return der
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatalf("redistest: write %s: %v", path, err)
	}
}
