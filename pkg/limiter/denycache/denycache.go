// Package denycache is a local deny cache in front of a limiter.Store: once
// the store has certainly denied a subject on a policy whose denials hold
// (limiter.Policy.DenialsHold: fixed window, token bucket, GCRA, sliding
// log; a policy with a penalty box excepted), or has answered that the
// subject is in its penalty box (limiter.Decision.Blocked, any algorithm: a
// block ends only with time, and denies every cost),
// requests for the same state are answered "denied" locally until the
// moment the store said the subject could next be allowed — a block until
// it ends (Decision.BlockedFor), its retry counted down, for the costs
// whose retry it knows (see entry.answers: a block's retry waits for the
// limit itself when that is later). A subject hammered
// far over its limit (a hot key) then costs one store call per
// window instead of one per request.
//
// # Why it is exact
//
// A denial consumes nothing, and for an algorithm whose denials hold nothing
// but time turns a denial into an allow: other requests (from any replica)
// only consume more. The store's Decision.RetryAfter is how long until the
// denied cost fits if nothing else is consumed, so every request of the same
// state with a cost at least the denied one, arriving before that moment,
// would be denied by the store too. The cache measures that moment on its own
// clock from an instant read before the store was asked (and one millisecond
// earlier, the stores' resolution), so it never outlives the store's denial
// whatever the store's clock. Only Evaluated, Certain denials from a store
// are cached: never the sliding-window counter (approximate), never a
// failure or a failure-mode answer, never an allow, and never a denial that
// counted the cost of an earlier request of its batch on the same state
// which was not taken (it holds for that batch, not for the state).
//
// The cache key is the whole identity of the state and of the limit: policy
// ID, revision, algorithm, limit, window or refill rate, penalty box,
// subject and hash tag. A reload that changes the limit, the penalty or the
// revision misses the cache.
//
// One case is conservative rather than exact: the Redis store's cross-slot
// refund (see docs/consistency.md) gives units back; a denial cached just
// before such a refund stands until its time. That over-denies, it never
// admits more than the limit.
//
// # Batches
//
// limiter.Store evaluates a batch all or nothing. When a cached denial alone
// makes the batch unable to commit (limiter.CheckOnly: an ordinary or probe
// limit, or every quota limit), the answer is known without consuming anything: the
// cached limits are answered from the cache and the rest are sent to the
// store in limiter.RoleCheck (reported, never consumed), exactly what the
// store would have answered for the whole batch; when every limit is cached
// the store is not called at all. When the cached denials cannot block the batch (shadow
// or check limits, or a quota limit with other quota limits), the whole batch
// goes to the store unchanged. A probe (limiter.RoleProbe) is answered from a
// cached denial like any request of its cost; its own denial is cached like
// any other, and since only denials are cached a probe never records a
// consumption. A probe never records a penalty-box offence either, so on a
// policy with a penalty box only its BLOCKED answer is cached (as any
// block), and a batch sends an unanswered probe of such a policy as a
// check.
//
// A Cache is safe for concurrent use; build it with New.
package denycache

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// Defaults for Config fields left zero.
const (
	// DefaultSize is the most denials held at once.
	DefaultSize = 65_536
	// Shards is the number of independently locked shards.
	Shards = 64
	// resolution is the stores' time resolution: the cache expires this
	// much before the store's retry point (see the package doc).
	resolution = time.Millisecond
	// evictScan bounds how many entries a full shard inspects for an
	// expired one before it evicts a live one.
	evictScan = 16
)

// observer is told about cache hits. Metrics is the Prometheus one
// (envoy_rls_local_cache_hits_total).
type observer interface {
	// Hits reports n requests answered from the cache by one Evaluate.
	Hits(n int)
}

// Config configures a Cache.
type Config struct {
	// Store is the store behind the cache. (Required)
	Store limiter.Store
	// Size bounds the number of cached denials; a full shard evicts an
	// expired entry, else an arbitrary one (forgetting a denial only costs
	// a store call). (Optional, default DefaultSize; at least Shards)
	Size int
	// Clock reads the local time. Any monotonic clock works: only
	// durations the store reported are added to it. (Optional, default
	// limiter.SystemClock)
	Clock limiter.Clock
	// Observer is told about hits. (Optional)
	Observer observer
}

// cache is a limiter.Store that answers repeated certain denials locally.
type cache struct {
	store    limiter.Store
	clock    limiter.Clock
	observer observer
	perShard int
	shards   [Shards]shard
	scratch  sync.Pool
}

var _ limiter.Store = (*cache)(nil)

// key is the identity of one state and its limit.
type key struct {
	subject   limiter.SubjectDigest
	tag       limiter.Tag
	policyID  string
	revision  uint32
	algorithm limiter.Algorithm
	limit     int64
	windowMs  int64
	refillAmt int64
	refillMs  int64
	penalty   limiter.Penalty
}

// entry is one cached denial: a cost of at least cost is denied until
// until. A block (decision.Blocked) is cached until until, the block's
// end, and retryAt is when the store said its cost could next be
// admitted: later than the block's end when the limit itself denies that
// cost beyond it (limiter.Decision.BlockedFor).
type entry struct {
	until    time.Time
	retryAt  time.Time
	cost     int64
	decision limiter.Decision // the store's denial, Source rewritten on use
}

