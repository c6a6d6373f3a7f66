// Package redis is the Redis store of envoy-rls: a limiter.Store that runs the
// versioned Lua programs of pkg/lua on Redis (standalone, Cluster or Sentinel;
// Redis 7.0+ or Valkey) through github.com/redis/rueidis, so that every
// replica of the service shares one exact state.
//
// A batch (the limits of one Envoy request) is one atomic program,
// rate-batch-v1.lua, run by EVALSHA (the full source is sent only when Redis
// answers NOSCRIPT): one round trip and one TIME, all or nothing (see
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
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/redis/rueidis"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/deadline"
	"github.com/envoy-rls/envoy-rls/pkg/lua"
)

// batchScript and refundScript are built once from the embedded sources.
// rueidis.Lua is safe for concurrent use.
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
	// deadlines bounds calls that come without a deadline sooner than
	// timeout: one timer per millisecond in use instead of one per call.
	deadlines *deadline.Wheel
	cluster   bool // group batches by slot
	closed    atomic.Bool
	// scratch pools *scratch: the working memory of Evaluate.
	scratch sync.Pool
	// beforeRefund, when set (tests only), runs after the slot groups of a
	// split batch have answered and before the refunds are sent.
	beforeRefund func()
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
		return nil, fmt.Errorf("redis store: %w: cluster mode, but %s is not a Redis Cluster", ErrModeMismatch, strings.Join(cfg.Addrs, ","))
	}
	return &Store{client: c, timeout: cfg.Timeout, deadlines: deadline.New(0), cluster: c.Mode() == rueidis.ClientModeCluster}, nil
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

