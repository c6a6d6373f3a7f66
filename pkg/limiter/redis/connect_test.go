package redis

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

func TestBackoffWait(t *testing.T) {
	b, err := Backoff{}.validated()
	if err != nil {
		t.Fatal(err)
	}
	if b.Initial != defaultBackoffInitial || b.Max != defaultBackoffMax {
		t.Fatalf("zero Backoff validated to %+v", b)
	}
	ms := time.Millisecond
	for i, s := range []struct {
		n    int
		r    float64
		want time.Duration
	}{
		{1, 0, 100 * ms},
		{1, 0.5, 150 * ms},
		{1, 0.75, 175 * ms},
		{2, 0, 200 * ms},
		{3, 0, 400 * ms},
		{4, 0, 800 * ms},
		{5, 0, 1600 * ms},
		{6, 0, 3200 * ms},
		{6, 1, 6400 * ms},
		{7, 0, 5 * time.Second}, // 12.8 s capped at 10 s
		{7, 0.5, 7500 * ms},
		{8, 1, 10 * time.Second},
		{1000, 0, 5 * time.Second}, // no overflow however long the outage
		{1 << 30, 1, 10 * time.Second},
	} {
		if got := b.Wait(s.n, s.r); got != s.want {
			t.Errorf("step %d: Wait(%d, %v) = %v, want %v", i, s.n, s.r, got, s.want)
		}
	}
}

func TestBackoffValidated(t *testing.T) {
	for _, c := range []struct {
		name    string
		b       Backoff
		want    Backoff
		wantErr string
	}{
		{"defaults", Backoff{}, Backoff{defaultBackoffInitial, defaultBackoffMax}, ""},
		{"initial above the default max", Backoff{Initial: time.Minute}, Backoff{time.Minute, time.Minute}, ""},
		{"explicit", Backoff{Initial: time.Millisecond, Max: 20 * time.Millisecond}, Backoff{time.Millisecond, 20 * time.Millisecond}, ""},
		{"negative initial", Backoff{Initial: -time.Second}, Backoff{}, "backoff initial"},
		{"sub-millisecond", Backoff{Initial: time.Microsecond}, Backoff{}, "backoff initial"},
		{"max below initial", Backoff{Initial: time.Second, Max: time.Millisecond}, Backoff{}, "backoff max"},
		{"max too long", Backoff{Max: time.Hour}, Backoff{}, "backoff max"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := c.b.validated()
			if wantError(t, err, c.wantErr) {
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, c.want)
			}
		})
	}
}

func TestConnectRejectsBadConfig(t *testing.T) {
	if c, err := Connect(Config{}, ConnectOptions{}); err == nil {
		c.Close()
		t.Fatal("Connect accepted a config without addresses")
	}
	if c, err := Connect(Config{Addrs: []string{"127.0.0.1:1"}}, ConnectOptions{Backoff: Backoff{Initial: -1}}); err == nil {
		c.Close()
		t.Fatal("Connect accepted a negative backoff")
	}
}

// fakeTimer stands in for time.After: it hands each wait of a Connector to
// the test, which fires it.
type fakeTimer struct {
	waits chan fakeWait
}

type fakeWait struct {
	d       time.Duration
	fire    chan time.Time
	stopped *atomic.Bool
}

func newFakeTimer() *fakeTimer { return &fakeTimer{waits: make(chan fakeWait, 1)} }

func (f *fakeTimer) after(d time.Duration) (<-chan time.Time, func() bool) {
	w := fakeWait{d: d, fire: make(chan time.Time, 1), stopped: new(atomic.Bool)}
	f.waits <- w
	return w.fire, func() bool { w.stopped.Store(true); return true }
}

// next returns the Connector's next wait, failing the test if none comes.
func (f *fakeTimer) next(t *testing.T) fakeWait {
	t.Helper()
	select {
	case w := <-f.waits:
		return w
	case <-time.After(10 * time.Second):
		t.Fatal("the Connector did not start a wait")
		return fakeWait{}
	}
}

