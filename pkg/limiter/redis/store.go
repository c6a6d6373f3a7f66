// Package redis is the Redis store of envoy-rls: a limiter.Store that runs the
// versioned Lua programs of pkg/lua on Redis (standalone, Cluster or Sentinel;
// Redis 7.0+ or Valkey) through github.com/redis/rueidis, so that every
// replica of the service shares one exact state.
//
// Each request is one atomic program run by EVALSHA (the full source is sent
// only when Redis answers NOSCRIPT); concurrent requests, including those of
// one batch, are auto-pipelined by rueidis. Failures say what is known about
// the state: Unavailable when the program certainly did not run (not
// connected, deadline passed before sending, the server refused the command),
// Indeterminate when it was sent and no answer came (timeout, connection lost),
// Incompatible when the state, the program or its reply do not match. Nothing
// unexpected is ever an allow.
//
// A Store is safe for concurrent use. The package does not log; outcomes carry
// their causes in Outcome.Err.
package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/lua"
)

// scripts holds one rueidis.Lua per algorithm (index: limiter.Algorithm),
// built once from the embedded sources. rueidis.Lua is safe for concurrent use.
var scripts = func() [4]*rueidis.Lua {
	var s [4]*rueidis.Lua
	for _, p := range lua.Programs() {
		s[p.Algorithm] = rueidis.NewLuaScript(p.Source)
	}
	return s
}()

// errClosed is the cause of outcomes after Close.
var errClosed = errors.New("redis store: closed")

// Store evaluates requests with the Lua programs on Redis. Build it with New.
type Store struct {
	client  rueidis.Client
	timeout time.Duration
	closed  atomic.Bool
}

var _ limiter.Store = (*Store)(nil)

// New validates cfg, connects to Redis and returns a Store. It fails when no
// address answers within ctx (or the dial timeout), when the mode does not
// match what the addresses are (e.g. ModeCluster against a standalone server),
// or when authentication fails.
func New(ctx context.Context, cfg Config) (*Store, error) {
	cfg, err := cfg.validated()
	if err != nil {
		return nil, err
	}
	opt := rueidis.ClientOption{
		InitAddress: append([]string(nil), cfg.Addrs...),
		Username:    cfg.Username,
		Password:    cfg.Password,
		TLSConfig:   cfg.TLS,
		ClientName:  "envoy-rls",
		// CLIENT SETINFO is Redis 7.2+; skipping it also keeps the ACL a
		// store needs small.
		ClientSetInfo: rueidis.DisableClientSetInfo,
		Dialer:        net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: time.Second},
		// A connection that does not answer is closed after this, which
		// fails its in-flight commands (Indeterminate) and makes the next
		// ones redial.
		ConnWriteTimeout: max(4*cfg.Timeout, time.Second),
		// Rate decisions never use client-side caching; leaving it off also
		// spares ACL users the CLIENT TRACKING permission.
		DisableCache: true,
		// Programs write: they must never be retried behind our back.
		DisableRetry:      true,
		PipelineMultiplex: cfg.multiplex(),
		BlockingPoolSize:  cfg.PoolSize,
	}
	switch cfg.Mode {
	case ModeStandalone:
		opt.ForceSingleClient = true
	case ModeSentinel:
		opt.Sentinel = rueidis.SentinelOption{
			MasterSet:               cfg.SentinelMaster,
			Username:                cfg.SentinelUsername,
			Password:                cfg.SentinelPassword,
			TLSConfig:               cfg.TLS,
			Dialer:                  opt.Dialer,
			TopologyRefreshInterval: sentinelRefresh,
		}
	}
	// rueidis.NewClient dials synchronously without a context; run it aside
	// so that ctx bounds New, and close a client that arrives too late.
	type result struct {
		c   rueidis.Client
		err error
	}
	ch := make(chan result, 1)
	go func() {
		c, err := rueidis.NewClient(opt)
		ch <- result{c, err}
	}()
	var r result
	select {
	case r = <-ch:
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.err == nil {
				r.c.Close()
			}
		}()
		return nil, fmt.Errorf("redis store: connecting to %s: %w", strings.Join(cfg.Addrs, ","), ctx.Err())
	}
	if r.err != nil {
		return nil, fmt.Errorf("redis store: connecting to %s (%s mode): %w", strings.Join(cfg.Addrs, ","), cfg.Mode, r.err)
	}
	if cfg.Mode == ModeCluster && r.c.Mode() != rueidis.ClientModeCluster {
		r.c.Close()
		return nil, fmt.Errorf("redis store: cluster mode, but %s is not a Redis Cluster", strings.Join(cfg.Addrs, ","))
	}
	return &Store{client: r.c, timeout: cfg.Timeout}, nil
}

// Close closes every connection. Evaluations after Close are Unavailable.
func (s *Store) Close() {
	s.closed.Store(true)
	s.client.Close()
}

// Ping checks that Redis answers (for /readyz). In cluster mode it pings one
// node.
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if err := s.client.Do(ctx, s.client.B().Ping().Build()).Error(); err != nil {
		return fmt.Errorf("redis store: ping: %w", err)
	}
	return nil
}

