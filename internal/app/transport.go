package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/tap"

	"github.com/envoy-rls/envoy-rls/pkg/rls"
)

// Defaults of the --grpc-* limits: what one connection, one stream and the
// whole listener may hold (docs/operations.md, "Limits on connections and
// streams", gives the memory they bound).
const (
	// DefaultGRPCMaxConcurrentStreams is the SETTINGS_MAX_CONCURRENT_STREAMS
	// each connection announces; a stream beyond it is refused
	// (RST_STREAM REFUSED_STREAM). Envoy opens another connection when its
	// connections are full.
	DefaultGRPCMaxConcurrentStreams = 100
	// DefaultGRPCMaxConnections bounds the open gRPC connections; one
	// beyond it is closed as soon as it is accepted.
	DefaultGRPCMaxConnections = 1000
	// DefaultGRPCReceiveTimeout bounds the time from a call's headers to
	// the end of its request message.
	DefaultGRPCReceiveTimeout = 5 * time.Second
	// DefaultGRPCMaxIncompleteRequests bounds the calls, over all
	// connections, whose request has not fully arrived: a call spends
	// microseconds there, so the bound is far above what Envoy reaches,
	// and it caps what slow requests can hold (with the message size).
	DefaultGRPCMaxIncompleteRequests = 1024
	// DefaultGRPCMaxRecvMsgSize is the largest request read: Envoy's
	// requests take a few hundred bytes to a few KiB. Every incomplete
	// request may hold up to this much.
	DefaultGRPCMaxRecvMsgSize = 256 << 10
	// DefaultGRPCMaxConnectionIdle closes a connection without a call for
	// that long (GOAWAY); the client reconnects when it needs to.
	DefaultGRPCMaxConnectionIdle = 5 * time.Minute
	// DefaultGRPCMaxConnectionAge closes every connection after that long
	// (GOAWAY, with gRPC's ±10 % jitter), so that Envoy's connections spread
	// over the replicas an autoscaler adds.
	DefaultGRPCMaxConnectionAge = 5 * time.Minute
	// DefaultGRPCMaxConnectionAgeGrace is how long calls in flight on a
	// connection closed for its age may still take.
	DefaultGRPCMaxConnectionAgeGrace = 30 * time.Second
	// DefaultGRPCKeepaliveTime and DefaultGRPCKeepaliveTimeout: the server
	// pings a connection quiet for that long and closes it when the ping is
	// not answered in time (a peer that vanished).
	DefaultGRPCKeepaliveTime    = 2 * time.Minute
	DefaultGRPCKeepaliveTimeout = 20 * time.Second
	// DefaultGRPCKeepaliveMinTime is the shortest interval between client
	// pings the server accepts; a client pinging more often is closed
	// ("too many pings"). Envoy may be configured to ping every few seconds.
	DefaultGRPCKeepaliveMinTime = 5 * time.Second
	// DefaultGRPCKeepalivePermitWithoutStream lets clients ping
	// connections without calls in flight (Envoy's idle connections).
	DefaultGRPCKeepalivePermitWithoutStream = true
	// grpcHandshakeTimeout bounds a new connection's HTTP/2 preface and
	// settings exchange (grpc.ConnectionTimeout; plain HTTP/2, no TLS).
	grpcHandshakeTimeout = 10 * time.Second
	// maxGRPCMaxConnections bounds --grpc-max-connections: past a million
	// connections the bound no longer bounds anything a process can hold.
	maxGRPCMaxConnections = 1 << 20
	// minGRPCMaxRecvMsgSize is the smallest --grpc-max-recv-msg-size: an
	// Envoy request with a few descriptors fits in 4 KiB.
	minGRPCMaxRecvMsgSize = 4 << 10
)

