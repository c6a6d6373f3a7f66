// Package xds receives rate-limit rules from an xDS management server
// (Envoy Gateway, or any go-control-plane server) as RateLimitConfig
// resources over the aggregated discovery service, state of the world, and
// compiles them: each resource becomes a descriptors.Document, validated
// by the compiler of the rule files.
//
// A Client keeps one stream open to the server: it subscribes as its node to
// TypeURL, hands every response's resources to Config.Apply, acknowledges
// the version when Apply accepts it and refuses it (with Apply's error as
// the error detail, keeping the last accepted version) when it does not, and
// reconnects with a jittered, growing wait when the stream or the server
// fails. It holds no rules itself: Apply owns the snapshot.
package xds

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"
)

// typeURL is the type of the resources the client subscribes to.
const typeURL = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"

// Defaults of Config.
const (
	DefaultNodeID           = "default"
	DefaultRetryInterval    = 3 * time.Second
	DefaultMaxRetryInterval = 60 * time.Second
	// maxErrorDetail bounds the error text sent back with a refused version.
	maxErrorDetail = 4096
	// maxMessageSize bounds one DiscoveryResponse (the rule set limits of
	// the compiler apply after decoding).
	maxMessageSize = 64 << 20
	// keepaliveTime and KeepaliveTimeout: the stream's connection is pinged
	// after KeepaliveTime without activity and closed when the ping is not
	// answered within KeepaliveTimeout.
	keepaliveTime    = 5 * time.Minute
	keepaliveTimeout = 20 * time.Second
)

// State is the connection state a Client reports.
type State int

const (
	// Disconnected: no stream is open; the client waits to retry.
	disconnected State = iota
	// Connecting: a stream is being opened.
	connecting
	// Connected: the stream is open and the subscription was sent.
	Connected
)

func (s State) String() string {
	switch s {
	case connecting:
		return "connecting"
	case Connected:
		return "connected"
	}
	return "disconnected"
}

// Config configures a Client.
type Config struct {
	// Server is the management server's address, host:port (Required).
	Server string
	// NodeID is the node the client subscribes as (DefaultNodeID when empty).
	NodeID string
	// NodeMetadata is sent as the node's metadata (Optional).
	NodeMetadata map[string]string
	// TLS secures the connection (Optional; plaintext when nil).
	TLS *TLS
	// Headers are sent as gRPC metadata on the stream (Optional).
	Headers map[string]string
	// RetryInterval is the first wait before reconnecting
	// (DefaultRetryInterval when zero); each failed attempt doubles it up to
	// MaxRetryInterval (DefaultMaxRetryInterval when zero). Each wait is
	// drawn at random between half and all of the interval.
	RetryInterval    time.Duration
	MaxRetryInterval time.Duration
	// Apply receives the resources of one version (Required). It returns
	// nil to accept the version, or the reason it is refused. It is called
	// from the Client's goroutine, one version at a time.
	Apply func(version string, resources []*rlsconf.RateLimitConfig) error
	// OnState, if not nil, is told every change of the connection state,
	// with the error that ended a stream (nil otherwise).
	OnState func(State, error)
	// OnResponse, if not nil, is told each version received and whether it
	// was acknowledged, after the answer was sent.
	OnResponse func(version string, acked bool)
	// After waits before a reconnection (time.After when nil).
	After func(time.Duration) <-chan time.Time
	// DialOptions are added to the client connection's options (Optional).
	DialOptions []grpc.DialOption
}

// TLS configures TLS (1.2 or later) to the server, whose certificate is
// always verified.
type TLS struct {
	// RootCAs verify the server's certificate (Optional; the system roots
	// when nil).
	RootCAs *x509.CertPool
	// CertFile and KeyFile hold the PEM client certificate and key for
	// mutual TLS (Optional; both or neither). They are read at New, to
	// fail early, and again at each handshake, so that a rotated
	// certificate is used from the next connection on.
	CertFile, KeyFile string
	// ServerName is the name the server's certificate must hold
	// (Optional; the host of Config.Server when empty).
	ServerName string
}