// Evaluate runs one program per request, concurrently (rueidis pipelines
// them), and writes one outcome per request into out, in order. It returns by
// the earlier of ctx's deadline and the configured Timeout: a request still
// without an answer then is Indeterminate. A request that fails Validate is
// Unavailable (limiter.CategoryInvalidRequest) and never sent.
func (s *Store) Evaluate(ctx context.Context, batch []limiter.Request, out []limiter.Outcome) {
	if len(out) < len(batch) {
		panic(fmt.Sprintf("redis store: Evaluate: out has %d elements for %d requests", len(out), len(batch)))
	}
	if len(batch) == 0 {
		return
	}
	if err := ctx.Err(); err != nil {
		for i := range out {
			out[i] = limiter.UnavailableOutcome(0, limiter.CategoryDeadline, fmt.Errorf("redis store: not sent: %w", err))
		}
		return
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	// Each request runs in its own goroutine and reports on its own
	// buffered channel, so that a late answer never races with out after
	// Evaluate has returned.
	chans := make([]chan limiter.Outcome, len(batch))
	for i := range batch {
		chans[i] = make(chan limiter.Outcome, 1)
		go func(r limiter.Request, ch chan<- limiter.Outcome) {
			ch <- s.evaluate(ctx, r)
		}(batch[i], chans[i])
	}
	for i, ch := range chans {
		select {
		case out[i] = <-ch:
		case <-ctx.Done():
			// Not answered in time; sent or not, we cannot tell.
			select {
			case out[i] = <-ch:
			default:
				out[i] = limiter.IndeterminateOutcome(DefaultRetryAfter, fmt.Errorf("redis store: policy %s: no answer before the deadline: %w", batch[i].Policy.ID(), ctx.Err()))
			}
		}
	}
}

// evaluate runs one request's program and classifies the result.
func (s *Store) evaluate(ctx context.Context, r limiter.Request) limiter.Outcome {
	if err := r.Validate(); err != nil {
		return limiter.UnavailableOutcome(0, limiter.CategoryInvalidRequest, fmt.Errorf("redis store: %w", err))
	}
	p := r.Policy
	script := scripts[p.Algorithm()]
	if script == nil {
		return limiter.IncompatibleOutcome(limiter.CategoryProgramInvalid, fmt.Errorf("redis store: policy %s: no program for algorithm %s", p.ID(), p.Algorithm()))
	}
	var kb [96]byte
	key := string(r.Key(kb[:0]))
	var ab [9]string
	args := lua.AppendArgs(ab[:0], p, r.Cost)
	if err := ctx.Err(); err != nil {
		return limiter.UnavailableOutcome(0, limiter.CategoryDeadline, fmt.Errorf("redis store: policy %s: not sent: %w", p.ID(), err))
	}
	if s.closed.Load() {
		return limiter.UnavailableOutcome(0, limiter.CategoryNotConnected, fmt.Errorf("redis store: policy %s: not sent: %w", p.ID(), errClosed))
	}
	res := script.Exec(ctx, s.client, []string{key}, args)
	if err := res.Error(); err != nil {
		return classify(p, err)
	}
	msgs, err := res.ToArray()
	if err != nil {
		return limiter.IncompatibleOutcome(limiter.CategoryReplyMalformed, fmt.Errorf("redis store: policy %s: reply is not an array: %w", p.ID(), err))
	}
	var fb [lua.ReplyFields]string
	fields := fb[:0]
	for i := range msgs {
		if i == lua.ReplyFields {
			fields = append(fields, "") // too many: ParseReply reports the arity
			break
		}
		f, err := msgs[i].ToString()
		if err != nil {
			return limiter.IncompatibleOutcome(limiter.CategoryReplyMalformed, fmt.Errorf("redis store: policy %s: reply field %d is not a string: %w", p.ID(), i+1, err))
		}
		fields = append(fields, f)
	}
	reply, err := lua.ParseReply(p, fields)
	if err != nil {
		return limiter.IncompatibleOutcome(limiter.CategoryReplyMalformed, fmt.Errorf("redis store: policy %s: %w", p.ID(), err))
	}
	return limiter.OutcomeFromReply(p, reply, limiter.SourceRedis)
}

// classify maps a failed program run to an outcome by what is known about
// the state.
func classify(p *limiter.Policy, err error) limiter.Outcome {
	wrap := func(what string) error { return fmt.Errorf("redis store: policy %s: %s: %w", p.ID(), what, err) }
	if rerr, ok := rueidis.IsRedisErr(err); ok {
		// Redis answered with an error: the program either did not start
		// or failed before its single write (it writes last).
		msg := rerr.Error()
		code, _, _ := strings.Cut(msg, " ")
		switch code {
		case "BUSY", "OOM":
			return limiter.UnavailableOutcome(DefaultRetryAfter, limiter.CategoryCapacity, wrap("refused by Redis"))
		case "NOPERM", "NOAUTH", "WRONGPASS", "READONLY", "LOADING", "MASTERDOWN", "CLUSTERDOWN",
			"TRYAGAIN", "MOVED", "ASK", "CROSSSLOT", "NOREPLICAS", "MISCONF", "NOSCRIPT":
			return limiter.UnavailableOutcome(DefaultRetryAfter, limiter.CategoryNotConnected, wrap("refused by Redis"))
		}
		return limiter.IncompatibleOutcome(limiter.CategoryProgramInvalid, wrap("program failed"))
	}
	if notSent(err) {
		return limiter.UnavailableOutcome(DefaultRetryAfter, limiter.CategoryNotConnected, wrap("not sent"))
	}
	// Sent (or possibly sent) and no answer: timeout, connection lost.
	return limiter.IndeterminateOutcome(DefaultRetryAfter, wrap("no answer"))
}

// notSent reports errors that rueidis returns only before writing the
// command: the dial failed (refused, unreachable, timed out connecting), no
// node serves the slot. rueidis.ErrClosing is not among them: a connection
// closed under in-flight commands (a topology change) fails those with it too.
func notSent(err error) bool {
	if errors.Is(err, rueidis.ErrNoSlot) || errors.Is(err, rueidis.ErrNoAddr) {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
