package app

import (
	"context"
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
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// testPKI is a CA written to a temporary directory, signing certificates
// on demand.
type testPKI struct {
	t      *testing.T
	dir    string
	ca     *x509.Certificate
	caKey  *ecdsa.PrivateKey
	CAFile string
	serial int64
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	p := &testPKI{t: t, dir: t.TempDir(), serial: 1}
	p.caKey = p.key()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &p.caKey.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	if p.ca, err = x509.ParseCertificate(der); err != nil {
		t.Fatal(err)
	}
	p.CAFile = p.write("ca.pem", "CERTIFICATE", der)
	return p
}

func (p *testPKI) key() *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		p.t.Fatal(err)
	}
	return k
}

func (p *testPKI) write(name, typ string, der []byte) string {
	f := filepath.Join(p.dir, name)
	if err := os.WriteFile(f, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		p.t.Fatal(err)
	}
	return f
}

// issue signs a certificate for 127.0.0.1 and the given DNS names, for
// server and client use, and returns its certificate and key files.
func (p *testPKI) issue(name string, dns ...string) (certFile, keyFile string) {
	p.t.Helper()
	p.serial++
	k := p.key()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(p.serial), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, DNSNames: dns,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &k.PublicKey, p.caKey)
	if err != nil {
		p.t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		p.t.Fatal(err)
	}
	return p.write(name+".pem", "CERTIFICATE", der), p.write(name+"-key.pem", "PRIVATE KEY", kder)
}

// clientTLS trusts the CA and presents certFile when it is not empty.
func (p *testPKI) clientTLS(certFile, keyFile string) *tls.Config {
	pool := x509.NewCertPool()
	pool.AddCert(p.ca)
	tc := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if certFile != "" {
		c, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			p.t.Fatal(err)
		}
		tc.Certificates = []tls.Certificate{c}
	}
	return tc
}

// callWith makes one ShouldRateLimit call over creds and returns its error.
func callWith(t *testing.T, addr string, creds credentials.TransportCredentials) error {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{
		Domain:      "app",
		Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "user", Value: "a"}}}},
	})
	return err
}

func TestGRPCMutualTLS(t *testing.T) {
	pki := newTestPKI(t)
	srvCert, srvKey := pki.issue("server")
	envoyCert, envoyKey := pki.issue("envoy", "envoy.gateway")
	otherCert, otherKey := pki.issue("other", "someone.else")
	rules := writeRules(t, t.TempDir(), testRules)

	r := startServe(t, []string{"--config", rules, "--grpc-tls-cert", srvCert, "--grpc-tls-key", srvKey,
		"--grpc-tls-client-ca", pki.CAFile, "--grpc-tls-client-san", "envoy.gateway"}, nil, hooks{})
	if err := callWith(t, r.grpcAddr, credentials.NewTLS(pki.clientTLS(envoyCert, envoyKey))); err != nil {
		t.Errorf("client with the named certificate: %v", err)
	}
	if err := callWith(t, r.grpcAddr, credentials.NewTLS(pki.clientTLS(otherCert, otherKey))); err == nil {
		t.Error("client certificate without the required SAN: call succeeded")
	}
	if err := callWith(t, r.grpcAddr, credentials.NewTLS(pki.clientTLS("", ""))); err == nil {
		t.Error("client without a certificate: call succeeded")
	}
	if err := callWith(t, r.grpcAddr, insecure.NewCredentials()); err == nil {
		t.Error("plaintext client: call succeeded")
	}
}

func TestGRPCServerTLSWithoutClientCA(t *testing.T) {
	pki := newTestPKI(t)
	srvCert, srvKey := pki.issue("server")
	rules := writeRules(t, t.TempDir(), testRules)
	r := startServe(t, []string{"--config", rules, "--grpc-tls-cert", srvCert, "--grpc-tls-key", srvKey}, nil, hooks{})
	if err := callWith(t, r.grpcAddr, credentials.NewTLS(pki.clientTLS("", ""))); err != nil {
		t.Errorf("TLS client without a certificate: %v", err)
	}
}

func TestGRPCTLSFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--grpc-tls-cert", "c.pem"}, `--grpc-tls-key (or ENVOY_RLS_GRPC_TLS_KEY) is not set: must be given together with --grpc-tls-cert`},
		{[]string{"--grpc-tls-key", "k.pem"}, `--grpc-tls-cert (or ENVOY_RLS_GRPC_TLS_CERT) is not set: must be given together with --grpc-tls-key`},
		{[]string{"--grpc-tls-client-ca", "ca.pem"}, `--grpc-tls-cert (or ENVOY_RLS_GRPC_TLS_CERT) is not set: must be set when --grpc-tls-client-ca is`},
		{[]string{"--grpc-tls-cert", "c", "--grpc-tls-key", "k", "--grpc-tls-client-san", "x"}, `--grpc-tls-client-ca (or ENVOY_RLS_GRPC_TLS_CLIENT_CA) is not set: must be set when --grpc-tls-client-san is`},
	} {
		err := CheckServeArgs(append([]string{"--config", "r"}, tc.args...), noEnv)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want %q", tc.args, err, tc.want)
		}
	}
	// Unreadable files fail start, naming the flags.
	rules := writeRules(t, t.TempDir(), testRules)
	err := run(context.Background(), []string{"serve", "--config", rules, "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0",
		"--grpc-tls-cert", "/nonexistent/c.pem", "--grpc-tls-key", "/nonexistent/k.pem"}, noEnv, &syncBuffer{}, &syncBuffer{}, hooks{})
	if err == nil || !strings.Contains(err.Error(), "--grpc-tls-cert/--grpc-tls-key: must be a PEM certificate and its key") {
		t.Errorf("missing certificate files: %v", err)
	}
}

// TestHealthcheck: the reference service's probe answers 200 OK while
// serving and 500 once the process drains.
func TestHealthcheck(t *testing.T) {
	rules := writeRules(t, t.TempDir(), testRules)
	bs := &blockingStore{entered: make(chan struct{}, 1), release: make(chan struct{})}
	r := startServe(t, []string{"--config", rules}, nil, hooks{wrapStore: func(s limiter.Store) limiter.Store {
		bs.Store = s
		return bs
	}})
	if code, body := r.get(t, "/healthcheck"); code != 200 || body != "OK\n" {
		t.Fatalf("/healthcheck %d %q, want 200 OK", code, body)
	}
	// Keep a call in flight so that the drain lasts until released.
	result := make(chan error, 1)
	go func() { result <- callWith(t, r.grpcAddr, insecure.NewCredentials()) }()
	<-bs.entered
	r.cancel()
	waitFor(t, func() bool {
		code, body := r.get(t, "/healthcheck")
		return code == 500 && strings.Contains(body, "draining")
	})
	close(bs.release)
	if err := <-result; err != nil {
		t.Fatalf("in-flight call: %v", err)
	}
}

// TestShadowModeFlag: with --shadow-mode no rule denies; the denials are
// counted as shadow_over_limit.
func TestShadowModeFlag(t *testing.T) {
	rules := writeRules(t, t.TempDir(), testRules) // 2 a minute
	r := startServe(t, []string{"--config", rules, "--shadow-mode"}, nil, hooks{})
	for i := range 3 {
		if resp := r.check(t, "alice"); resp.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("call %d: %v, want OK in shadow mode", i+1, resp.OverallCode)
		}
	}
	if _, body := r.get(t, "/metrics"); !strings.Contains(body, `result="shadow_over_limit"} 1`) {
		t.Errorf("no shadow_over_limit decision counted:\n%s", body)
	}
}