// transportOptions are the --grpc-* limits (part of Options).
type transportOptions struct {
	GRPCMaxConcurrentStreams         int
	GRPCMaxConnections               int
	GRPCReceiveTimeout               time.Duration
	GRPCMaxIncompleteRequests        int
	GRPCMaxRecvMsgSize               int
	GRPCMaxConnectionIdle            time.Duration
	GRPCMaxConnectionAge             time.Duration
	GRPCMaxConnectionAgeGrace        time.Duration
	GRPCKeepaliveTime                time.Duration
	GRPCKeepaliveTimeout             time.Duration
	GRPCKeepaliveMinTime             time.Duration
	GRPCKeepalivePermitWithoutStream bool
}

// transportFlags adds the --grpc-* limits to fs.
func transportFlags(fs *flag.FlagSet, o *transportOptions) {
	fs.IntVar(&o.GRPCMaxConcurrentStreams, "grpc-max-concurrent-streams", DefaultGRPCMaxConcurrentStreams, "calls one gRPC connection may have in flight; more are refused (REFUSED_STREAM) and Envoy opens another connection")
	fs.IntVar(&o.GRPCMaxConnections, "grpc-max-connections", DefaultGRPCMaxConnections, "open gRPC connections; one more is closed as soon as it is accepted")
	fs.DurationVar(&o.GRPCReceiveTimeout, "grpc-receive-timeout", DefaultGRPCReceiveTimeout, "longest time from a call's headers to the end of its request; a call that has not sent its request by then is cut (DEADLINE_EXCEEDED)")
	fs.IntVar(&o.GRPCMaxIncompleteRequests, "grpc-max-incomplete-requests", DefaultGRPCMaxIncompleteRequests, "calls, over all gRPC connections, whose request has not fully arrived; one more is refused (RESOURCE_EXHAUSTED)")
	fs.IntVar(&o.GRPCMaxRecvMsgSize, "grpc-max-recv-msg-size", DefaultGRPCMaxRecvMsgSize, "largest request message in bytes; a larger one is refused (RESOURCE_EXHAUSTED)")
	fs.DurationVar(&o.GRPCMaxConnectionIdle, "grpc-max-connection-idle", DefaultGRPCMaxConnectionIdle, "close a gRPC connection without calls for this long (GOAWAY; 0: never)")
	fs.DurationVar(&o.GRPCMaxConnectionAge, "grpc-max-connection-age", DefaultGRPCMaxConnectionAge, "close every gRPC connection after this long, ±10 % (GOAWAY), so that clients spread over new replicas (0: never)")
	fs.DurationVar(&o.GRPCMaxConnectionAgeGrace, "grpc-max-connection-age-grace", DefaultGRPCMaxConnectionAgeGrace, "how long calls in flight may still take on a connection closed for its age")
	fs.DurationVar(&o.GRPCKeepaliveTime, "grpc-keepalive-time", DefaultGRPCKeepaliveTime, "ping a gRPC connection quiet for this long")
	fs.DurationVar(&o.GRPCKeepaliveTimeout, "grpc-keepalive-timeout", DefaultGRPCKeepaliveTimeout, "close a connection whose ping is not answered within this")
	fs.DurationVar(&o.GRPCKeepaliveMinTime, "grpc-keepalive-min-time", DefaultGRPCKeepaliveMinTime, "shortest interval between client pings; a client pinging more often is closed")
	fs.BoolVar(&o.GRPCKeepalivePermitWithoutStream, "grpc-keepalive-permit-without-stream", DefaultGRPCKeepalivePermitWithoutStream, "accept client pings on connections without calls in flight")
}