// answers reports whether e answers a request of cost exactly as the store
// would. A block denies every cost, but its retry depends on the cost
// when the limit's own wait outlasts the block: then e answers its own
// cost only; otherwise any cost up to its own (the limit admits a smaller
// one no later). A larger cost may wait longer: the store answers it.
func (e *entry) answers(cost int64) bool {
	d := &e.decision
	switch {
	case !d.Blocked:
		return cost >= e.cost
	case d.RetryAfter > d.BlockedFor:
		return cost == e.cost
	}
	return cost <= e.cost
}

type shard struct {
	mu sync.Mutex
	m  map[key]entry
	// held is len(m), written under mu after every change: a lookup in an
	// empty shard (most of them, when few subjects are denied) reads it
	// and neither builds the key nor takes the lock.
	held atomic.Int32
}

// changed records the shard's size after a change. Called with sh.mu held.
func (sh *shard) changed() { sh.held.Store(int32(len(sh.m))) }

// scratch is the per-call work of Evaluate.
type scratch struct {
	hit     []bool
	pending limiter.Pending
}

// errNoStore is returned by New without a store.
var errNoStore = errors.New("denycache: Config.Store is required")

// New validates cfg and returns a Cache.
func New(cfg Config) (*cache, error) {
	if cfg.Store == nil {
		return nil, errNoStore
	}
	if cfg.Size == 0 {
		cfg.Size = DefaultSize
	}
	if cfg.Size < Shards {
		return nil, errors.New("denycache: Config.Size must be at least the number of shards (64)")
	}
	if cfg.Clock == nil {
		cfg.Clock = limiter.SystemClock{}
	}
	c := &cache{store: cfg.Store, clock: cfg.Clock, observer: cfg.Observer, perShard: cfg.Size / Shards}
	for i := range c.shards {
		c.shards[i].m = make(map[key]entry)
	}
	c.scratch.New = func() any { return new(scratch) }
	return c, nil
}

// cacheable reports whether a request's policy can have its denials cached:
// those of an algorithm whose denials hold, and a penalty box's blocks. A
// reserving policy's never are: a settle gives back what a reservation
// did not use, so its denials do not hold, and every settle must reach
// the store.
func cacheable(p *limiter.Policy) bool {
	return p != nil && !p.Reserve().On() && (p.Certainty() == limiter.Certain && p.DenialsHold() || p.Penalty().On())
}

// holds reports whether denial d of a request on p may be repeated until
// its retry time: a block always (nothing but time ends it, whatever the
// cost), another denial when p's denials hold and p has no penalty box —
// there a request the store would deny is an offence the store must record
// (the offence's own denial lasts beyond its block when the window's wait
// is longer, and the next denial after the block doubles it).
func holds(p *limiter.Policy, d *limiter.Decision) bool {
	if p.Penalty().On() {
		return d.Blocked
	}
	return p.Certainty() == limiter.Certain && p.DenialsHold()
}

// recordsOffences reports whether a request of batch that the cache did not
// answer (hit false) could record a penalty-box offence: it must then reach
// the store as it is, not as a check.
func recordsOffences(batch []limiter.Request, hit []bool) bool {
	for i := range batch {
		if r := &batch[i]; !hit[i] && r.Policy != nil && r.Policy.Penalty().On() && r.EffectiveRole().RecordsOffence() {
			return true
		}
	}
	return false
}

func keyOf(r *limiter.Request) key {
	p := r.Policy
	amt, per := p.Refill()
	return key{
		subject: r.Subject, tag: r.Tag, policyID: p.ID(), revision: p.Revision(),
		algorithm: p.Algorithm(), limit: p.Limit(), windowMs: p.WindowMillis(),
		refillAmt: amt, refillMs: per, penalty: p.Penalty(),
	}
}

func (c *cache) shardOf(k *key) *shard { return c.subjectShard(&k.subject) }

// subjectShard is the shard of every key of subject.
func (c *cache) subjectShard(subject *limiter.SubjectDigest) *shard {
	return &c.shards[binary.LittleEndian.Uint64(subject[8:16])%Shards]
}

// lookup returns the cached denial answering r at now, if any. A charge
// (limiter.Request.Charges) is never answered from the cache: the store
// must record it.
func (c *cache) lookup(r *limiter.Request, now time.Time) (limiter.Decision, bool) {
	if !cacheable(r.Policy) || r.Charges() || r.Validate() != nil {
		return limiter.Decision{}, false
	}
	if c.subjectShard(&r.Subject).held.Load() == 0 {
		return limiter.Decision{}, false
	}
	k := keyOf(r)
	sh := c.shardOf(&k)
	sh.mu.Lock()
	e, ok := sh.m[k]
	if ok && !now.Before(e.until) {
		delete(sh.m, k)
		sh.changed()
		ok = false
	}
	sh.mu.Unlock()
	if !ok || !e.answers(r.Cost) {
		return limiter.Decision{}, false
	}
	d := e.decision
	d.Source = limiter.SourceLocalCache
	d.Consumed = false
	// The store's waits, counted down; never less than the resolution.
	d.RetryAfter = max(e.retryAt.Sub(now), resolution).Round(resolution)
	if d.Blocked {
		d.BlockedFor = max(e.until.Sub(now), resolution).Round(resolution)
	}
	return d, true
}