// recv returns the next value of ch, failing the test if none comes.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s", what)
		var zero T
		return zero
	}
}

// evalVia runs one request through st.
func evalVia(st limiter.Store, p *limiter.Policy, subject string) limiter.Outcome {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out := make([]limiter.Outcome, 1)
	st.Evaluate(ctx, []limiter.Request{{Policy: p, Subject: subjectOf(subject), Cost: 1}}, out)
	return out[0]
}

// refused is the error a dial to a closed port returns.
func refused(n int) error {
	return fmt.Errorf("attempt %d: %w", n, &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")})
}

// TestConnectorRetries drives the attempt loop with a fake dial and timer:
// four failures with the backoff's waits, requests Unavailable meanwhile,
// then the real Store of a Redis server.
func TestConnectorRetries(t *testing.T) {
	srv := redistest.Standalone(t)
	b, err := Backoff{Initial: 200 * time.Millisecond, Max: time.Second}.validated()
	if err != nil {
		t.Fatal(err)
	}
	attempts := make(chan Attempt, 1)
	connected := make(chan int, 1)
	c := newConnector(ConnectOptions{
		Backoff:   b,
		OnFailure: func(a Attempt) { attempts <- a },
		OnConnect: func(n int) { connected <- n },
	})
	timer := newFakeTimer()
	c.after = timer.after
	c.jitter = func() float64 { return 0.5 }
	var dials atomic.Int32
	const failures = 4
	c.dial = func(ctx context.Context) (*Store, error) {
		n := int(dials.Add(1))
		if n <= failures {
			return nil, refused(n)
		}
		return New(ctx, Config{Addrs: []string{srv.Addr()}})
	}
	p := fixed(t, "connect", 2, farWindow)
	go c.run()
	defer c.Close()

	// Before the first attempt has ended, or between attempts: not sent.
	o := evalVia(c, p, "a")
	if o.Kind != limiter.Unavailable || o.Category != limiter.CategoryNotConnected {
		t.Fatalf("before connecting: %v %s (%v), want unavailable %s", o.Kind, o.Category, o.Err, limiter.CategoryNotConnected)
	}
	recv(t, c.Tried(), "end of the first attempt")
	for i, want := range []time.Duration{150 * time.Millisecond, 300 * time.Millisecond, 600 * time.Millisecond, 750 * time.Millisecond} {
		n := i + 1
		a := recv(t, attempts, "failed attempt")
		if a.N != n || a.Wait != want || a.Operator || !strings.Contains(a.Err.Error(), fmt.Sprintf("attempt %d:", n)) {
			t.Fatalf("step %d: %+v, want attempt %d waiting %v, no operator", i, a, n, want)
		}
		w := timer.next(t)
		if w.d != want {
			t.Fatalf("step %d: waits %v, want %v", i, w.d, want)
		}
		// The loop is blocked on the wait: no new dial until it fires.
		if got := dials.Load(); got != int32(n) {
			t.Fatalf("step %d: %d dials before the wait ended, want %d", i, got, n)
		}
		o := evalVia(c, p, "a")
		if o.Kind != limiter.Unavailable || o.Category != limiter.CategoryNotConnected || o.RetryAfter != DefaultRetryAfter ||
			!strings.Contains(o.Err.Error(), fmt.Sprintf("attempt %d:", n)) {
			t.Fatalf("step %d: %v %s retry %v (%v), want unavailable %s with the last cause", i, o.Kind, o.Category, o.RetryAfter, o.Err, limiter.CategoryNotConnected)
		}
		if err := c.Ping(context.Background()); err == nil || !strings.Contains(err.Error(), "connection refused") {
			t.Fatalf("step %d: Ping %v, want the last cause", i, err)
		}
		if c.Connected() {
			t.Fatalf("step %d: connected before the dial succeeded", i)
		}
		w.fire <- time.Time{}
	}
	if n := recv(t, connected, "connection"); n != failures+1 {
		t.Fatalf("connected after %d attempts, want %d", n, failures+1)
	}
	if !c.Connected() {
		t.Fatal("Connected false after OnConnect")
	}
	if err := c.Ping(context.Background()); err != nil {
		t.Fatalf("Ping once connected: %v", err)
	}
	for i, allowed := range []bool{true, true, false} {
		o := evalVia(c, p, "a")
		if o.Kind != limiter.Evaluated || o.Decision.Allowed != allowed || o.Decision.Source != limiter.SourceRedis {
			t.Fatalf("connected, call %d: %v %+v (%v), want evaluated by Redis, allowed %v", i, o.Kind, o.Decision, o.Err, allowed)
		}
	}
	st := c.store.Load()
	c.Close()
	if !st.closed.Load() {
		t.Fatal("Close left the connected store open")
	}
	o = evalVia(c, p, "a")
	if o.Kind != limiter.Unavailable || !errors.Is(o.Err, errClosed) {
		t.Fatalf("after Close: %v (%v), want unavailable, closed", o.Kind, o.Err)
	}
	c.Close() // a second Close is harmless
	select {
	case a := <-attempts:
		t.Fatalf("an attempt after connecting: %+v", a)
	default:
	}
}

// TestConnectorCloseWhileWaiting: Close ends the wait between attempts and
// the loop's goroutine.
func TestConnectorCloseWhileWaiting(t *testing.T) {
	b, _ := Backoff{}.validated()
	c := newConnector(ConnectOptions{Backoff: b})
	timer := newFakeTimer()
	c.after = timer.after
	c.jitter = func() float64 { return 0 }
	c.dial = func(context.Context) (*Store, error) { return nil, refused(1) }
	go c.run()
	w := timer.next(t)
	if w.d != defaultBackoffInitial/2 {
		t.Fatalf("first wait %v, want %v", w.d, defaultBackoffInitial/2)
	}
	c.Close()
	if !w.stopped.Load() {
		t.Fatal("Close left the wait's timer running")
	}
	select {
	case <-c.done:
	default:
		t.Fatal("Close returned before the loop ended")
	}
	if err := c.Ping(context.Background()); !errors.Is(err, errClosed) {
		t.Fatalf("Ping after Close: %v, want %v", err, errClosed)
	}
	noConnectorGoroutine(t)
}

// TestConnectorCloseAfterFailedDial: an attempt that fails while Close
// runs does not leave its cause in place of the closed error.
func TestConnectorCloseAfterFailedDial(t *testing.T) {
	b, _ := Backoff{}.validated()
	c := newConnector(ConnectOptions{Backoff: b})
	c.after = newFakeTimer().after
	c.dial = func(context.Context) (*Store, error) { return nil, refused(1) }
	// jitter runs after the dial has failed and before its cause is set:
	// hold it there until Close has cancelled the loop.
	inJitter, release := make(chan struct{}), make(chan struct{})
	c.jitter = func() float64 {
		close(inJitter)
		<-release
		return 0
	}
	go c.run()
	recv(t, inJitter, "failed dial")
	closed := make(chan struct{})
	go func() {
		c.Close()
		close(closed)
	}()
	recv(t, c.ctx.Done(), "cancel by Close")
	close(release)
	recv(t, closed, "Close to return")
	if err := c.Ping(context.Background()); !errors.Is(err, errClosed) {
		t.Fatalf("Ping after Close: %v, want %v", err, errClosed)
	}
}

// TestConnectorCloseWhileDialling: Close aborts the dial in flight; a
// store that connects anyway is closed, never published.
func TestConnectorCloseWhileDialling(t *testing.T) {
	srv := redistest.Standalone(t)
	b, _ := Backoff{}.validated()
	failures := make(chan Attempt, 1)
	c := newConnector(ConnectOptions{Backoff: b, OnFailure: func(a Attempt) { failures <- a }})
	c.after = newFakeTimer().after
	c.jitter = func() float64 { return 0 }
	dialling := make(chan struct{})
	late := make(chan *Store, 1)
	c.dial = func(ctx context.Context) (*Store, error) {
		close(dialling)
		<-ctx.Done() // the Connector's context ends at Close
		st, err := New(context.Background(), Config{Addrs: []string{srv.Addr()}})
		if err != nil {
			return nil, err
		}
		late <- st
		return st, nil
	}
	go c.run()
	recv(t, dialling, "dial")
	c.Close()
	st := recv(t, late, "late store")
	if !st.closed.Load() {
		t.Fatal("a store that connected after Close was left open")
	}
	if c.Connected() {
		t.Fatal("a store that connected after Close was published")
	}
	select {
	case a := <-failures:
		t.Fatalf("the aborted dial was reported as a failed attempt: %+v", a)
	default:
	}
	noConnectorGoroutine(t)
}

// noConnectorGoroutine fails the test while a Connector's loop runs.
func noConnectorGoroutine(t *testing.T) {
	t.Helper()
	buf := make([]byte, 1<<20)
	deadline := time.Now().Add(5 * time.Second)
	for {
		stacks := string(buf[:runtime.Stack(buf, true)])
		if !strings.Contains(stacks, "(*Connector).run") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a Connector goroutine still runs:\n%s", stacks)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestConnectUntilRedisStarts: the real Connect against a port where
// Redis is down, then up: failed attempts are reported with their cause,
// and the store connects without being asked again.
func TestConnectUntilRedisStarts(t *testing.T) {
	srv := redistest.Standalone(t, redistest.Local())
	srv.Kill()
	attempts := make(chan Attempt, 64)
	connected := make(chan int, 1)
	c, err := Connect(Config{Addrs: []string{srv.Addr()}, Mode: ModeStandalone}, ConnectOptions{
		Backoff:   Backoff{Initial: 2 * time.Millisecond, Max: 20 * time.Millisecond},
		OnFailure: keep(attempts),
		OnConnect: func(n int) { connected <- n },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for n := 1; n <= 3; n++ {
		a := recv(t, attempts, "failed attempt")
		if a.N != n || a.Operator || !strings.Contains(a.Err.Error(), srv.Addr()) || !strings.Contains(a.Err.Error(), "refused") {
			t.Fatalf("attempt %d: %+v (%v), want a refused dial naming %s", n, a, a.Err, srv.Addr())
		}
		if a.Wait < time.Millisecond || a.Wait > 20*time.Millisecond {
			t.Fatalf("attempt %d: wait %v outside the backoff's [1ms, 20ms]", n, a.Wait)
		}
	}
	p := fixed(t, "connect-real", 1, farWindow)
	if o := evalVia(c, p, "x"); o.Kind != limiter.Unavailable || o.Category != limiter.CategoryNotConnected {
		t.Fatalf("while down: %v %s (%v)", o.Kind, o.Category, o.Err)
	}
	srv.Restart()
	n := recv(t, connected, "connection")
	if n < 4 {
		t.Fatalf("connected at attempt %d, after at least 3 failures", n)
	}
	if o := evalVia(c, p, "x"); o.Kind != limiter.Evaluated || !o.Decision.Allowed {
		t.Fatalf("once connected: %v %+v (%v)", o.Kind, o.Decision, o.Err)
	}
	c.Close()
	noConnectorGoroutine(t)
}

// TestConnectOperatorCauses: failures that need an operator are marked,
// and retried all the same.
func TestConnectOperatorCauses(t *testing.T) {
	srv := redistest.Standalone(t, redistest.Local())
	srv.MustDo("ACL", "SETUSER", "envoy-rls", "on", ">right-pw", "~*", "+@all")
	for _, c := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"wrong password", Config{Addrs: []string{srv.Addr()}, Username: "envoy-rls", Password: "wrong-pw"}, "WRONGPASS"},
		{"cluster mode against a standalone server", Config{Addrs: []string{srv.Addr()}, Mode: ModeCluster}, "mode mismatch"},
		{"sentinel mode against a standalone server", Config{Addrs: []string{srv.Addr()}, Mode: ModeSentinel, SentinelMaster: "mymaster"}, "sentinel"},
	} {
		t.Run(c.name, func(t *testing.T) {
			attempts := make(chan Attempt, 64)
			conn, err := Connect(c.cfg, ConnectOptions{
				Backoff:   Backoff{Initial: time.Millisecond, Max: 2 * time.Millisecond},
				OnFailure: keep(attempts),
			})
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			for n := 1; n <= 2; n++ {
				a := recv(t, attempts, "failed attempt")
				if !a.Operator || !strings.Contains(a.Err.Error(), c.want) {
					t.Fatalf("attempt %d: operator %v, %v; want an operator cause mentioning %q", n, a.Operator, a.Err, c.want)
				}
				if strings.Contains(a.Err.Error(), "-pw") {
					t.Fatalf("the cause leaks the password: %v", a.Err)
				}
			}
		})
	}
}

// TestConnectUntrustedTLS: a server certificate from an unknown CA needs
// an operator.
func TestConnectUntrustedTLS(t *testing.T) {
	redistest.RequireTLS(t)
	files := redistest.GenerateTLS(t)
	srv := redistest.Standalone(t, redistest.WithTLS(files, files.ClientConfig(t)))
	cfg := Config{Addrs: []string{srv.Addr()}, Mode: ModeStandalone, TLS: &tls.Config{MinVersion: tls.VersionTLS12}}
	attempts := make(chan Attempt, 64)
	c, err := Connect(cfg, ConnectOptions{
		Backoff:   Backoff{Initial: time.Millisecond, Max: 2 * time.Millisecond},
		OnFailure: keep(attempts),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if a := recv(t, attempts, "failed attempt"); !a.Operator || !strings.Contains(a.Err.Error(), "certificate") {
		t.Fatalf("operator %v, %v; want an operator cause about the certificate", a.Operator, a.Err)
	}
}

// keep returns an OnFailure that keeps the attempts that fit in ch: the
// loop must never block on a test that stopped reading.
func keep(ch chan Attempt) func(Attempt) {
	return func(a Attempt) {
		select {
		case ch <- a:
		default:
		}
	}
}

// TestUnixSocket: a standalone server reached over its Unix socket, as the
// reference service's default (REDIS_SOCKET_TYPE=unix) reaches it.
func TestUnixSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "redis.sock")
	redistest.Standalone(t, redistest.Local(), redistest.WithArgs("--unixsocket", sock, "--unixsocketperm", "700"))
	for _, mode := range []Mode{ModeAuto, ModeStandalone} {
		s := newStore(t, Config{Addrs: []string{sock}, Mode: mode})
		p := fixed(t, "unix", 2, farWindow)
		sub := subjectOf("unix-" + string(mode))
		for i, want := range []bool{true, true, false} {
			out := make([]limiter.Outcome, 1)
			s.Evaluate(context.Background(), []limiter.Request{{Policy: p, Subject: sub, Cost: 1}}, out)
			if out[0].Kind != limiter.Evaluated || out[0].Decision.Allowed != want {
				t.Fatalf("mode %s, call %d: %v %+v (%v), want allowed=%v", mode, i+1, out[0].Kind, out[0].Decision, out[0].Err, want)
			}
		}
	}
}

func TestUnixSocketRefused(t *testing.T) {
	for _, c := range []Config{
		{Addrs: []string{"/run/redis.sock", "127.0.0.1:6379"}},
		{Addrs: []string{"/run/redis.sock"}, Mode: ModeCluster},
		{Addrs: []string{"/run/redis.sock"}, Mode: ModeSentinel, SentinelMaster: "m"},
	} {
		if _, err := c.Validate(); !wantError(t, err, "a Unix socket path only as the one address of a standalone server") {
			t.Errorf("%+v: %v", c, err)
		}
	}
	c, err := Config{Addrs: []string{"/run/redis.sock"}}.Validate()
	if err != nil || c.Mode != ModeStandalone {
		t.Errorf("auto with a socket: mode %s, %v; want standalone", c.Mode, err)
	}
}