// Evaluate implements limiter.Store with rate-batch-v1.lua: one program
// call (one round trip, one TIME, one atomic step) evaluates the whole batch
// and commits it all or nothing. It returns by the earlier of ctx's deadline
// and the configured Timeout: requests still without an answer then are
// Indeterminate. A request that fails Validate is Unavailable
// (limiter.CategoryInvalidRequest) and never sent; when such a failure alone
// blocks the batch (limiter.CheckOnly), the others are sent as
// limiter.ModeCheck.
//
// On a Redis Cluster the batch is split by hash slot (requests share a slot
// when they share a limiter.Tag, see pkg/descriptors' colocate): one call per
// slot, concurrently. Quota-mode requests then run as shadow ones inside each
// call, and the batch rule is decided over all the replies; when it says no
// while some slots committed, those slots' consumption is given back with
// rate-refund-v1.lua. docs/consistency.md describes that window.
func (s *Store) Evaluate(ctx context.Context, batch []limiter.Request, out []limiter.Outcome) {
	if len(out) < len(batch) {
		panic(fmt.Sprintf("redis store: Evaluate: out has %d elements for %d requests", len(out), len(batch)))
	}
	out = out[:len(batch)]
	if len(batch) == 0 {
		return
	}
	if err := ctx.Err(); err != nil {
		for i := range out {
			out[i] = limiter.UnavailableOutcome(0, limiter.CategoryDeadline, fmt.Errorf("redis store: not sent: %w", err))
		}
		return
	}
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
	// Requests to send, and the role each plays in its program.
	roles := grow(sc.roles, len(batch))
	sc.roles = roles
	sent := 0
	for i := range batch {
		r := &batch[i]
		if err := r.Validate(); err != nil {
			out[i] = limiter.UnavailableOutcome(0, limiter.CategoryInvalidRequest, fmt.Errorf("redis store: %w", err))
			roles[i] = invalidRole
			continue
		}
		roles[i] = r.Role()
		out[i] = limiter.Outcome{} // undecided, see limiter.CheckOnly
		sent++
	}
	if sent == 0 {
		return
	}
	if sent < len(batch) && limiter.CheckOnly(batch, out) {
		// The invalid requests alone block the batch: check the others.
		for i := range roles {
			if roles[i] != invalidRole {
				roles[i] = limiter.ModeCheck
			}
		}
	}
	if s.closed.Load() {
		for i := range batch {
			if roles[i] != invalidRole {
				out[i] = limiter.UnavailableOutcome(0, limiter.CategoryNotConnected, fmt.Errorf("redis store: policy %s: not sent: %w", batch[i].Policy.ID(), errClosed))
			}
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
		if roles[i] != invalidRole {
			kbuf = requestKey(kbuf, &batch[i])
		}
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
		g := groups[0]
		if !s.run(ctx, batch, roles, keys, g) {
			recycle = false
		}
		s.finish(batch, roles, out, g, g.committed)
		return
	}
	// The goroutines below, and a refund left running past ctx, use keys.
	recycle = false
	// Split over slots: quota requests cannot be decided inside one slot,
	// so every call treats them as shadow ones (consumed when allowed, never
	// blocking) and the batch rule is decided here.
	for i := range roles {
		if roles[i] == limiter.ModeQuota {
			roles[i] = limiter.ModeShadow
		}
	}
	var wg sync.WaitGroup
	// gctx, not ctx, goes to the goroutines: ctx is reassigned above, so
	// capturing it would move it to the heap on every call.
	gctx := ctx
	for _, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.run(gctx, batch, roles, keys, g)
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

// invalidRole marks a request that is not sent.
const invalidRole = limiter.Mode(255)

// group is the requests of one batch that share a slot (all of them outside
// a Redis Cluster), and what their program call answered.
type group struct {
	idx       []int // indices into the batch
	outs      []limiter.Outcome
	replies   []limiter.Reply
	committed bool
	answered  bool // the program replied (outs hold decisions)
	refunded  bool // the refund program replied (whatever it found)

	// Working memory of run, reused when the group comes from a scratch.
	gk, args []string
	abuf     []byte // packed ARGV; the strings in args point into it
	policies []*limiter.Policy
	vals     []lua.Value
}

// scratch is the working memory of one Evaluate call, pooled on the Store
// so that the common call (one slot) allocates little. The keys and packed
// arguments are strings that point into kbuf and g.abuf (unsafe.String):
// rueidis holds them until the command is written, so a scratch goes back
// to the pool only when every command built from it has been answered
// (after an error or an abandoned call it is left to the GC).
type scratch struct {
	roles  []limiter.Mode
	keys   []string
	ends   []int
	kbuf   []byte
	slots  []uint16
	groups []*group
	g      group // the first group
}

// reset drops what a pooled scratch must not keep alive.
func (sc *scratch) reset() {
	clear(sc.keys)
	clear(sc.groups)
	g := &sc.g
	clear(g.gk)
	clear(g.args)
	clear(g.policies)
	clear(g.vals)
	clear(g.outs)
	*g = group{idx: g.idx[:0], outs: g.outs[:0], replies: g.replies[:0], gk: g.gk[:0], args: g.args[:0], abuf: g.abuf[:0], policies: g.policies[:0], vals: g.vals[:0]}
}

// grow returns s resized to n elements, reusing its array when it can.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// group splits the sent requests by slot in cluster mode, in batch order.
// The first group is sc.g.
func (s *Store) group(sc *scratch, batch []limiter.Request, roles []limiter.Mode, keys []string) []*group {
	groups := sc.groups[:0]
	slots := sc.slots[:0]
	for i := range batch {
		if roles[i] == invalidRole {
			continue
		}
		var slot uint16
		if s.cluster {
			slot = KeySlot(keys[i])
		}
		k := slices.Index(slots, slot)
		if k < 0 {
			k = len(groups)
			slots = append(slots, slot)
			if k == 0 {
				sc.g.idx = sc.g.idx[:0]
				groups = append(groups, &sc.g)
			} else {
				groups = append(groups, &group{})
			}
		}
		groups[k].idx = append(groups[k].idx, i)
	}
	sc.groups, sc.slots = groups, slots
	return groups
}

// run sends one group's batch program and fills g.outs. The call runs in
// the caller's goroutine: rueidis returns by ctx's deadline (the command
// then is Indeterminate). It reports whether every command it built has
// been answered (so g's buffers are free again).
func (s *Store) run(ctx context.Context, batch []limiter.Request, roles []limiter.Mode, keys []string, g *group) (done bool) {
	n := len(g.idx)
	g.outs = grow(g.outs, n)
	g.replies = grow(g.replies, n)
	g.gk = grow(g.gk, n)
	g.policies = grow(g.policies, n)
	abuf := g.abuf[:0]
	for k, i := range g.idx {
		r := &batch[i]
		g.gk[k] = keys[i]
		g.policies[k] = r.Policy
		abuf = lua.AppendBatchPacked(abuf, r.Policy, r.Cost, roles[i])
	}
	g.abuf = abuf
	args := g.args[:0]
	for k, i := range g.idx {
		p := abuf[k*lua.BatchPacked : (k+1)*lua.BatchPacked]
		args = append(args, batch[i].Policy.ID(), unsafe.String(&p[0], len(p)))
	}
	g.args = args
	if err := ctx.Err(); err != nil {
		for k, i := range g.idx {
			g.outs[k] = limiter.UnavailableOutcome(0, limiter.CategoryDeadline, fmt.Errorf("redis store: policy %s: not sent: %w", batch[i].Policy.ID(), err))
		}
		return true
	}
	res := batchScript.Exec(ctx, s.client, g.gk, args)
	err := res.Error()
	done = err == nil
	if err == nil {
		var msgs []rueidis.RedisMessage
		msgs, err = res.ToArray()
		if err != nil {
			err = fmt.Errorf("%w: reply is not an array: %w", lua.ErrMalformedReply, err)
		} else {
			g.vals = replyValues(g.vals, msgs)
			g.committed, err = lua.ParseBatchReply(g.policies, g.vals, g.replies)
		}
	}
	if err != nil {
		g.committed = false
		for k, i := range g.idx {
			p := batch[i].Policy
			if errors.Is(err, lua.ErrMalformedReply) {
				g.outs[k] = limiter.IncompatibleOutcome(limiter.CategoryReplyMalformed, fmt.Errorf("redis store: policy %s: %w", p.ID(), err))
			} else {
				g.outs[k] = classify(p, err)
			}
		}
		return done
	}
	g.answered = true
	for k, i := range g.idx {
		g.outs[k] = limiter.OutcomeFromReply(batch[i].Policy, g.replies[k], limiter.SourceRedis)
	}
	return true
}

// replyValues converts the batch program's reply into the values
// lua.ParseBatchReply reads, reusing vals.
func replyValues(vals []lua.Value, msgs []rueidis.RedisMessage) []lua.Value {
	vals = grow(vals, len(msgs))
	for j := range msgs {
		m := &msgs[j]
		vals[j] = lua.Value{}
		if m.IsInt64() {
			vals[j].Int, _ = m.ToInt64()
			vals[j].IsInt = true
		} else if v, err := m.ToString(); err == nil {
			vals[j].Str = v
		} else {
			vals[j].Str = "\x00not a string" // ParseBatchReply refuses it
		}
	}
	return vals
}

// refund gives back, per committed group, what its allowed requests took (a
// check, by the role it was sent with, took nothing).
// It runs detached from ctx (a refund is worth finishing after the caller
// has gone), bounded by the store's Timeout, and waits for it at most until
// ctx is done.
func (s *Store) refund(ctx context.Context, batch []limiter.Request, roles []limiter.Mode, keys []string, groups []*group) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
	done := make(chan struct{})
	answered := make([]atomic.Bool, len(groups))
	go func() {
		defer close(done)
		defer cancel()
		var wg sync.WaitGroup
		for j, g := range groups {
			var gk, args []string
			for k, i := range g.idx {
				d := &g.outs[k].Decision
				if g.outs[k].Kind != limiter.Evaluated || !d.Allowed || roles[i] == limiter.ModeCheck {
					continue
				}
				gk = append(gk, keys[i])
				args = lua.AppendRefundArgs(args, batch[i].Policy, batch[i].Cost, g.replies[k].EffectiveNowMs)
			}
			if len(gk) == 0 {
				answered[j].Store(true)
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := refundScript.Exec(rctx, s.client, gk, args).Error(); err == nil {
					answered[j].Store(true)
				}
			}()
		}
		wg.Wait()
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
	for j, g := range groups {
		g.refunded = answered[j].Load()
	}
}

// finish turns a group's outcomes into the batch's: an allowed request
// consumed when consumed is true and it was not a check; otherwise it is
// reported before its cost.
func (s *Store) finish(batch []limiter.Request, roles []limiter.Mode, out []limiter.Outcome, g *group, consumed bool) {
	for k, i := range g.idx {
		o := g.outs[k]
		if o.Kind == limiter.Evaluated && o.Decision.Allowed {
			if consumed && roles[i] != limiter.ModeCheck {
				o.Decision.Consumed = true
			} else if g.committed && roles[i] != limiter.ModeCheck {
				// Taken, then given back: report it before its cost. (The
				// reset point stays the one after the cost: later or equal,
				// never earlier than the truth.)
				o.Decision.Remaining = min(o.Decision.Remaining+batch[i].Cost, o.Decision.Limit)
			}
		}
		out[i] = o
	}
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
