package grpcserve

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/tap"

	"github.com/envoy-rls/envoy-rls/pkg/rls"
)

// receiveGuard bounds the receiving of requests. gRPC has no such bound of
// its own: a stream whose message promises bytes that never come holds its
// goroutine and buffers until the client's own deadline, if it sent one,
// or forever, and any number of such streams may be open.
//
// Every new stream joins a queue of incomplete requests, in arrival order,
// with a context of its own; the reads of the request wait on that
// context. A stream leaves the queue once its request is read: for
// RateLimitService when its handler has decoded it (Received),
// for streaming methods (health Watch, reflection) at their first message.
// Two things cut a stream still in the queue, cancelling its context so
// that the call ends with DEADLINE_EXCEEDED and its stream is reset:
//
//   - its receive time d is over (Server.Sweep, every d/10);
//   - max streams are queued when another arrives: the oldest is cut, not
//     the newcomer. An Envoy request is read microseconds after it arrives,
//     so the oldest in the queue is a slow one, and slow streams cannot
//     crowd out the calls that keep coming.
//
// A stream that ends while queued (reset by its client, a health Check
// that never calls received) stays queued until one of the two cuts it, at
// no cost: its context is already cancelled.
//
// It is the rls.Admission of the RateLimitService: a ShouldRateLimit call
// is counted once (calls_total) by whichever sees it first: its handler,
// which the guard admits as it starts (Admit), or the guard when it cuts a
// call no handler has been admitted for (Config.Cuts). gRPC aborts a
// stream whose context is already done when its call would start, so a
// call cut in that instant never reaches a handler.
type receiveGuard struct {
	d   time.Duration
	max int
	// cuts counts a ShouldRateLimit call cut before its handler started,
	// given the time since the stream arrived (nil: none).
	cuts CutCounter

	mu         sync.Mutex
	head, tail *recvCtx // the queue, oldest first
	n          int

	timeouts, evictions prometheus.Counter
}

var _ rls.Admission = (*receiveGuard)(nil)

// CutCounter counts the ShouldRateLimit calls the guard cuts before their
// handler started (*rls.Metrics).
type CutCounter interface {
	CountCut(sinceArrival time.Duration)
}

// newReceiveGuard registers its collectors on reg; cuts counts the
// ShouldRateLimit calls cut before their handler started (nil: none).
func newReceiveGuard(d time.Duration, max int, cuts CutCounter, reg prometheus.Registerer) (*receiveGuard, error) {
	g := &receiveGuard{d: d, max: max, cuts: cuts}
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
	rls             bool        // a ShouldRateLimit call
	// counter: who counts the call in calls_total, decided once: 0 not
	// yet, counterGuard, counterHandler.
	counter atomic.Int32
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

// Who counts a ShouldRateLimit call (recvCtx.counter).
const (
	counterGuard int32 = 1 + iota
	counterHandler
)

// cut ends a stream taken off the queue; a ShouldRateLimit call that no
// handler has been admitted for is counted here, before its stream ends.
func (c *recvCtx) cut() {
	c.expired.Store(true)
	if c.rls && c.counter.CompareAndSwap(0, counterGuard) && c.g.cuts != nil {
		c.g.cuts.CountCut(time.Since(c.arrived))
	}
	c.cancel()
}

// Admit tells a ShouldRateLimit handler, as it starts, whether it counts
// its call: false when the guard has already cut and counted it. A call
// outside the guard is its handler's to count.
func (g *receiveGuard) Admit(ctx context.Context) bool {
	c, ok := ctx.Value(recvKey{}).(*recvCtx)
	return !ok || c.counter.CompareAndSwap(0, counterHandler)
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
func (g *receiveGuard) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	c := &recvCtx{g: g, arrived: time.Now(), rls: info.FullMethodName == rlsv3.RateLimitService_ShouldRateLimit_FullMethodName}
	// cancel also runs when the stream ends: the stream's own context, the
	// parent, is cancelled then.
	c.Context, c.cancel = context.WithCancel(ctx)
	if old := g.admit(c); old != nil {
		g.evictions.Inc()
		old.cut()
	}
	return c, nil
}

// Received takes the stream whose context is ctx off the queue: its
// request has arrived.
func (g *receiveGuard) Received(ctx context.Context) {
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

// streamInterceptor ends a streaming call's receive phase at its first
// message.
func (g *receiveGuard) streamInterceptor(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, &firstRecv{ServerStream: ss, g: g})
}

type firstRecv struct {
	grpc.ServerStream
	g    *receiveGuard
	once sync.Once
}

func (s *firstRecv) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if err == nil {
		s.once.Do(func() { s.g.Received(s.Context()) })
	}
	return err
}
