// Package redis is the Redis store of envoy-rls: a limiter.Store that runs the
// versioned Lua programs of pkg/lua on Redis (standalone, Cluster or Sentinel;
// Redis 7.0+ or Valkey) through github.com/redis/rueidis, so that every
// replica of the service shares one exact state.
//
// A batch (the limits of one Envoy request) is one atomic program,
// rate-batch-v2.lua, run by FCALL of its function library (function.go;
// by EVALSHA where Redis refuses functions): one round trip and one TIME, all or nothing (see
// Store.Evaluate for Redis Cluster). Concurrent batches are auto-pipelined
// by rueidis. Failures say what is known about
// the state: Unavailable when the program certainly did not run (not
// connected, deadline passed before sending, the server refused the command),
// Indeterminate when it was sent and no answer came (timeout, connection lost),
// Incompatible when the state, the program or its reply do not match. Nothing
// unexpected is ever an allow.
//
// New connects before it returns. Connect returns a Connector instead: a
// limiter.Store that connects in the background, retrying with a bounded
// backoff, and answers Unavailable until then, so that a service can start
// before its Redis does.
//
// A Store is safe for concurrent use. The package does not log; outcomes carry
// their causes in Outcome.Err, and a Connector reports its failed attempts to
// a callback.
package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/redis/rueidis"
	"go.opentelemetry.io/otel/trace"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/deadline"
	"github.com/envoy-rls/envoy-rls/pkg/lua"
)

// batchScript and refundScript are built once from the embedded sources
// (batchScript: the fallback of batchFunction, function.go). rueidis.Lua is
// safe for concurrent use.
var (
	batchScript  = rueidis.NewLuaScript(lua.Batch().Source)
	refundScript = rueidis.NewLuaScript(lua.Refund().Source)
)

// errClosed is the cause of outcomes after Close.
var errClosed = errors.New("redis store: closed")

// Store evaluates requests with the Lua programs on Redis. Build it with New.
type Store struct {
	client  rueidis.Client
	timeout time.Duration
	// answerWait is how long a run waits for its answer past its calls'
	// deadlines: the connection's ConnWriteTimeout, after which rueidis
	// closes a connection that does not answer.
	answerWait time.Duration
	// deadlines bounds calls that come without a deadline sooner than
	// timeout: one timer per millisecond in use instead of one per call.
	deadlines *deadline.Wheel
	cluster   bool         // group batches by slot
	tracer    trace.Tracer // nil: no spans
	closed    atomic.Bool
	// scratch pools *scratch: the working memory of Evaluate.
	scratch sync.Pool
	// beforeRefund, when set (tests only), runs after the slot groups of a
	// split batch have answered and before the refunds are sent.
	beforeRefund func()

	// local and offsets convert a call's deadline to Redis's clock for the
	// program (clockOffset): one estimate per hash slot in cluster mode (a
	// slot's node has its own clock), else one.
	local   localClock
	offsets []clockOffset

	// Group commit (commit.go): one committer per hash slot in cluster
	// mode, else one; the caps of a group; the run scratch pool.
	committers   []atomic.Pointer[committer]
	groupMaxKeys int
	inFlight     int
	runs         sync.Pool
	metrics      *Metrics // nil: none

	// evalsha is set for good once Redis has refused FCALL or FUNCTION
	// LOAD (function.go); onFallback reports it (Config.OnFallback).
	evalsha    atomic.Bool
	onFallback func(reason string)
}

var _ limiter.Store = (*Store)(nil)

// New validates cfg, connects to Redis and returns a Store. It fails when no
// address answers within ctx (or the dial timeout), when the mode does not
// match what the addresses are (e.g. ModeCluster against a standalone server),
// or when authentication fails.
func New(ctx context.Context, cfg Config) (*Store, error) {
	cfg, err := cfg.Validate()
	if err != nil {
		return nil, err
	}
	// open dials synchronously without a context; run it aside so that ctx
	// bounds New, and close a store that arrives too late.
	type result struct {
		st  *Store
		err error
	}
	ch := make(chan result, 1)
	go func() {
		st, err := open(cfg, clientOption(cfg))
		ch <- result{st, err}
	}()
	select {
	case r := <-ch:
		return r.st, r.err
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.err == nil {
				r.st.Close()
			}
		}()
		return nil, fmt.Errorf("redis store: connecting to %s: %w", strings.Join(cfg.Addrs, ","), ctx.Err())
	}
}

// answerWait is how long a connection waits for an answer before it is
// closed (rueidis' ConnWriteTimeout): four store timeouts, at least a
// second.
func answerWait(timeout time.Duration) time.Duration { return max(4*timeout, time.Second) }

