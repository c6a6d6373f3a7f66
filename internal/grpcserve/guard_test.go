package grpcserve

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/tap"
)

// The receive guard queues streams in arrival order, takes a stream off
// when its request is read, cuts the oldest when full and the overdue on a
// sweep, and a cut stream's context reports DeadlineExceeded.
func TestReceiveGuard(t *testing.T) {
	g, err := newReceiveGuard(time.Minute, 3, nil, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	parent, cancelAll := context.WithCancel(context.Background())
	defer cancelAll()
	open := func() context.Context {
		t.Helper()
		ctx, err := g.tap(parent, &tap.Info{FullMethodName: "/m"})
		if err != nil {
			t.Fatal(err)
		}
		return ctx
	}
	isCut := func(ctx context.Context) bool {
		select {
		case <-ctx.Done():
			return errors.Is(ctx.Err(), context.DeadlineExceeded)
		default:
			return false
		}
	}
	a, b, c := open(), open(), open()
	g.Received(b) // b's request arrived: it leaves the queue
	g.Received(b) // and leaving twice changes nothing
	if g.n != 2 {
		t.Fatalf("queued = %d, want 2 (a, c)", g.n)
	}
	d := open() // 3 queued: a, c, d
	e := open() // full: a, the oldest, is cut
	if !isCut(a) {
		t.Fatalf("oldest stream not cut when the queue was full: %v", a.Err())
	}
	for name, ctx := range map[string]context.Context{"b": b, "c": c, "d": d, "e": e} {
		if ctx.Err() != nil {
			t.Fatalf("stream %s: %v, want it running", name, ctx.Err())
		}
	}
	if got := value(g.evictions); got != 1 {
		t.Errorf("evictions = %v, want 1", got)
	}
	// A sweep before the receive time is over cuts nothing; one after it
	// cuts every stream still queued.
	if n := g.sweep(time.Now()); n != 0 {
		t.Fatalf("sweep before the timeout cut %d", n)
	}
	if n := g.sweep(time.Now().Add(time.Minute)); n != 3 {
		t.Fatalf("sweep after the timeout cut %d, want 3 (c, d, e)", n)
	}
	for name, ctx := range map[string]context.Context{"c": c, "d": d, "e": e} {
		if !isCut(ctx) {
			t.Errorf("stream %s not cut by the sweep: %v", name, ctx.Err())
		}
	}
	if b.Err() != nil || g.n != 0 || g.head != nil || g.tail != nil {
		t.Fatalf("after the sweep: b %v, queued %d; want b running, the queue empty", b.Err(), g.n)
	}
	// A stream that ends while queued reports its own end, not a cut.
	f := open()
	cancelAll()
	<-f.Done()
	if !errors.Is(f.Err(), context.Canceled) {
		t.Errorf("stream ended by its parent: %v, want Canceled", f.Err())
	}
}

// cutsCounted records the calls the guard counts as cut.
type cutsCounted []time.Duration

func (c *cutsCounted) CountCut(d time.Duration) { *c = append(*c, d) }

// A ShouldRateLimit call is counted once: by the guard when it cuts a call
// no handler has been admitted for (gRPC may abort such a stream before any handler
// runs), by the handler otherwise; other methods' streams are never
// counted.
func TestReceiveGuardCountsACutCallOnce(t *testing.T) {
	var counted cutsCounted
	g, err := newReceiveGuard(time.Minute, 2, &counted, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	open := func(method string) context.Context {
		t.Helper()
		ctx, err := g.tap(context.Background(), &tap.Info{FullMethodName: method})
		if err != nil {
			t.Fatal(err)
		}
		return ctx
	}
	const rlsMethod = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
	a := open(rlsMethod) // never admitted: cut below, before its handler starts
	b := open(rlsMethod)
	if !g.Admit(b) { // b's handler starts
		t.Fatal("Admit of a queued call refused")
	}
	open("/grpc.health.v1.Health/Watch") // full: a, the oldest, is cut
	if len(counted) != 1 || counted[0] < 0 {
		t.Fatalf("cut of a call never admitted counted %d times, want once", len(counted))
	}
	if g.Admit(a) {
		t.Fatal("the handler of a call the guard cut and counted was admitted too")
	}
	// b (admitted: its handler counts it) and the health stream (not a
	// ShouldRateLimit call) are cut by the sweep: neither is counted here.
	if n := g.sweep(time.Now().Add(time.Minute)); n != 2 {
		t.Fatalf("sweep cut %d, want 2", n)
	}
	if len(counted) != 1 {
		t.Fatalf("guard counted %d calls, want 1", len(counted))
	}
	if !g.Admit(context.Background()) {
		t.Fatal("a call outside the guard is the handler's to count")
	}
}
