package redis

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// Defaults of Backoff.
const (
	// defaultBackoffInitial is the longest wait before the second attempt:
	// short enough that a Redis that is a moment late (a pod started
	// alongside) is used within a fraction of a second.
	defaultBackoffInitial = 200 * time.Millisecond
	// defaultBackoffMax caps the wait between attempts. It is the longest a
	// replica keeps answering by its failure modes after Redis is reachable
	// again (plus one dial): ten seconds is one period of a default
	// Kubernetes readiness probe, so the backoff adds at most about one
	// probe period to recovery, while one replica makes at most 12 attempts
	// (one TCP connection and handshake each) a minute.
	defaultBackoffMax = 10 * time.Second
	// maxBackoff bounds Backoff.Max.
	maxBackoff = 10 * time.Minute
)

// errModeMismatch is the cause of a connection refused because the servers
// are not of the configured Mode (e.g. ModeCluster against a standalone
// server).
var errModeMismatch = errors.New("mode mismatch")

// Backoff says how long a Connector waits between connection attempts.
// After the n-th failed attempt it waits a time drawn uniformly from
// [b/2, b], where b = min(Initial·2^(n-1), Max): the waits double, and the
// jitter keeps replicas that started together from dialling in step.
// The zero value is the defaults.
type Backoff struct {
	// Initial is b after the first attempt. (Optional, default
	// DefaultBackoffInitial)
	Initial time.Duration
	// Max caps b. (Optional, default DefaultBackoffMax, at most MaxBackoff)
	Max time.Duration
}

// validated returns b with defaults filled, or an error naming the field.
func (b Backoff) validated() (Backoff, error) {
	if b.Initial == 0 {
		b.Initial = defaultBackoffInitial
	}
	if b.Max == 0 {
		b.Max = max(defaultBackoffMax, b.Initial)
	}
	if b.Initial < time.Millisecond || b.Initial > maxBackoff {
		return b, fmt.Errorf("redis store: backoff initial %v is outside [1ms, %v]", b.Initial, maxBackoff)
	}
	if b.Max < b.Initial || b.Max > maxBackoff {
		return b, fmt.Errorf("redis store: backoff max %v is outside [initial %v, %v]", b.Max, b.Initial, maxBackoff)
	}
	return b, nil
}

// Wait returns the wait after the n-th failed attempt (n ≥ 1) for the
// jitter draw r in [0, 1) (see Backoff). b must be validated.
func (b Backoff) Wait(n int, r float64) time.Duration {
	d := b.Initial
	for i := 1; i < n && d < b.Max; i++ {
		d *= 2
	}
	d = min(d, b.Max)
	return d/2 + time.Duration(r*float64(d/2))
}

// Attempt describes one failed connection attempt of a Connector.
type Attempt struct {
	// N counts the attempts, from 1.
	N int
	// Err is the cause. It names the addresses and the mode, never the
	// password.
	Err error
	// Wait is the time until the next attempt.
	Wait time.Duration
	// Operator is true when retrying alone is unlikely to help: Redis
	// refused the handshake (credentials, ACL, a command it does not know:
	// sentinel mode against a plain server), TLS verification failed, or
	// the servers are not of the configured mode (ErrModeMismatch).
	Operator bool
}

// ConnectOptions configures Connect.
type ConnectOptions struct {
	// Backoff spaces the attempts. (Optional, default the zero Backoff)
	Backoff Backoff
	// OnFailure is called after each failed attempt, before the wait, from
	// the connecting goroutine: it must not block long. (Optional)
	OnFailure func(Attempt)
	// OnConnect is called once the store is connected, with the number of
	// attempts it took, from the connecting goroutine. (Optional)
	OnConnect func(attempts int)
}

// connector is a limiter.Store that connects to Redis in the background.
// Until it is connected, every request is Unavailable
// (limiter.CategoryNotConnected, the last attempt's failure as the cause;
// nothing is sent, so nothing is mutated) and Ping fails; once connected it
// is the Store that New would have returned: rueidis then reconnects on its
// own when a connection drops, and the Connector makes no more attempts.
//
// It lets a service start while Redis does not answer yet (a pod that
// starts before its Redis) and answer by its failure policies meanwhile,
// instead of exiting. The package does not log: each failed attempt is
// reported to ConnectOptions.OnFailure for the caller to log.
//
// It wraps a Store rather than making the Store connect lazily: the
// Store's hot path keeps no "connected yet?" branch beyond one atomic load
// here, New keeps its contract (connected or an error) for library users,
// and the retry policy lives in one place, with its clock injectable.
//
// A Connector is safe for concurrent use. Build it with Connect.
type connector struct {
	opts ConnectOptions
	// ctx ends at Close: it stops the waits and aborts dials in flight.
	ctx    context.Context
	cancel context.CancelFunc

	store atomic.Pointer[Store] // nil until connected
	cause atomic.Pointer[error] // why requests are not sent while store is nil
	close sync.Once             // Close's work
	tried chan struct{}         // closed when the first attempt has ended
	done  chan struct{}         // closed when the connecting goroutine has returned

	// Seams for tests; Connect sets the real ones. dial gets ctx to
	// abort on (the real one aborts through the client's DialCtxFn).
	dial   func(ctx context.Context) (*Store, error)
	after  func(d time.Duration) (<-chan time.Time, func() bool)
	jitter func() float64
}

var _ limiter.Store = (*connector)(nil)