// record caches the denials among out, measured from t0 (read before the
// store was asked).
func (c *cache) record(batch []limiter.Request, out []limiter.Outcome, t0 time.Time) {
	var pending map[key]int // built once, when a denial needs it
	built := false
	for i := range batch {
		r, o := &batch[i], &out[i]
		if o.Kind != limiter.Evaluated || o.Decision.Allowed || o.Decision.Certainty != limiter.Certain ||
			o.Decision.Source == limiter.SourceLocalCache || o.Decision.Source == limiter.SourceFallback ||
			o.Decision.RetryAfter <= resolution || o.Decision.Blocked && o.Decision.BlockedFor <= resolution ||
			!cacheable(r.Policy) || !holds(r.Policy, &o.Decision) {
			continue
		}
		k := keyOf(r)
		if !built {
			pending, built = tentative(batch, out), true
		}
		if j, ok := pending[k]; ok && j < i {
			continue
		}
		e := entry{until: t0.Add(o.Decision.RetryAfter - resolution), retryAt: t0.Add(o.Decision.RetryAfter - resolution),
			cost: r.Cost, decision: o.Decision}
		if o.Decision.Blocked {
			// Only until the block ends: a request the limit denies
			// after it is an offence the store must record.
			e.until = t0.Add(o.Decision.BlockedFor - resolution)
		}
		sh := c.shardOf(&k)
		sh.mu.Lock()
		if _, ok := sh.m[k]; !ok && len(sh.m) >= c.perShard {
			sh.evict(t0)
		}
		sh.m[k] = e
		sh.changed()
		sh.mu.Unlock()
	}
}

// tentative maps each state on which a request of batch was allowed
// without its cost being taken to the first such request's index: the store
// counted that cost in its answers to the later requests of the batch on the
// state, so a later denial there holds for its batch, not for the state as
// stored. One pass over the batch, so a wide batch costs linear time; nil
// (no allocation) when there is none, as in every batch that committed.
func tentative(batch []limiter.Request, out []limiter.Outcome) map[key]int {
	var m map[key]int
	for j := range batch {
		d := &out[j].Decision
		if out[j].Kind != limiter.Evaluated || !d.Allowed || d.Consumed || batch[j].Policy == nil {
			continue
		}
		k := keyOf(&batch[j])
		if _, ok := m[k]; ok {
			continue
		}
		if m == nil {
			m = map[key]int{}
		}
		m[k] = j
	}
	return m
}

// evict drops an expired entry if one of the first few is, else an arbitrary
// one. Called with sh.mu held.
func (sh *shard) evict(now time.Time) {
	var victim key
	n := 0
	for k, e := range sh.m {
		if !now.Before(e.until) {
			delete(sh.m, k)
			return
		}
		if n == 0 {
			victim = k
		}
		if n++; n >= evictScan {
			break
		}
	}
	delete(sh.m, victim)
}

// Len returns the number of cached denials (expired ones included until
// they are looked up or evicted).
func (c *cache) Len() int {
	n := 0
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// Evaluate implements limiter.Store (see the package doc for batches).
func (c *cache) Evaluate(ctx context.Context, batch []limiter.Request, out []limiter.Outcome) {
	if len(out) < len(batch) {
		// The store behind panics with its own message; keep the contract.
		c.store.Evaluate(ctx, batch, out)
		return
	}
	out = out[:len(batch)]
	t0 := c.clock.Now()
	sc := c.scratch.Get().(*scratch)
	defer c.putScratch(sc)
	sc.hit = append(sc.hit[:0], make([]bool, len(batch))...)
	hits := 0
	for i := range batch {
		if d, ok := c.lookup(&batch[i], t0); ok {
			out[i] = limiter.EvaluatedOutcome(d)
			sc.hit[i] = true
			hits++
		} else {
			out[i] = limiter.Outcome{} // undecided, see limiter.Pending
		}
	}
	if hits == 0 || !limiter.CheckOnly(batch, out) || recordsOffences(batch, sc.hit) {
		// No cached denial, or they cannot block the batch (shadow,
		// check, or quota limits with other quota limits), or a limit
		// with a penalty box must be evaluated as it is (its denial is an
		// offence to record; the store denies the cached limits again):
		// the store decides it all.
		c.store.Evaluate(ctx, batch, out)
		c.record(batch, out, t0)
		return
	}
	// The batch cannot commit whatever the rest answers: nothing is
	// consumed. Answer the cached limits here and check the others.
	if c.observer != nil {
		c.observer.Hits(hits)
	}
	sc.pending.Evaluate(ctx, batch, out, c.store.Evaluate)
	c.record(batch, out, t0)
}

func (c *cache) putScratch(sc *scratch) {
	sc.pending.Release() // drop policy references
	c.scratch.Put(sc)
}
