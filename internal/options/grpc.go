package options

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/credfiles"
	"github.com/envoy-rls/envoy-rls/internal/grpcserve"
)

// grpcTLSOptions are the --grpc-tls-* flags: TLS, and optionally mutual
// TLS, on the gRPC listener (part of Options).
type grpcTLSOptions struct {
	GRPCTLSCert      string
	GRPCTLSKey       string
	GRPCTLSClientCA  string
	GRPCTLSClientSAN string
}

// grpcTLSFlags adds the --grpc-tls-* flags to fs.
func grpcTLSFlags(fs *flag.FlagSet, o *grpcTLSOptions) {
	fs.StringVar(&o.GRPCTLSCert, "grpc-tls-cert", "", "PEM certificate (chain) of the gRPC listener: serve gRPC over TLS (with --grpc-tls-key); read at start")
	fs.StringVar(&o.GRPCTLSKey, "grpc-tls-key", "", "PEM private key of --grpc-tls-cert")
	fs.StringVar(&o.GRPCTLSClientCA, "grpc-tls-client-ca", "", "PEM CA bundle: require every gRPC client to present a certificate it signed (mutual TLS)")
	fs.StringVar(&o.GRPCTLSClientSAN, "grpc-tls-client-san", "", "with --grpc-tls-client-ca: also require this DNS name, URI, IP address or e-mail among the client certificate's subject alternative names")
}

// check refuses TLS flags that cannot work together, without reading the
// files.
func (o *grpcTLSOptions) check(r *refusals) {
	need := func(name, want string) { r.check(name, false, "must be "+want) }
	switch {
	case o.GRPCTLSCert != "" && o.GRPCTLSKey == "":
		need("grpc-tls-key", "given together with --grpc-tls-cert (TLS needs both)")
	case o.GRPCTLSKey != "" && o.GRPCTLSCert == "":
		need("grpc-tls-cert", "given together with --grpc-tls-key (TLS needs both)")
	}
	if o.GRPCTLSClientCA != "" && o.GRPCTLSCert == "" {
		need("grpc-tls-cert", "set when --grpc-tls-client-ca is (mutual TLS is TLS)")
	}
	if o.GRPCTLSClientSAN != "" && o.GRPCTLSClientCA == "" {
		need("grpc-tls-client-ca", "set when --grpc-tls-client-san is (the name is checked on verified client certificates)")
	}
}

