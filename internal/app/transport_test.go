package app

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc/tap"
)

// The --grpc-* limits refuse values out of range, naming flag or variable,
// value and what is accepted.
func TestCheckServeArgsTransport(t *testing.T) {
	base := []string{"--config", "rules"}
	checkServeArgsCases(t, []serveArgsCase{
		{"defaults", base, nil, ""},
		{"all set", append(base, "--grpc-max-concurrent-streams", "1", "--grpc-max-connections", "1048576", "--grpc-receive-timeout", "1ms", "--grpc-max-incomplete-requests", "1",
			"--grpc-max-recv-msg-size", "4096", "--grpc-max-connection-idle", "0", "--grpc-max-connection-age", "0", "--grpc-max-connection-age-grace", "0",
			"--grpc-keepalive-time", "1s", "--grpc-keepalive-timeout", "1s", "--grpc-keepalive-min-time", "0", "--grpc-keepalive-permit-without-stream=false"), nil, ""},
		{"streams zero", append(base, "--grpc-max-concurrent-streams", "0"), nil, `--grpc-max-concurrent-streams="0": must be an integer between 1 and 4294967295`},
		{"streams above uint32", base, map[string]string{"ENVOY_RLS_GRPC_MAX_CONCURRENT_STREAMS": "4294967296"}, `ENVOY_RLS_GRPC_MAX_CONCURRENT_STREAMS="4294967296": must be an integer between 1 and 4294967295`},
		{"connections zero", append(base, "--grpc-max-connections", "0"), nil, `--grpc-max-connections="0": must be an integer between 1 and 1048576`},
		{"connections not a number", append(base, "--grpc-max-connections", "many"), nil, `--grpc-max-connections="many": must be an integer`},
		{"receive timeout zero", base, map[string]string{"ENVOY_RLS_GRPC_RECEIVE_TIMEOUT": "0s"}, `ENVOY_RLS_GRPC_RECEIVE_TIMEOUT="0s": must be a positive duration such as 5s`},
		{"incomplete requests zero", append(base, "--grpc-max-incomplete-requests", "0"), nil, `--grpc-max-incomplete-requests="0": must be an integer between 1 and 1048576`},
		{"message size too small", append(base, "--grpc-max-recv-msg-size", "100"), nil, `--grpc-max-recv-msg-size="100": must be a size in bytes between 4096 and 2147483647`},
		{"idle negative", append(base, "--grpc-max-connection-idle", "-1s"), nil, `--grpc-max-connection-idle="-1s": must be 0 (never) or a positive duration such as 5m`},
		{"age negative", append(base, "--grpc-max-connection-age", "-1s"), nil, `--grpc-max-connection-age="-1s": must be 0 (never) or a positive duration such as 5m`},
		{"grace negative", append(base, "--grpc-max-connection-age-grace", "-1s"), nil, `--grpc-max-connection-age-grace="-1s": must be 0 or a positive duration such as 30s`},
		{"keepalive time below 1s", append(base, "--grpc-keepalive-time", "500ms"), nil, `--grpc-keepalive-time="500ms": must be a duration of at least 1s`},
		{"keepalive timeout below 1s", append(base, "--grpc-keepalive-timeout", "0s"), nil, `--grpc-keepalive-timeout="0s": must be a duration of at least 1s`},
		{"keepalive min time negative", append(base, "--grpc-keepalive-min-time", "-5s"), nil, `--grpc-keepalive-min-time="-5s": must be 0 or a positive duration such as 5s`},
		{"permit without stream", append(base, "--grpc-keepalive-permit-without-stream=maybe"), nil, `--grpc-keepalive-permit-without-stream="maybe": must be true or false`},
	})
}

// connLimit serves max connections at once, closes the next one on accept,
// and takes one again when a served connection closes.
func TestConnLimit(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l, err := limitConnections(inner, 2, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	dial := func() net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	next := func(what string) net.Conn {
		t.Helper()
		select {
		case c := <-accepted:
			return c
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: not accepted within 10s", what)
		}
		return nil
	}
	dial()
	dial()
	served := []net.Conn{next("first"), next("second")}
	// The third is closed by the listener: it is reset while it connects,
	// or reading it ends at once.
	if extra, err := net.Dial("tcp", inner.Addr().String()); err == nil {
		defer extra.Close()
		_ = extra.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := extra.Read(make([]byte, 1)); err == nil || isTimeout(err) {
			t.Fatalf("connection beyond the limit: read %v, want it closed by the server", err)
		}
	}
	if got := value(l.refused); got != 1 {
		t.Errorf("refused = %v, want 1", got)
	}
	if got := value(l.gauge); got != 2 {
		t.Errorf("open gauge = %v, want 2", got)
	}
	_ = served[0].Close()
	_ = served[0].Close() // a second Close gives nothing back twice
	dial()
	next("after a close")
	if got := value(l.gauge); got != 2 {
		t.Errorf("open gauge after one closed and one accepted = %v, want 2", got)
	}
	if got := l.open.Load(); got != 2 {
		t.Errorf("open = %d, want 2", got)
	}
}

// isTimeout reports a read that timed out: the connection was left open.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// value reads a counter or gauge.
func value(c prometheus.Metric) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	if m.Gauge != nil {
		return m.Gauge.GetValue()
	}
	return m.Counter.GetValue()
}

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