// transportAccepts says what each --grpc-* limit takes, as errors put it
// after "must be". Read only.
var transportAccepts = map[string]string{
	"grpc-max-concurrent-streams":   fmt.Sprintf("an integer between 1 and %d", math.MaxUint32),
	"grpc-max-connections":          fmt.Sprintf("an integer between 1 and %d", maxGRPCMaxConnections),
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

// check returns one error per --grpc-* value out of range.
func (o *transportOptions) check(given map[string]given) error {
	var errs []error
	bad := func(name string, ok bool) {
		if !ok {
			errs = append(errs, fmt.Errorf("%s: must be %s", label(name, given), transportAccepts[name]))
		}
	}
	bad("grpc-max-concurrent-streams", o.GRPCMaxConcurrentStreams >= 1 && int64(o.GRPCMaxConcurrentStreams) <= math.MaxUint32)
	bad("grpc-max-connections", o.GRPCMaxConnections >= 1 && o.GRPCMaxConnections <= maxGRPCMaxConnections)
	bad("grpc-receive-timeout", o.GRPCReceiveTimeout > 0)
	bad("grpc-max-incomplete-requests", o.GRPCMaxIncompleteRequests >= 1 && o.GRPCMaxIncompleteRequests <= maxGRPCMaxConnections)
	bad("grpc-max-recv-msg-size", o.GRPCMaxRecvMsgSize >= minGRPCMaxRecvMsgSize && o.GRPCMaxRecvMsgSize <= math.MaxInt32)
	bad("grpc-max-connection-idle", o.GRPCMaxConnectionIdle >= 0)
	bad("grpc-max-connection-age", o.GRPCMaxConnectionAge >= 0)
	bad("grpc-max-connection-age-grace", o.GRPCMaxConnectionAgeGrace >= 0)
	// gRPC raises a keepalive time or timeout below 1s to 1s.
	bad("grpc-keepalive-time", o.GRPCKeepaliveTime >= time.Second)
	bad("grpc-keepalive-timeout", o.GRPCKeepaliveTimeout >= time.Second)
	bad("grpc-keepalive-min-time", o.GRPCKeepaliveMinTime >= 0)
	return errors.Join(errs...)
}

// grpcServerOptions are the server options that apply the limits. A zero
// idle or age is gRPC's "never".
func (o *transportOptions) grpcServerOptions(rt *receiveGuard) []grpc.ServerOption {
	never := func(d time.Duration) time.Duration {
		if d == 0 {
			return time.Duration(math.MaxInt64)
		}
		return d
	}
	return []grpc.ServerOption{
		grpc.MaxConcurrentStreams(uint32(o.GRPCMaxConcurrentStreams)),
		grpc.MaxRecvMsgSize(o.GRPCMaxRecvMsgSize),
		grpc.ConnectionTimeout(grpcHandshakeTimeout),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             o.GRPCKeepaliveMinTime,
			PermitWithoutStream: o.GRPCKeepalivePermitWithoutStream,
		}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle:     never(o.GRPCMaxConnectionIdle),
			MaxConnectionAge:      never(o.GRPCMaxConnectionAge),
			MaxConnectionAgeGrace: never(o.GRPCMaxConnectionAgeGrace),
			Time:                  o.GRPCKeepaliveTime,
			Timeout:               o.GRPCKeepaliveTimeout,
		}),
		grpc.InTapHandle(rt.tap),
		grpc.ChainStreamInterceptor(rt.streamInterceptor),
		grpc.ForceServerCodecV2(rls.Codec{}),
	}
}

// receiveGuard bounds the receiving of requests. gRPC has no such bound of
// its own: a stream whose message promises bytes that never come holds its
// goroutine and buffers until the client's own deadline, if it sent one,
// or forever, and any number of such streams may be open.
//
// Every new stream joins a queue of incomplete requests, in arrival order,
// with a context of its own; the reads of the request wait on that
// context. A stream leaves the queue once its request is read: for
// RateLimitService when its handler has decoded it (rls.Config.Received),
// for streaming methods (health Watch, reflection) at their first message.
// Two things cut a stream still in the queue, cancelling its context so
// that the call ends with DEADLINE_EXCEEDED and its stream is reset:
//
//   - its receive time d is over (sweep, every d/10);
//   - max streams are queued when another arrives: the oldest is cut, not
//     the newcomer. An Envoy request is read microseconds after it arrives,
//     so the oldest in the queue is a slow one, and slow streams cannot
//     crowd out the calls that keep coming.
//
// A stream that ends while queued (reset by its client, a health Check
// that never calls received) stays queued until one of the two cuts it, at
// no cost: its context is already cancelled.
type receiveGuard struct {
	d   time.Duration
	max int

	mu         sync.Mutex
	head, tail *recvCtx // the queue, oldest first
	n          int

	timeouts, evictions prometheus.Counter
}