// clientOption is the rueidis configuration of a validated cfg.
func clientOption(cfg Config) rueidis.ClientOption {
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
		DialCtxFn:     dial,
		// A connection that does not answer is closed after this, which
		// fails its in-flight commands (Indeterminate) and makes the next
		// ones redial.
		ConnWriteTimeout: answerWait(cfg.Timeout),
		// Rate decisions never use client-side caching; leaving it off also
		// spares ACL users the CLIENT TRACKING permission.
		DisableCache: true,
		// Programs write: they must never be retried behind our back.
		DisableRetry: true,
		// Every command goes through the connection's pipeline, even one
		// sent alone. Otherwise rueidis sends a lone command synchronously
		// under the call's deadline and closes the connection when that
		// deadline passes: one slow answer would then tear down the
		// connection every other call shares, and the calls that reach it
		// before the redial fail at once with the stale error, unsent but
		// reported as unanswered. Pipelined, a deadline only abandons its
		// own reply; ConnWriteTimeout alone closes a connection.
		AlwaysPipelining:  true,
		PipelineMultiplex: cfg.multiplex(),
		BlockingPoolSize:  cfg.PoolSize,
		MaxFlushDelay:     cfg.MaxFlushDelay,
		// See connBuffer.
		ReadBufferEachConn:  connBuffer,
		WriteBufferEachConn: connBuffer,
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
	return opt
}

// open connects with opt (built from the validated cfg by clientOption)
// and returns the Store. It blocks for as long as rueidis takes to dial:
// each connection is bounded by cfg.DialTimeout (or sooner by
// opt.DialCtxFn's context).
func open(cfg Config, opt rueidis.ClientOption) (*Store, error) {
	c, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, fmt.Errorf("redis store: connecting to %s (%s mode): %w", strings.Join(cfg.Addrs, ","), cfg.Mode, err)
	}
	if cfg.Mode == ModeCluster && c.Mode() != rueidis.ClientModeCluster {
		c.Close()
		return nil, fmt.Errorf("redis store: %w: cluster mode, but %s is not a Redis Cluster", errModeMismatch, strings.Join(cfg.Addrs, ","))
	}
	s := &Store{client: c, timeout: cfg.Timeout, answerWait: answerWait(cfg.Timeout), deadlines: deadline.New(0), cluster: c.Mode() == rueidis.ClientModeCluster,
		local: newLocalClock(time.Now()), tracer: tracer(cfg.TracerProvider),
		groupMaxKeys: cfg.GroupMaxKeys, inFlight: cfg.GroupInFlight, metrics: cfg.Metrics, onFallback: cfg.OnFallback}
	if s.cluster {
		s.offsets = make([]clockOffset, slotCount)
		s.committers = make([]atomic.Pointer[committer], slotCount)
	} else {
		s.offsets = make([]clockOffset, 1)
		s.committers = make([]atomic.Pointer[committer], 1)
	}
	s.seedOffsets(cfg.DialTimeout)
	s.loadFunctions(cfg.DialTimeout)
	return s, nil
}

// Close closes every connection. Evaluations after Close are Unavailable.
func (s *Store) Close() {
	s.closed.Store(true)
	s.client.Close()
}

// Ping checks that Redis answers (the binary's store health check). In
// cluster mode it pings one node.
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if err := s.client.Do(ctx, s.client.B().Ping().Build()).Error(); err != nil {
		return fmt.Errorf("redis store: ping: %w", err)
	}
	return nil
}