func (t *TLS) credentials() (credentials.TransportCredentials, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName, RootCAs: t.RootCAs}
	if t.CertFile != "" || t.KeyFile != "" {
		cert, key := t.CertFile, t.KeyFile
		if _, err := tls.LoadX509KeyPair(cert, key); err != nil {
			return nil, fmt.Errorf("xds: client certificate %q, key %q: %w", cert, key, err)
		}
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			c, err := tls.LoadX509KeyPair(cert, key)
			if err != nil {
				return nil, fmt.Errorf("xds: client certificate: %w", err)
			}
			return &c, nil
		}
	}
	return credentials.NewTLS(cfg), nil
}

// client is an ADS state-of-the-world subscriber of RateLimitConfig.
type client struct {
	cfg  Config
	node *corev3.Node
	conn *grpc.ClientConn
	// lastGood is the last version Apply accepted ("" before the first).
	lastGood string
	// refused is the last version refused: its digest, its error and the
	// wait before the next refusal of the same content.
	refused     [sha256.Size]byte
	refusedErr  error
	refusedWait time.Duration
}

// newClient checks cfg and prepares the connection; it does not dial (Run does).
func newClient(cfg Config) (*client, error) {
	if cfg.Server == "" {
		return nil, errors.New("xds: no server address")
	}
	if cfg.Apply == nil {
		return nil, errors.New("xds: no Apply function")
	}
	if cfg.NodeID == "" {
		cfg.NodeID = DefaultNodeID
	}
	if cfg.RetryInterval <= 0 {
		cfg.RetryInterval = DefaultRetryInterval
	}
	if cfg.MaxRetryInterval <= 0 {
		cfg.MaxRetryInterval = DefaultMaxRetryInterval
	}
	cfg.MaxRetryInterval = max(cfg.MaxRetryInterval, cfg.RetryInterval)
	if cfg.After == nil {
		cfg.After = time.After
	}
	node := &corev3.Node{Id: cfg.NodeID, UserAgentName: "envoy-rls"}
	if len(cfg.NodeMetadata) > 0 {
		fields := make(map[string]any, len(cfg.NodeMetadata))
		for k, v := range cfg.NodeMetadata {
			fields[k] = v
		}
		md, err := structpb.NewStruct(fields)
		if err != nil {
			return nil, fmt.Errorf("xds: node metadata: %w", err)
		}
		node.Metadata = md
	}
	creds := insecure.NewCredentials()
	if cfg.TLS != nil {
		var err error
		if creds, err = cfg.TLS.credentials(); err != nil {
			return nil, err
		}
	}
	opts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		// A server that vanishes without closing the connection is found
		// by a ping within KeepaliveTime+KeepaliveTimeout; KeepaliveTime is
		// grpc-go servers' default minimum, so they do not refuse it.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: keepaliveTime, Timeout: keepaliveTimeout}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessageSize)),
	}, cfg.DialOptions...)
	conn, err := grpc.NewClient(cfg.Server, opts...)
	if err != nil {
		return nil, fmt.Errorf("xds: server %s: %w", cfg.Server, err)
	}
	return &client{cfg: cfg, node: node, conn: conn}, nil
}

// Run subscribes until ctx ends, reconnecting after every failure, then
// closes the connection. It returns nil when ctx ends.
func (c *client) Run(ctx context.Context) error {
	defer c.conn.Close()
	wait := c.cfg.RetryInterval
	for {
		c.state(connecting, nil)
		received, err := c.stream(ctx)
		if ctx.Err() != nil {
			c.state(disconnected, nil)
			return nil
		}
		c.state(disconnected, err)
		if received {
			wait = c.cfg.RetryInterval
		}
		d := wait/2 + rand.N(wait/2+1)
		select {
		case <-ctx.Done():
			return nil
		case <-c.cfg.After(d):
		}
		wait = min(wait*2, c.cfg.MaxRetryInterval)
	}
}