// newReceiveGuard registers its collectors on reg.
func newReceiveGuard(d time.Duration, max int, reg prometheus.Registerer) (*receiveGuard, error) {
	g := &receiveGuard{d: d, max: max}
	cut := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: rls.MetricsNamespace, Name: "grpc_incomplete_requests_cut_total",
		Help: "gRPC calls cut before their request had arrived, by reason: timeout (--grpc-receive-timeout) or evicted (the oldest of --grpc-max-incomplete-requests when another arrived).",
	}, []string{"reason"})
	g.timeouts, g.evictions = cut.WithLabelValues("timeout"), cut.WithLabelValues("evicted")
	queued := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: rls.MetricsNamespace, Name: "grpc_incomplete_requests",
		Help: "gRPC calls whose request has not arrived yet (at most --grpc-max-incomplete-requests).",
	}, func() float64 {
		g.mu.Lock()
		defer g.mu.Unlock()
		return float64(g.n)
	})
	for _, c := range []prometheus.Collector{cut, queued} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering the gRPC receive metrics: %w", err)
		}
	}
	return g, nil
}

// recvKey finds a stream's *recvCtx among its context's values.
type recvKey struct{}

// recvCtx is the context of one stream while its request is received, and
// its place in the guard's queue.
type recvCtx struct {
	context.Context // cancelled when the stream ends or is cut
	cancel          context.CancelFunc
	g               *receiveGuard
	arrived         time.Time
	expired         atomic.Bool // cut: Err is DeadlineExceeded
	// Guarded by g.mu:
	prev, next *recvCtx
	queued     bool
}

// Err is context.DeadlineExceeded once the stream has been cut: the status
// the call is answered with.
func (c *recvCtx) Err() error {
	if c.expired.Load() {
		return context.DeadlineExceeded
	}
	return c.Context.Err()
}

func (c *recvCtx) Value(k any) any {
	if k == (recvKey{}) {
		return c
	}
	return c.Context.Value(k)
}

// cut ends a stream taken off the queue.
func (c *recvCtx) cut() {
	c.expired.Store(true)
	c.cancel()
}

// push appends c; g.mu is held.
func (g *receiveGuard) push(c *recvCtx) {
	c.prev, c.next, c.queued = g.tail, nil, true
	if g.tail != nil {
		g.tail.next = c
	} else {
		g.head = c
	}
	g.tail = c
	g.n++
}

// remove takes c off the queue; g.mu is held.
func (g *receiveGuard) remove(c *recvCtx) {
	if c.prev != nil {
		c.prev.next = c.next
	} else {
		g.head = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	} else {
		g.tail = c.prev
	}
	c.prev, c.next, c.queued = nil, nil, false
	g.n--
}

// admit queues a new stream's context, and returns the stream it evicts,
// if any.
func (g *receiveGuard) admit(c *recvCtx) (evicted *recvCtx) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.n >= g.max {
		evicted = g.head
		g.remove(evicted)
	}
	g.push(c)
	return evicted
}

// tap queues each new stream. It runs on the connection's reading
// goroutine and does no more than that.
func (g *receiveGuard) tap(ctx context.Context, _ *tap.Info) (context.Context, error) {
	c := &recvCtx{g: g, arrived: time.Now()}
	// cancel also runs when the stream ends: the stream's own context, the
	// parent, is cancelled then.
	c.Context, c.cancel = context.WithCancel(ctx)
	if old := g.admit(c); old != nil {
		g.evictions.Inc()
		old.cut()
	}
	return c, nil
}

// received takes the stream whose context is ctx off the queue: its
// request has arrived.
func received(ctx context.Context) {
	c, ok := ctx.Value(recvKey{}).(*recvCtx)
	if !ok {
		return
	}
	c.g.mu.Lock()
	if c.queued {
		c.g.remove(c)
	}
	c.g.mu.Unlock()
}

