package testcerts

import (
	"crypto/tls"
	"crypto/x509"
	"testing"
)

func TestIssueVerifiesAgainstCA(t *testing.T) {
	ca := NewCA(t, "test CA")
	certFile, keyFile := ca.Issue("leaf", "svc.example")
	kp, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(kp.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"127.0.0.1", "::1", "svc.example"} {
		for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
			opts := x509.VerifyOptions{Roots: ca.Pool(), DNSName: name, KeyUsages: []x509.ExtKeyUsage{usage}}
			if _, err := leaf.Verify(opts); err != nil {
				t.Errorf("verify %s for usage %v: %v", name, usage, err)
			}
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: NewCA(t, "other CA").Pool()}); err == nil {
		t.Error("a certificate verified against a CA that did not sign it")
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: ca.Pool(), DNSName: "other.example"}); err == nil {
		t.Error("a certificate verified for a name it does not hold")
	}
}

func TestClientConfig(t *testing.T) {
	ca := NewCA(t, "test CA")
	if c := ca.ClientConfig("", ""); len(c.Certificates) != 0 || c.RootCAs == nil {
		t.Errorf("without a certificate: %d certificates, roots %v", len(c.Certificates), c.RootCAs)
	}
	certFile, keyFile := ca.Issue("client")
	if c := ca.ClientConfig(certFile, keyFile); len(c.Certificates) != 1 {
		t.Errorf("with a certificate: %d certificates, want 1", len(c.Certificates))
	}
}