func (c *client) state(s State, err error) {
	if c.cfg.OnState != nil {
		c.cfg.OnState(s, err)
	}
}

// stream runs one ADS stream until it fails. received is true when the
// server answered at least once.
func (c *client) stream(ctx context.Context) (received bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for k, v := range c.cfg.Headers {
		ctx = metadata.AppendToOutgoingContext(ctx, k, v)
	}
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(c.conn).StreamAggregatedResources(ctx, grpc.WaitForReady(false))
	if err != nil {
		return false, fmt.Errorf("xds: opening the stream to %s: %w", c.cfg.Server, err)
	}
	// The first request subscribes; its version tells a server that
	// restarted which version this client holds.
	if err := st.Send(&discoveryv3.DiscoveryRequest{Node: c.node, TypeUrl: typeURL, VersionInfo: c.lastGood}); err != nil {
		return false, fmt.Errorf("xds: subscribing at %s: %w", c.cfg.Server, err)
	}
	for {
		resp, err := st.Recv()
		if err != nil {
			return received, fmt.Errorf("xds: stream from %s: %w", c.cfg.Server, err)
		}
		if !received {
			received = true
			c.state(Connected, nil)
		}
		if resp.GetTypeUrl() != typeURL {
			continue // not ours: an ADS server may answer other subscriptions
		}
		req := &discoveryv3.DiscoveryRequest{TypeUrl: typeURL, ResponseNonce: resp.GetNonce()}
		var applyErr error
		sum := digest(resp)
		if c.refusedErr != nil && sum == c.refused {
			// A state-of-the-world server sends a refused version again
			// after each refusal: answer it after a growing pause, without
			// applying it again, so that the exchange does not spin.
			select {
			case <-ctx.Done():
				return received, ctx.Err()
			case <-c.cfg.After(c.refusedWait):
			}
			c.refusedWait = min(c.refusedWait*2, c.cfg.MaxRetryInterval)
			applyErr = c.refusedErr
		} else {
			applyErr = c.apply(resp)
			c.refusedErr, c.refused, c.refusedWait = applyErr, sum, c.cfg.RetryInterval
		}
		if applyErr == nil {
			c.lastGood = resp.GetVersionInfo()
		} else {
			req.ErrorDetail = &status.Status{Code: int32(codes.InvalidArgument), Message: truncate(applyErr.Error(), maxErrorDetail)}
		}
		req.VersionInfo = c.lastGood
		if err := st.Send(req); err != nil {
			return received, fmt.Errorf("xds: answering %s: %w", c.cfg.Server, err)
		}
		if c.cfg.OnResponse != nil {
			c.cfg.OnResponse(resp.GetVersionInfo(), applyErr == nil)
		}
	}
}

// apply decodes the resources of resp and hands them to Apply.
func (c *client) apply(resp *discoveryv3.DiscoveryResponse) error {
	cs := make([]*rlsconf.RateLimitConfig, 0, len(resp.GetResources()))
	for i, a := range resp.GetResources() {
		if a.GetTypeUrl() != typeURL {
			return fmt.Errorf("resource %d: type %q, want %q", i, a.GetTypeUrl(), typeURL)
		}
		var rc rlsconf.RateLimitConfig
		if err := a.UnmarshalTo(&rc); err != nil {
			return fmt.Errorf("resource %d: %w", i, err)
		}
		cs = append(cs, &rc)
	}
	return c.cfg.Apply(resp.GetVersionInfo(), cs)
}

// digest identifies a response's version and resources.
func digest(resp *discoveryv3.DiscoveryResponse) [sha256.Size]byte {
	h := sha256.New()
	field := func(b []byte) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	field([]byte(resp.GetVersionInfo()))
	for _, a := range resp.GetResources() {
		field([]byte(a.GetTypeUrl()))
		field(a.GetValue())
	}
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}

// truncate cuts s to at most n bytes at a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut] + "…"
}