// Evaluate implements limiter.Store with rate-batch-v2.lua: one program
// run (one TIME, one atomic step) evaluates the whole batch and commits it
// all or nothing; concurrent calls share runs (group commit, commit.go). It returns by the earlier of ctx's deadline
// and the configured Timeout: requests still without an answer then are
// Indeterminate. The program gets that deadline in Redis's clock
// (clockOffset) and commits nothing when it runs later, as it does when
// Redis stalls; such a reply, should it arrive in time, is Unavailable
// (limiter.CategoryDeadline). A request that fails Validate is Unavailable
// (limiter.CategoryInvalidRequest) and never sent; when such a failure
// alone blocks the batch, the others are sent as limiter.RoleCheck
// (limiter.Pending). The requests of a call with more than
// lua.MaxRequestKeys limits in one slot are not sent either.
//
// On a Redis Cluster the batch is split by hash slot (requests share a slot
// when they share a limiter.Tag, see pkg/descriptors' colocate): one call per
// slot, concurrently. Quota-mode requests then run as shadow ones inside each
// call, and the batch rule is decided over all the replies; when it says no
// while some slots committed, those slots' consumption is given back with
// rate-refund-v2.lua. docs/consistency.md describes that window.
//
// A batch of requests of concurrency policies alone (limiter.LeasesOnly) is
// evaluated by lease-v2.lua, one run per request (lease.go);
// pkg/limiter/leases sends them apart from the rate requests of their
// batch.
func (s *Store) Evaluate(ctx context.Context, batch []limiter.Request, out []limiter.Outcome) {
	if len(out) < len(batch) {
		panic(fmt.Sprintf("redis store: Evaluate: out has %d elements for %d requests", len(out), len(batch)))
	}
	out = out[:len(batch)]
	if len(batch) == 0 || limiter.FailIfEnded(ctx, out, "redis store: not sent") {
		return
	}
	if limiter.LeasesOnly(batch) {
		s.evaluateLeases(ctx, batch, out)
		return
	}
	for i := range batch {
		out[i] = limiter.Outcome{} // undecided, see limiter.Pending
		if err := batch[i].Validate(); err != nil {
			out[i] = limiter.UnavailableOutcome(0, limiter.CategoryInvalidRequest, fmt.Errorf("redis store: %w", err))
		}
	}
	// A Pending of its own, which a refund still running past ctx may keep
	// using (invalid requests are rare: a caller's bug).
	var p limiter.Pending
	p.Evaluate(ctx, batch, out, s.evaluate)
}

// evaluate is Evaluate for a batch of valid requests.
func (s *Store) evaluate(ctx context.Context, batch []limiter.Request, out []limiter.Outcome) {
	sc, _ := s.scratch.Get().(*scratch)
	if sc == nil {
		sc = new(scratch)
	}
	// recycle is cleared when a command may still refer to sc's buffers.
	recycle := true
	defer func() {
		if recycle {
			sc.reset()
			s.scratch.Put(sc)
		}
	}()
	// The role each request plays in its program.
	roles := grow(sc.roles, len(batch))
	sc.roles = roles
	for i := range batch {
		roles[i] = batch[i].EffectiveRole()
	}
	if s.closed.Load() {
		for i := range batch {
			out[i] = limiter.UnavailableOutcome(0, limiter.CategoryNotConnected, fmt.Errorf("redis store: policy %s: not sent: %w", batch[i].Policy.ID(), errClosed))
		}
		return
	}
	// One deadline: the caller's when it comes first (pkg/rls sets one),
	// else now+Timeout (a coarse one: up to 1 ms early, see pkg deadline).
	if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > s.timeout {
		now := time.Now()
		ctx = s.deadlines.Context(ctx, now, now.Add(s.timeout))
	}
	// The keys live in sc.kbuf; the strings point into it (see scratch).
	keys := grow(sc.keys, len(batch))
	sc.keys = keys
	ends := grow(sc.ends, len(batch))
	sc.ends = ends
	kbuf := sc.kbuf[:0]
	for i := range batch {
		kbuf = requestKey(kbuf, &batch[i])
		ends[i] = len(kbuf)
	}
	sc.kbuf = kbuf
	start := 0
	for i := range batch {
		if ends[i] > start {
			keys[i] = unsafe.String(&kbuf[start], ends[i]-start)
		} else {
			keys[i] = ""
		}
		start = ends[i]
	}
	groups := s.group(sc, batch, roles, keys)
	if len(groups) == 1 {
		g := s.commit(ctx, batch, roles, keys, groups[0])
		if !g.free {
			recycle = false
		}
		s.finish(batch, roles, out, g, g.committed)
		return
	}
	// The goroutines below, and a refund left running past ctx, use keys.
	recycle = false
	// Split over slots: quota requests cannot be decided inside one slot
	// (limiter.Role.Alone), and the batch rule is decided here.
	for i := range roles {
		roles[i] = roles[i].Alone()
	}
	var wg sync.WaitGroup
	// gctx, not ctx, goes to the goroutines: ctx is reassigned above, so
	// capturing it would move it to the heap on every call.
	gctx := ctx
	for k, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			groups[k] = s.commit(gctx, batch, roles, keys, g)
		}()
	}
	wg.Wait()
	for _, g := range groups {
		for k, i := range g.idx {
			out[i] = g.outs[k]
		}
	}
	commit := limiter.Commits(batch, out)
	var refunds []*group
	for _, g := range groups {
		if g.committed && !commit {
			refunds = append(refunds, g)
		}
	}
	if len(refunds) > 0 {
		if s.beforeRefund != nil {
			s.beforeRefund()
		}
		s.refund(ctx, batch, roles, keys, refunds)
	}
	for _, g := range groups {
		s.finish(batch, roles, out, g, g.committed && (commit || !g.refunded))
	}
}
