// Package grpcserve serves the gRPC listener: RateLimitService (pkg/rls)
// with gRPC health and reflection, under bounds on what connections,
// streams and slow requests may hold (the receive guard is the
// rls.Admission of every call), over TLS when configured, and drained
// within a bounded time on stop. It knows nothing of flags: the binary
// passes it a Config.
package grpcserve

import (
	"context"
	"crypto/tls"
	"errors"
	"math"
	"net"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/tap"

	"github.com/envoy-rls/envoy-rls/pkg/rlqs"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
)

// Defaults of the Limits: what one connection, one stream and the whole
// listener may hold (docs/deploy.md, "Limits on connections and
// streams", gives the memory they bound).
const (
	// DefaultMaxConcurrentStreams is the SETTINGS_MAX_CONCURRENT_STREAMS
	// each connection announces; a stream beyond it is refused
	// (RST_STREAM REFUSED_STREAM). Envoy opens another connection when its
	// connections are full.
	DefaultMaxConcurrentStreams = 100
	// DefaultMaxConnections bounds the open gRPC connections; one beyond it
	// is closed as soon as it is accepted.
	DefaultMaxConnections = 1000
	// DefaultReceiveTimeout bounds the time from a call's headers to the
	// end of its request message.
	DefaultReceiveTimeout = 5 * time.Second
	// DefaultMaxIncompleteRequests bounds the calls, over all connections,
	// whose request has not fully arrived: a call spends microseconds
	// there, so the bound is far above what Envoy reaches, and it caps what
	// slow requests can hold (with the message size).
	DefaultMaxIncompleteRequests = 1024
	// DefaultMaxRecvMsgSize is the largest request read: Envoy's requests
	// take a few hundred bytes to a few KiB. Every incomplete request may
	// hold up to this much.
	DefaultMaxRecvMsgSize = 256 << 10
	// DefaultFirstCallTimeout closes a connection that has opened no call
	// that long after it was accepted. Envoy and gRPC clients call as soon
	// as their connection is up (a client that connects ahead and calls
	// later reconnects then); a connection that never calls would
	// otherwise hold its place under MaxConnections until the idle bound.
	DefaultFirstCallTimeout = 5 * time.Second
	// DefaultMaxConnectionIdle closes a connection without a call for that
	// long (GOAWAY); the client reconnects when it needs to.
	DefaultMaxConnectionIdle = 5 * time.Minute
	// DefaultMaxConnectionAge closes every connection after that long
	// (GOAWAY, with gRPC's ±10 % jitter), so that Envoy's connections
	// spread over the replicas an autoscaler adds.
	DefaultMaxConnectionAge = 5 * time.Minute
	// DefaultMaxConnectionAgeGrace is how long calls in flight on a
	// connection closed for its age may still take.
	DefaultMaxConnectionAgeGrace = 30 * time.Second
	// DefaultKeepaliveTime and DefaultKeepaliveTimeout: the server pings a
	// connection quiet for that long and closes it when the ping is not
	// answered in time (a peer that vanished).
	DefaultKeepaliveTime    = 2 * time.Minute
	DefaultKeepaliveTimeout = 20 * time.Second
	// DefaultKeepaliveMinTime is the shortest interval between client
	// pings the server accepts; a client pinging more often is closed
	// ("too many pings"). Envoy may be configured to ping every few seconds.
	DefaultKeepaliveMinTime = 5 * time.Second
	// DefaultKeepalivePermitWithoutStream lets clients ping connections
	// without calls in flight (Envoy's idle connections).
	DefaultKeepalivePermitWithoutStream = true
	// handshakeTimeout bounds a new connection's HTTP/2 preface and
	// settings exchange (grpc.ConnectionTimeout).
	handshakeTimeout = 10 * time.Second
	// streamWorkers is the number of gRPC stream workers: the concurrency
	// at which the standard load runs are measured (docs/performance.md).
	streamWorkers = 64
)

// Limits bound what the listener, its connections and their streams may
// hold. A zero first-call timeout, idle time or age means never.
type Limits struct {
	MaxConcurrentStreams         int
	MaxConnections               int
	FirstCallTimeout             time.Duration
	ReceiveTimeout               time.Duration
	MaxIncompleteRequests        int
	MaxRecvMsgSize               int
	MaxConnectionIdle            time.Duration
	MaxConnectionAge             time.Duration
	MaxConnectionAgeGrace        time.Duration
	KeepaliveTime                time.Duration
	KeepaliveTimeout             time.Duration
	KeepaliveMinTime             time.Duration
	KeepalivePermitWithoutStream bool
}

// Config configures a Server.
type Config struct {
	// Limits bound connections, streams and requests. (Required)
	Limits Limits
	// TLS, when not nil, serves over TLS with it. (Optional)
	TLS *tls.Config
	// Cuts counts the ShouldRateLimit calls the receive guard cuts before
	// their handler started: the service's *rls.Metrics. (Optional)
	Cuts CutCounter
	// Options are added to the server's own (the tracing stats handler).
	// (Optional)
	Options []grpc.ServerOption
	// Registerer takes the listener's and the guard's collectors.
	// (Required)
	Registerer prometheus.Registerer
	// Log receives the drain's outcome. (Optional, default: no logs)
	Log *zap.Logger
}

