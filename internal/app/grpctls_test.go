package app

import (
	"context"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/envoy-rls/envoy-rls/internal/testcerts"
)

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
	_, err = rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, userRequest("a"))
	return err
}

func TestGRPCMutualTLS(t *testing.T) {
	pki := testcerts.NewCA(t, "test CA")
	srvCert, srvKey := pki.Issue("server")
	envoyCert, envoyKey := pki.Issue("envoy", "envoy.gateway")
	otherCert, otherKey := pki.Issue("other", "someone.else")
	rules := writeRules(t, t.TempDir(), testRules)

	r := startServe(t, []string{"--config", rules, "--grpc-tls-cert", srvCert, "--grpc-tls-key", srvKey,
		"--grpc-tls-client-ca", pki.File, "--grpc-tls-client-san", "envoy.gateway"}, nil, hooks{})
	if err := callWith(t, r.grpcAddr, credentials.NewTLS(pki.ClientConfig(envoyCert, envoyKey))); err != nil {
		t.Errorf("client with the named certificate: %v", err)
	}
	if err := callWith(t, r.grpcAddr, credentials.NewTLS(pki.ClientConfig(otherCert, otherKey))); err == nil {
		t.Error("client certificate without the required SAN: call succeeded")
	}
	if err := callWith(t, r.grpcAddr, credentials.NewTLS(pki.ClientConfig("", ""))); err == nil {
		t.Error("client without a certificate: call succeeded")
	}
	if err := callWith(t, r.grpcAddr, insecure.NewCredentials()); err == nil {
		t.Error("plaintext client: call succeeded")
	}
}

func TestGRPCServerTLSWithoutClientCA(t *testing.T) {
	pki := testcerts.NewCA(t, "test CA")
	srvCert, srvKey := pki.Issue("server")
	rules := writeRules(t, t.TempDir(), testRules)
	r := startServe(t, []string{"--config", rules, "--grpc-tls-cert", srvCert, "--grpc-tls-key", srvKey}, nil, hooks{})
	if err := callWith(t, r.grpcAddr, credentials.NewTLS(pki.ClientConfig("", ""))); err != nil {
		t.Errorf("TLS client without a certificate: %v", err)
	}
}

// Unreadable TLS files fail start, naming the flags.
func TestGRPCTLSFileErrors(t *testing.T) {
	rules := writeRules(t, t.TempDir(), testRules)
	err := run(context.Background(), []string{"serve", "--config", rules, "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0",
		"--grpc-tls-cert", "/nonexistent/c.pem", "--grpc-tls-key", "/nonexistent/k.pem"}, noEnv, &syncBuffer{}, &syncBuffer{}, hooks{})
	if err == nil || !strings.Contains(err.Error(), "--grpc-tls-cert/--grpc-tls-key: must be a PEM certificate and its key") {
		t.Errorf("missing certificate files: %v", err)
	}
}
