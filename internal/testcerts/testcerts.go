// Package testcerts makes certificates for tests: a CA written as PEM into
// t.TempDir(), leaf certificates it signs on demand, and TLS configurations
// that trust it. Keys are ECDSA P-256; everything is valid from a minute ago
// for one day.
package testcerts

import (
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

// CA is a certificate authority for one test.
type CA struct {
	// File is the CA certificate's PEM file.
	File string

	t         testing.TB
	dir       string
	cert      *x509.Certificate
	key       *ecdsa.PrivateKey
	serial    int64
	notBefore time.Time
	notAfter  time.Time
}

// NewCA creates a CA named commonName and writes its certificate to ca.pem
// in a fresh t.TempDir().
func NewCA(t testing.TB, commonName string) *CA {
	t.Helper()
	now := time.Now()
	c := &CA{t: t, dir: t.TempDir(), serial: 1, notBefore: now.Add(-time.Minute), notAfter: now.Add(24 * time.Hour)}
	c.key = c.newKey()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(c.serial), Subject: pkix.Name{CommonName: commonName},
		NotBefore: c.notBefore, NotAfter: c.notAfter,
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &c.key.PublicKey, c.key)
	if err != nil {
		t.Fatalf("testcerts: create CA: %v", err)
	}
	if c.cert, err = x509.ParseCertificate(der); err != nil {
		t.Fatalf("testcerts: parse CA: %v", err)
	}
	c.File = c.write("ca.pem", "CERTIFICATE", der)
	return c
}

// Issue signs a certificate with common name name for server and client
// use, with IP SANs 127.0.0.1 and ::1 and the given DNS names, and writes it
// to name.pem and its key to name-key.pem next to the CA file. name must be
// usable as a file name.
func (c *CA) Issue(name string, dns ...string) (certFile, keyFile string) {
	c.t.Helper()
	c.serial++
	k := c.newKey()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(c.serial), Subject: pkix.Name{CommonName: name},
		NotBefore: c.notBefore, NotAfter: c.notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, DNSNames: dns,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &k.PublicKey, c.key)
	if err != nil {
		c.t.Fatalf("testcerts: create %s certificate: %v", name, err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		c.t.Fatalf("testcerts: marshal %s key: %v", name, err)
	}
	return c.write(name+".pem", "CERTIFICATE", der), c.write(name+"-key.pem", "PRIVATE KEY", kder)
}

// Pool is a certificate pool holding only the CA.
func (c *CA) Pool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(c.cert)
	return pool
}

// ClientConfig trusts the CA and, when certFile is not empty, presents that
// certificate and keyFile's key.
func (c *CA) ClientConfig(certFile, keyFile string) *tls.Config {
	c.t.Helper()
	tc := &tls.Config{RootCAs: c.Pool(), MinVersion: tls.VersionTLS12}
	if certFile != "" {
		tc.Certificates = []tls.Certificate{c.keyPair(certFile, keyFile)}
	}
	return tc
}

func (c *CA) keyPair(certFile, keyFile string) tls.Certificate {
	c.t.Helper()
	kp, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		c.t.Fatalf("testcerts: %v", err)
	}
	return kp
}

func (c *CA) newKey() *ecdsa.PrivateKey {
	c.t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		c.t.Fatalf("testcerts: generate key: %v", err)
	}
	return k
}

func (c *CA) write(name, typ string, der []byte) string {
	c.t.Helper()
	f := filepath.Join(c.dir, name)
	if err := os.WriteFile(f, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		c.t.Fatalf("testcerts: write %s: %v", f, err)
	}
	return f
}
