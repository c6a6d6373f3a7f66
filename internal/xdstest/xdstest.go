// Package xdstest runs a go-control-plane xDS management server for tests:
// it serves RateLimitConfig resources from a snapshot cache over the
// aggregated discovery service, on 127.0.0.1, with mutual TLS from
// certificates made for the test, and records every request it receives
// (acknowledgements and refusals with their error detail).
package xdstest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	"github.com/envoy-rls/envoy-rls/internal/testcerts"
)

// Certs are PEM files made for one test: a CA, a server certificate for
// 127.0.0.1 and localhost, and a client certificate, all signed by the CA.
type Certs struct {
	CA, ServerCert, ServerKey, ClientCert, ClientKey string
}

// NewCerts writes a fresh CA and certificates into a temporary directory.
func NewCerts(t testing.TB) Certs {
	t.Helper()
	ca := testcerts.NewCA(t, "xdstest CA")
	c := Certs{CA: ca.File}
	c.ServerCert, c.ServerKey = ca.Issue("xds-server", "localhost")
	c.ClientCert, c.ClientKey = ca.Issue("xds-client", "localhost")
	return c
}

// Request is one DiscoveryRequest the server received.
type Request struct {
	Node        string
	Version     string
	Nonce       string
	ErrorDetail string // empty for a subscription or an acknowledgement
	Metadata    metadata.MD
}

// Server is a running xDS management server.
type Server struct {
	t     testing.TB
	certs Certs
	cache cachev3.SnapshotCache
	node  string

	mu       sync.Mutex
	addr     string
	gs       *grpc.Server
	requests []Request
	changed  chan struct{} // closed and replaced on each request
}

// Start serves on 127.0.0.1 (a free port) with mutual TLS; the snapshots
// are for node. It stops at the end of the test.
func Start(t testing.TB, certs Certs, node string) *Server {
	t.Helper()
	s := &Server{t: t, certs: certs, node: node, addr: "127.0.0.1:0", changed: make(chan struct{})}
	s.cache = cachev3.NewSnapshotCache(true, cachev3.IDHash{}, nil)
	s.Restart()
	t.Cleanup(s.Stop)
	return s
}

// Addr is the server's address (the same across Restart).
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// Restart starts serving again on the same address after Stop.
func (s *Server) Restart() {
	s.t.Helper()
	cert, err := tls.LoadX509KeyPair(s.certs.ServerCert, s.certs.ServerKey)
	if err != nil {
		s.t.Fatal(err)
	}
	caPEM, err := os.ReadFile(s.certs.CA)
	if err != nil {
		s.t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	creds := credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12})
	s.mu.Lock()
	defer s.mu.Unlock()
	var lis net.Listener
	deadline := time.Now().Add(10 * time.Second)
	for {
		lis, err = net.Listen("tcp", s.addr)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond) // the port is released by the stopped server
	}
	if err != nil {
		s.t.Fatal(err)
	}
	s.addr = lis.Addr().String()
	cb := serverv3.CallbackFuncs{
		StreamRequestFunc: func(_ int64, req *discoveryv3.DiscoveryRequest) error {
			s.record(req, nil)
			return nil
		},
	}
	srv := serverv3.NewServer(context.Background(), s.cache, cb)
	gs := grpc.NewServer(grpc.Creds(creds), grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		md, _ := metadata.FromIncomingContext(ss.Context())
		s.record(nil, md)
		return handler(srv, ss)
	}))
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(gs, srv)
	s.gs = gs
	go func() { _ = gs.Serve(lis) }()
}

// Stop stops the server, closing every stream.
func (s *Server) Stop() {
	s.mu.Lock()
	gs := s.gs
	s.gs = nil
	s.mu.Unlock()
	if gs != nil {
		gs.Stop()
	}
}

// lastMD is the metadata of the latest stream, kept for Request.Metadata.
func (s *Server) record(req *discoveryv3.DiscoveryRequest, md metadata.MD) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if req == nil {
		s.requests = append(s.requests, Request{Metadata: md, Nonce: "(stream)"})
	} else {
		r := Request{Node: req.GetNode().GetId(), Version: req.GetVersionInfo(), Nonce: req.GetResponseNonce()}
		if d := req.GetErrorDetail(); d != nil {
			r.ErrorDetail = d.GetMessage()
		}
		s.requests = append(s.requests, r)
	}
	close(s.changed)
	s.changed = make(chan struct{})
}

// Set serves version with the given resources to the node.
func (s *Server) Set(version string, cs ...*rlsconf.RateLimitConfig) {
	s.t.Helper()
	res := make([]types.Resource, 0, len(cs))
	for _, c := range cs {
		res = append(res, c)
	}
	snap, err := cachev3.NewSnapshot(version, map[resourcev3.Type][]types.Resource{resourcev3.RateLimitConfigType: res})
	if err != nil {
		s.t.Fatal(err)
	}
	if err := s.cache.SetSnapshot(context.Background(), s.node, snap); err != nil {
		s.t.Fatal(err)
	}
}

// Requests returns the requests received so far (a stream's opening is
// recorded with Nonce "(stream)" and its metadata).
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Await waits until a received request satisfies ok, and returns it.
func (s *Server) Await(timeout time.Duration, ok func(Request) bool) (Request, bool) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	seen := 0
	for {
		s.mu.Lock()
		reqs, ch := s.requests[seen:], s.changed
		seen = len(s.requests)
		s.mu.Unlock()
		for _, r := range reqs {
			if ok(r) {
				return r, true
			}
		}
		select {
		case <-ch:
		case <-deadline.C:
			return Request{}, false
		}
	}
}

// Acked reports a request acknowledging version.
func Acked(version string) func(Request) bool {
	return func(r Request) bool {
		return r.Nonce != "" && r.Nonce != "(stream)" && r.ErrorDetail == "" && r.Version == version
	}
}

// Nacked reports a request refusing a version while keeping kept.
func Nacked(kept string) func(Request) bool {
	return func(r Request) bool { return r.ErrorDetail != "" && r.Version == kept }
}