// GRPCTLSConfig reads the files and returns the gRPC listener's TLS
// configuration, or nil when TLS is off. The certificate is read once, at
// start.
func (o *grpcTLSOptions) GRPCTLSConfig() (*tls.Config, error) {
	if o.GRPCTLSCert == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(o.GRPCTLSCert, o.GRPCTLSKey)
	if err != nil {
		return nil, fmt.Errorf("--grpc-tls-cert/--grpc-tls-key: must be a PEM certificate and its key: %w", err)
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	if o.GRPCTLSClientCA == "" {
		return tc, nil
	}
	pool, err := credfiles.ReadCAPool("grpc-tls-client-ca", o.GRPCTLSClientCA)
	if err != nil {
		return nil, err
	}
	tc.ClientCAs = pool
	tc.ClientAuth = tls.RequireAndVerifyClientCert
	if san := o.GRPCTLSClientSAN; san != "" {
		tc.VerifyPeerCertificate = func(_ [][]byte, chains [][]*x509.Certificate) error {
			// Called after the chain is verified: chains[0][0] is the leaf.
			if len(chains) == 0 || len(chains[0]) == 0 || !hasSAN(chains[0][0], san) {
				return fmt.Errorf("client certificate does not name %q among its subject alternative names", san)
			}
			return nil
		}
	}
	return tc, nil
}

// hasSAN reports whether c names san as a DNS name, URI, IP address or
// e-mail address.
func hasSAN(c *x509.Certificate, san string) bool {
	if slices.Contains(c.DNSNames, san) || slices.Contains(c.EmailAddresses, san) {
		return true
	}
	for _, ip := range c.IPAddresses {
		if ip.String() == san {
			return true
		}
	}
	for _, u := range c.URIs {
		if u.String() == san {
			return true
		}
	}
	return false
}

// Bounds of the --grpc-* limits.
const (
	// maxGRPCMaxConnections bounds --grpc-max-connections: past a million
	// connections the bound no longer bounds anything a process can hold.
	maxGRPCMaxConnections = 1 << 20
	// minGRPCMaxRecvMsgSize is the smallest --grpc-max-recv-msg-size: an
	// Envoy request with a few descriptors fits in 4 KiB.
	minGRPCMaxRecvMsgSize = 4 << 10
)

// transportFlags adds the --grpc-* limits to fs.
func transportFlags(fs *flag.FlagSet, o *grpcserve.Limits) {
	fs.IntVar(&o.MaxConcurrentStreams, "grpc-max-concurrent-streams", grpcserve.DefaultMaxConcurrentStreams, "calls one gRPC connection may have in flight; more are refused (REFUSED_STREAM) and Envoy opens another connection")
	fs.IntVar(&o.MaxConnections, "grpc-max-connections", grpcserve.DefaultMaxConnections, "open gRPC connections; one more is closed as soon as it is accepted")
	fs.DurationVar(&o.FirstCallTimeout, "grpc-first-call-timeout", grpcserve.DefaultFirstCallTimeout, "close a gRPC connection that has opened no call this long after it was accepted, so that connections that never call cannot hold --grpc-max-connections (one that has called is kept while idle: --grpc-max-connection-idle; 0: never)")
	fs.DurationVar(&o.ReceiveTimeout, "grpc-receive-timeout", grpcserve.DefaultReceiveTimeout, "longest time from a call's headers to the end of its request; a call that has not sent its request by then is cut (DEADLINE_EXCEEDED)")
	fs.IntVar(&o.MaxIncompleteRequests, "grpc-max-incomplete-requests", grpcserve.DefaultMaxIncompleteRequests, "calls, over all gRPC connections, whose request has not fully arrived; one more is refused (RESOURCE_EXHAUSTED)")
	fs.IntVar(&o.MaxRecvMsgSize, "grpc-max-recv-msg-size", grpcserve.DefaultMaxRecvMsgSize, "largest request message in bytes; a larger one is refused (RESOURCE_EXHAUSTED)")
	fs.DurationVar(&o.MaxConnectionIdle, "grpc-max-connection-idle", grpcserve.DefaultMaxConnectionIdle, "close a gRPC connection without calls for this long (GOAWAY; 0: never)")
	fs.DurationVar(&o.MaxConnectionAge, "grpc-max-connection-age", grpcserve.DefaultMaxConnectionAge, "close every gRPC connection after this long, ±10 % (GOAWAY), so that clients spread over new replicas (0: never)")
	fs.DurationVar(&o.MaxConnectionAgeGrace, "grpc-max-connection-age-grace", grpcserve.DefaultMaxConnectionAgeGrace, "how long calls in flight may still take on a connection closed for its age")
	fs.DurationVar(&o.KeepaliveTime, "grpc-keepalive-time", grpcserve.DefaultKeepaliveTime, "ping a gRPC connection quiet for this long")
	fs.DurationVar(&o.KeepaliveTimeout, "grpc-keepalive-timeout", grpcserve.DefaultKeepaliveTimeout, "close a connection whose ping is not answered within this")
	fs.DurationVar(&o.KeepaliveMinTime, "grpc-keepalive-min-time", grpcserve.DefaultKeepaliveMinTime, "shortest interval between client pings; a client pinging more often is closed")
	fs.BoolVar(&o.KeepalivePermitWithoutStream, "grpc-keepalive-permit-without-stream", grpcserve.DefaultKeepalivePermitWithoutStream, "accept client pings on connections without calls in flight")
}

// transportAccepts says what each --grpc-* limit takes, as errors put it
// after "must be". Read only.
var transportAccepts = map[string]string{
	"grpc-max-concurrent-streams":   fmt.Sprintf("an integer between 1 and %d", math.MaxUint32),
	"grpc-max-connections":          fmt.Sprintf("an integer between 1 and %d", maxGRPCMaxConnections),
	"grpc-first-call-timeout":       "0 (never) or a positive duration such as 5s",
	"grpc-receive-timeout":          "a positive duration such as 5s",
	"grpc-max-incomplete-requests":  fmt.Sprintf("an integer between 1 and %d", maxGRPCMaxConnections),
	"grpc-max-recv-msg-size":        fmt.Sprintf("a size in bytes between %d and %d", minGRPCMaxRecvMsgSize, math.MaxInt32),
	"grpc-max-connection-idle":      "0 (never) or a positive duration such as 5m",
	"grpc-max-connection-age":       "0 (never) or a positive duration such as 5m",
	"grpc-max-connection-age-grace": "0 or a positive duration such as 30s",
	"grpc-keepalive-time":           "a duration of at least 1s",
	"grpc-keepalive-timeout":        "a duration of at least 1s",
	"grpc-keepalive-min-time":       "0 or a positive duration such as 5s",
}

// checkTransport refuses every --grpc-* value out of range.
func checkTransport(o *grpcserve.Limits, r *refusals) {
	bad := func(name string, ok bool) { r.check(name, ok, "must be "+transportAccepts[name]) }
	bad("grpc-max-concurrent-streams", o.MaxConcurrentStreams >= 1 && int64(o.MaxConcurrentStreams) <= math.MaxUint32)
	bad("grpc-max-connections", o.MaxConnections >= 1 && o.MaxConnections <= maxGRPCMaxConnections)
	bad("grpc-first-call-timeout", o.FirstCallTimeout >= 0)
	bad("grpc-receive-timeout", o.ReceiveTimeout > 0)
	bad("grpc-max-incomplete-requests", o.MaxIncompleteRequests >= 1 && o.MaxIncompleteRequests <= maxGRPCMaxConnections)
	bad("grpc-max-recv-msg-size", o.MaxRecvMsgSize >= minGRPCMaxRecvMsgSize && o.MaxRecvMsgSize <= math.MaxInt32)
	bad("grpc-max-connection-idle", o.MaxConnectionIdle >= 0)
	bad("grpc-max-connection-age", o.MaxConnectionAge >= 0)
	bad("grpc-max-connection-age-grace", o.MaxConnectionAgeGrace >= 0)
	// gRPC raises a keepalive time or timeout below 1s to 1s.
	bad("grpc-keepalive-time", o.KeepaliveTime >= time.Second)
	bad("grpc-keepalive-timeout", o.KeepaliveTimeout >= time.Second)
	bad("grpc-keepalive-min-time", o.KeepaliveMinTime >= 0)
}
