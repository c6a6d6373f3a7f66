package grpcserve

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/envoy-rls/envoy-rls/internal/polltest"
	"github.com/envoy-rls/envoy-rls/internal/testcerts"
)

// h2Preface is what an HTTP/2 client sends first: the connection preface
// and an empty SETTINGS frame. A connection that sends it and nothing more
// is a served connection that never calls.
const h2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + "\x00\x00\x00\x04\x00\x00\x00\x00\x00"

// idleConn dials addr on network and, over TLS when tc is not nil (after the
// handshake), sends preface (nothing when empty).
func idleConn(t *testing.T, network, addr string, tc *tls.Config, preface string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout(network, addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if tc != nil && preface != "" {
		tlsConn := tls.Client(c, tc)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tlsConn.HandshakeContext(ctx); err != nil {
			t.Fatal(err)
		}
		c = tlsConn
	}
	if _, err := io.WriteString(c, preface); err != nil {
		t.Fatal(err)
	}
	return c
}

// closedByServer reads c until it fails, at most within d: true when the
// server closed it.
func closedByServer(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, 4096)
	for {
		if _, err := c.Read(buf); err != nil {
			return !isTimeout(err)
		}
	}
}

// countingClient is a gRPC client of addr on network, over TLS with tc when not nil,
// that counts the connections it dials.
func countingClient(t *testing.T, network, addr string, tc *tls.Config) (healthpb.HealthClient, *atomic.Int32) {
	t.Helper()
	dials := new(atomic.Int32)
	creds := insecure.NewCredentials()
	if tc != nil {
		creds = credentials.NewTLS(tc)
	}
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(creds),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
			dials.Add(1)
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return healthpb.NewHealthClient(conn), dials
}

func healthCheck(t *testing.T, c healthpb.HealthClient, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	hr, err := c.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
	if err != nil || hr.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health check: %v %v", hr, err)
	}
}

// TestConnectionsWithoutCallsAreClosed: connections that never call fill
// every place but one, which a client that called once holds; a new client
// is reset while they do. Each is closed at the first-call timeout, the
// new client is then served, and the client that called once keeps its
// connection, idle longer than the timeout (Envoy's pooled connection).
// Over TLS too: the server finds the connection of a call through TLS.
func TestConnectionsWithoutCallsAreClosed(t *testing.T) {
	for _, c := range []struct {
		name, network string
		tls           bool
	}{{"plaintext", "tcp", false}, {"TLS", "tcp", true}, {"unix socket", "unix", false}} {
		t.Run(c.name, func(t *testing.T) { testFirstCallTimeout(t, c.network, c.tls) })
	}
}

func testFirstCallTimeout(t *testing.T, network string, tlsOn bool) {
	const (
		places = 4
		// Long enough that the late client's first attempt, made at once,
		// finds every place taken.
		firstCall = time.Second
	)
	cfg := Config{
		Limits: Limits{MaxConcurrentStreams: DefaultMaxConcurrentStreams, MaxConnections: places, FirstCallTimeout: firstCall,
			ReceiveTimeout: time.Minute, MaxIncompleteRequests: 8, MaxRecvMsgSize: DefaultMaxRecvMsgSize,
			KeepaliveTime: time.Minute, KeepaliveTimeout: time.Minute},
		Registerer: prometheus.NewRegistry(),
	}
	var client *tls.Config
	if tlsOn {
		pki := testcerts.NewCA(t, "test CA")
		cert, key := pki.Issue("server")
		kp, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			t.Fatal(err)
		}
		cfg.TLS = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{kp}}
		client = pki.ClientConfig("", "")
		client.NextProtos, client.ServerName = []string{"h2"}, "127.0.0.1"
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:0"
	if network == "unix" {
		addr = filepath.Join(t.TempDir(), "grpc.sock")
	}
	lis, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.Drain(time.Second)
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	addr = lis.Addr().String()

	envoy, envoyDials := countingClient(t, network, addr, client)
	healthCheck(t, envoy, 10*time.Second)

	// Connections that never call take the other places: one sends nothing
	// (not even a TLS hello), the others the HTTP/2 preface (after the TLS
	// handshake, over TLS).
	idle := []net.Conn{idleConn(t, network, addr, client, "")}
	for range places - 2 {
		idle = append(idle, idleConn(t, network, addr, client, h2Preface))
	}
	polltest.Eventually(t, 10*time.Second, 5*time.Millisecond, "every place taken", func() error {
		if got := value(srv.conns.gauge); got != places {
			return fmt.Errorf("%v open", got)
		}
		return nil
	})

	// A new client now is reset on accept; it retries and is served once
	// the connections that never called are closed.
	refusedBefore := value(srv.conns.refused)
	late, _ := countingClient(t, network, addr, client)
	healthCheck(t, late, 20*time.Second)
	if got := value(srv.conns.refused); got <= refusedBefore {
		t.Errorf("the late client was never refused (refused %v): the places were not full", got)
	}
	for i, c := range idle {
		if !closedByServer(c, 10*time.Second) {
			t.Fatalf("connection %d without a call: not closed by the server", i)
		}
	}
	if got := value(srv.conns.callless); got != float64(len(idle)) {
		t.Errorf("grpc_connections_without_call_closed_total = %v, want %d (the connections that never called, and only them)", got, len(idle))
	}
	// The client that called once, idle since for longer than the timeout,
	// still calls over its first connection.
	healthCheck(t, envoy, 10*time.Second)
	if n := envoyDials.Load(); n != 1 {
		t.Errorf("the client that called once dialled %d connections, want 1: its connection was closed", n)
	}
}