// Connect validates cfg and opts and returns a Connector that is already
// trying to connect. It fails only on configuration that can never work:
// connection failures (refused, DNS, timeouts, authentication, a mode
// mismatch) are retried until Close.
func Connect(cfg Config, opts ConnectOptions) (*connector, error) {
	cfg, err := cfg.Validate()
	if err != nil {
		return nil, err
	}
	if opts.Backoff, err = opts.Backoff.validated(); err != nil {
		return nil, err
	}
	c := newConnector(opts)
	opt := clientOption(cfg)
	// The dials of the first connection, and later reconnections of its
	// client, end when the Connector closes.
	opt.DialCtxFn = func(ctx context.Context, dst string, d *net.Dialer, tc *tls.Config) (net.Conn, error) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(c.ctx, cancel)()
		return dial(ctx, dst, d, tc)
	}
	c.dial = func(context.Context) (*Store, error) { return open(cfg, opt) }
	c.after = func(d time.Duration) (<-chan time.Time, func() bool) {
		t := time.NewTimer(d)
		return t.C, t.Stop
	}
	c.jitter = rand.Float64
	go c.run()
	return c, nil
}

// newConnector returns a Connector without its seams, not yet running.
func newConnector(opts ConnectOptions) *connector {
	c := &connector{opts: opts, tried: make(chan struct{}), done: make(chan struct{})}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.setCause(errors.New("redis store: not connected yet: the first attempt is in progress"))
	return c
}

func (c *connector) setCause(err error) { c.cause.Store(&err) }

// run makes attempts until one connects or the Connector closes.
func (c *connector) run() {
	defer close(c.done)
	first := true
	ended := func() {
		if first {
			first = false
			close(c.tried)
		}
	}
	defer ended()
	for n := 1; ; n++ {
		st, err := c.dial(c.ctx)
		if c.ctx.Err() != nil {
			// Closed while dialling: the failure, if any, is the abort.
			if err == nil {
				st.Close()
			}
			return
		}
		if err == nil {
			c.store.Store(st)
			ended()
			if c.opts.OnConnect != nil {
				c.opts.OnConnect(n)
			}
			return
		}
		wait := c.opts.Backoff.Wait(n, c.jitter())
		c.setCause(fmt.Errorf("redis store: not connected (attempt %d failed, next in %v): %w", n, wait.Round(time.Millisecond), err))
		ended()
		if c.opts.OnFailure != nil {
			c.opts.OnFailure(Attempt{N: n, Err: err, Wait: wait, Operator: needsOperator(err)})
		}
		tick, stop := c.after(wait)
		select {
		case <-c.ctx.Done():
			stop()
			return
		case <-tick:
		}
	}
}

// Tried is closed when the first attempt has ended, connected or not. A
// service can wait on it to answer its first requests from Redis when
// Redis is up, and to start at once when it is not.
func (c *connector) Tried() <-chan struct{} { return c.tried }

// Connected reports whether the store is connected.
func (c *connector) Connected() bool { return c.store.Load() != nil }

// Evaluate implements limiter.Store: the connected Store's Evaluate, or
// every request Unavailable (limiter.CategoryNotConnected) before that.
func (c *connector) Evaluate(ctx context.Context, batch []limiter.Request, out []limiter.Outcome) {
	if st := c.store.Load(); st != nil {
		st.Evaluate(ctx, batch, out)
		return
	}
	if len(out) < len(batch) {
		panic(fmt.Sprintf("redis store: Evaluate: out has %d elements for %d requests", len(out), len(batch)))
	}
	cause := *c.cause.Load()
	for i := range batch {
		out[i] = limiter.UnavailableOutcome(DefaultRetryAfter, limiter.CategoryNotConnected, cause)
	}
}

// Ping checks that Redis answers (the binary's store health check); it
// fails while the store is not connected.
func (c *connector) Ping(ctx context.Context) error {
	if st := c.store.Load(); st != nil {
		return st.Ping(ctx)
	}
	return *c.cause.Load()
}

// Close stops the attempts, waits for the connecting goroutine (a dial in
// flight is aborted) and closes the store if it connected. Evaluations
// after Close are Unavailable. Close may be called more than once.
func (c *connector) Close() {
	c.close.Do(func() {
		c.cancel()
		<-c.done
		// After the loop has returned, so that a failed attempt ending
		// during Close cannot overwrite it.
		c.setCause(errClosed)
		if st := c.store.Load(); st != nil {
			st.Close()
		}
	})
}

// needsOperator reports causes that retrying alone is unlikely to cure.
func needsOperator(err error) bool {
	if errors.Is(err, errModeMismatch) {
		return true
	}
	var rerr *rueidis.RedisError
	if errors.As(err, &rerr) {
		// Redis answered the handshake with an error: the credentials or
		// the ACL (WRONGPASS, NOAUTH, NOPERM), a command the server does not
		// know (sentinel mode against a plain server)... unless the server
		// is only passing through a state it leaves on its own.
		code, _, _ := strings.Cut(rerr.Error(), " ")
		switch code {
		case "LOADING", "BUSY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN":
			return false
		}
		return true
	}
	var (
		unknownCA x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		verify    *tls.CertificateVerificationError
		notTLS    tls.RecordHeaderError
		alert     tls.AlertError
	)
	return errors.As(err, &unknownCA) || errors.As(err, &hostname) || errors.As(err, &invalid) ||
		errors.As(err, &verify) || errors.As(err, &notTLS) || errors.As(err, &alert)
}