// sweep cuts the streams that arrived d or longer before now, and returns
// how many.
func (g *receiveGuard) sweep(now time.Time) int {
	var due []*recvCtx
	g.mu.Lock()
	for g.head != nil && now.Sub(g.head.arrived) >= g.d {
		c := g.head
		g.remove(c)
		due = append(due, c)
	}
	g.mu.Unlock()
	for _, c := range due {
		c.cut()
	}
	g.timeouts.Add(float64(len(due)))
	return len(due)
}

// run sweeps every d/10 (at least every millisecond, at most every
// second) until ctx is done.
func (g *receiveGuard) run(ctx context.Context) {
	every := min(max(g.d/10, time.Millisecond), time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			g.sweep(now)
		}
	}
}

// streamInterceptor ends a streaming call's receive phase at its first
// message.
func (g *receiveGuard) streamInterceptor(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, &firstRecv{ServerStream: ss})
}

type firstRecv struct {
	grpc.ServerStream
	once sync.Once
}

func (s *firstRecv) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if err == nil {
		s.once.Do(func() { received(s.Context()) })
	}
	return err
}

// connLimit is a listener that holds at most max connections open: one
// accepted beyond it is closed at once (the client sees its connection
// reset) and counted, so that the kernel's accept queue never fills with
// connections nobody serves.
type connLimit struct {
	net.Listener
	max     int64
	open    atomic.Int64
	gauge   prometheus.Gauge
	refused prometheus.Counter
}

// limitConnections wraps l. The collectors are registered on reg.
func limitConnections(l net.Listener, max int, reg prometheus.Registerer) (*connLimit, error) {
	cl := &connLimit{
		Listener: l,
		max:      int64(max),
		gauge: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: rls.MetricsNamespace, Name: "grpc_connections",
			Help: "Open gRPC connections (at most --grpc-max-connections).",
		}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: rls.MetricsNamespace, Name: "grpc_connections_refused_total",
			Help: "gRPC connections closed on accept because --grpc-max-connections were open.",
		}),
	}
	for _, c := range []prometheus.Collector{cl.gauge, cl.refused} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering the gRPC connection metrics: %w", err)
		}
	}
	return cl, nil
}

func (l *connLimit) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) > l.max {
			l.open.Add(-1)
			l.refused.Inc()
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0) // reset: nothing is owed to this peer
			}
			_ = c.Close()
			continue
		}
		l.gauge.Inc()
		return &limitedConn{Conn: c, l: l}, nil
	}
}

// limitedConn gives its place back when it is closed (once).
type limitedConn struct {
	net.Conn
	l      *connLimit
	closed atomic.Bool
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	if c.closed.CompareAndSwap(false, true) {
		c.l.open.Add(-1)
		c.l.gauge.Dec()
	}
	return err
}

// Limits of the admin HTTP server. Its clients are probes, Prometheus and
// operators: each request is a GET answered at once, except a pprof CPU
// profile or trace, which streams for its ?seconds= (30 by default).
const (
	adminReadHeaderTimeout = 5 * time.Second
	adminReadTimeout       = 10 * time.Second
	// adminWriteTimeout leaves room for a 60 s profile.
	adminWriteTimeout = 90 * time.Second
	adminIdleTimeout  = 2 * time.Minute
	adminMaxHeader    = 64 << 10
)

// adminServer is the admin HTTP server: a connection that sends its
// request slowly, never reads its answer or stays idle is closed.
func (s *server) adminServer() *http.Server {
	return &http.Server{
		Handler:           s.adminHandler(),
		ReadHeaderTimeout: adminReadHeaderTimeout,
		ReadTimeout:       adminReadTimeout,
		WriteTimeout:      adminWriteTimeout,
		IdleTimeout:       adminIdleTimeout,
		MaxHeaderBytes:    adminMaxHeader,
	}
}