// Server is the gRPC server of one serve: build it with New, Register the
// rate-limit service, Serve a listener, then Drain.
type Server struct {
	gs     *grpc.Server
	health *health.Server
	guard  *receiveGuard
	conns  *connLimit
	log    *zap.Logger
	quota  *rlqs.Service
}

// New builds the server with the health and reflection services; its
// collectors are registered on cfg.Registerer.
func New(cfg Config) (*Server, error) {
	if cfg.Registerer == nil {
		return nil, errors.New("grpcserve: Config.Registerer is required")
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	conns, err := newConnLimit(cfg.Limits.MaxConnections, cfg.Limits.FirstCallTimeout, cfg.Registerer)
	if err != nil {
		return nil, err
	}
	guard, err := newReceiveGuard(cfg.Limits.ReceiveTimeout, cfg.Limits.MaxIncompleteRequests, cfg.Cuts, cfg.Registerer)
	if err != nil {
		return nil, err
	}
	opts := append(serverOptions(cfg.Limits, guard),
		// Calls run on reused goroutines (up to this many at once; gRPC
		// starts a goroutine per call beyond): a fresh goroutine per call
		// grows its stack on every call through the Redis client, a
		// measurable share of server CPU under load (docs/performance.md).
		grpc.NumStreamWorkers(streamWorkers),
	)
	opts = append(opts, cfg.Options...)
	if cfg.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg.TLS)))
	}
	s := &Server{gs: grpc.NewServer(opts...), health: health.NewServer(), guard: guard, conns: conns, log: cfg.Log}
	healthpb.RegisterHealthServer(s.gs, s.health)
	reflection.Register(s.gs)
	return s, nil
}

// Admission is the receive guard, to give the rate-limit service
// (rls.Config.Admission).
func (s *Server) Admission() rls.Admission { return s.guard }

// Register adds the rate-limit service and reports it serving.
func (s *Server) Register(svc *rls.Server) {
	svc.Register(s.gs)
	s.setServing(true)
}

// RegisterQuota adds the Rate Limit Quota Service; Drain stops it first
// (its streams never end on their own).
func (s *Server) RegisterQuota(svc *rlqs.Service) {
	svc.Register(s.gs)
	s.quota = svc
	s.setServing(true)
}

// Serve accepts connections on lis, at most Limits.MaxConnections at once,
// each closed if it has opened no call Limits.FirstCallTimeout after it
// was accepted, until the server is stopped.
func (s *Server) Serve(lis net.Listener) error {
	return s.gs.Serve(s.conns.listener(lis))
}

// SweepInterval is how often Sweep must run: a tenth of the receive
// timeout, at least a millisecond and at most a second.
func (s *Server) SweepInterval() time.Duration {
	return min(max(s.guard.d/10, time.Millisecond), time.Second)
}

// Sweep cuts the calls whose request has not arrived within the receive
// timeout.
func (s *Server) Sweep(now time.Time) { s.guard.sweep(now) }

// Drain takes the server out of rotation and stops it within timeout:
// gRPC health goes NOT_SERVING, the server stops accepting and finishes
// the calls in flight, cut off at timeout. The RLQS streams are ended
// first, each bucket's assignment sent with a time to live of 0.
func (s *Server) Drain(timeout time.Duration) {
	s.setServing(false)
	if s.quota != nil {
		s.quota.Stop()
	}
	done := make(chan struct{})
	go func() {
		s.gs.GracefulStop()
		close(done)
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-done:
		s.log.Info("drained: every in-flight call finished")
	case <-timer.C:
		s.log.Warn("drain timeout: cancelling the calls still in flight", zap.Duration("drain_timeout", timeout))
		s.gs.Stop()
		<-done
	}
}

func (s *Server) setServing(ok bool) {
	st := healthpb.HealthCheckResponse_SERVING
	if !ok {
		st = healthpb.HealthCheckResponse_NOT_SERVING
	}
	s.health.SetServingStatus("", st)
	s.health.SetServingStatus(rlsv3.RateLimitService_ServiceDesc.ServiceName, st)
	if s.quota != nil {
		s.health.SetServingStatus(rlqsv3.RateLimitQuotaService_ServiceDesc.ServiceName, st)
	}
}

// serverOptions are the options that apply the limits and the guard. A
// zero idle or age is gRPC's "never".
func serverOptions(l Limits, g *receiveGuard) []grpc.ServerOption {
	never := func(d time.Duration) time.Duration {
		if d == 0 {
			return time.Duration(math.MaxInt64)
		}
		return d
	}
	return []grpc.ServerOption{
		grpc.MaxConcurrentStreams(uint32(l.MaxConcurrentStreams)),
		grpc.MaxRecvMsgSize(l.MaxRecvMsgSize),
		grpc.ConnectionTimeout(handshakeTimeout),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             l.KeepaliveMinTime,
			PermitWithoutStream: l.KeepalivePermitWithoutStream,
		}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle:     never(l.MaxConnectionIdle),
			MaxConnectionAge:      never(l.MaxConnectionAge),
			MaxConnectionAgeGrace: never(l.MaxConnectionAgeGrace),
			Time:                  l.KeepaliveTime,
			Timeout:               l.KeepaliveTimeout,
		}),
		grpc.InTapHandle(func(ctx context.Context, info *tap.Info) (context.Context, error) {
			callOpened(ctx)
			return g.tap(ctx, info)
		}),
		grpc.ChainStreamInterceptor(g.streamInterceptor),
		grpc.ForceServerCodecV2(rls.Codec{}),
	}
}
