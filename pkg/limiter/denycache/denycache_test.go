package denycache

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

type hitCounter struct{ n atomic.Int64 }

func (h *hitCounter) Hits(n int) { h.n.Add(int64(n)) }

// policy is a limit of alg: limit units a window (a bucket of limit
// refilled by limit every window).
func policy(t testing.TB, id string, alg limiter.Algorithm, limit int64, window time.Duration) *limiter.Policy {
	t.Helper()
	return limitertest.Policy(t, specOf(id, alg, limit, window))
}

// boxed is policy "pen" with a penalty box of block.
func boxed(t testing.TB, alg limiter.Algorithm, limit int64, window, block time.Duration) *limiter.Policy {
	t.Helper()
	spec := specOf("pen", alg, limit, window)
	spec.Penalty = limiter.Penalty{Duration: block}
	return limitertest.Policy(t, spec)
}

func specOf(id string, alg limiter.Algorithm, limit int64, window time.Duration) limiter.PolicySpec {
	spec := limiter.PolicySpec{ID: id, Algorithm: alg}
	switch alg {
	case limiter.FixedWindow:
		spec.Params = limiter.FixedWindowParams{Limit: limit, Window: window}
	case limiter.SlidingWindow:
		spec.Params = limiter.SlidingWindowParams{Limit: limit, Window: window}
	case limiter.TokenBucket:
		spec.Params = limiter.TokenBucketParams{Capacity: limit, RefillAmount: limit, RefillPeriod: window}
	case limiter.GCRA:
		spec.Params = limiter.GCRAParams{Burst: limit, Limit: limit, Period: window}
	case limiter.SlidingLog:
		spec.Params = limiter.SlidingLogParams{Limit: limit, Window: window}
	}
	return spec
}

func subject(s string) limiter.SubjectDigest {
	var d limiter.SubjectDigest
	copy(d[:], s)
	d[31] = byte(len(s))
	return d
}

type env struct {
	clock *limitertest.Clock
	back  *limitertest.Double // the store behind the cache
	hits  *hitCounter
	cache *cache
}

func newEnv(t testing.TB, size int) *env {
	t.Helper()
	// An instant 100 ms into a second, so that a 1 s window has 900 ms left.
	clk := limitertest.NewClock(time.UnixMilli(1_700_000_000_100))
	e := &env{clock: clk, back: limitertest.NewDouble(t, newMemory(t, clk), nil), hits: &hitCounter{}}
	var err error
	e.cache, err = New(Config{Store: e.back, Size: size, Clock: clk, Observer: e.hits})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// storeCalls and storeReqs count the batches and requests that reached the
// store behind the cache; storeModes are the roles of the last batch.
func (e *env) storeCalls() int64 { b, _ := e.back.Counts(); return int64(b) }
func (e *env) storeReqs() int64  { _, r := e.back.Counts(); return int64(r) }
func (e *env) storeModes() []limiter.Role {
	last, _ := e.back.Last()
	roles := make([]limiter.Role, len(last))
	for i := range last {
		roles[i] = last[i].Role
	}
	return roles
}

func (e *env) eval(batch ...limiter.Request) []limiter.Outcome {
	out := make([]limiter.Outcome, len(batch))
	e.cache.Evaluate(context.Background(), batch, out)
	return out
}

// step is one request through the cache at the current fake time.
type step struct {
	advance   time.Duration
	cost      int64
	allowed   bool
	source    limiter.Source
	storeSeen bool // the request reached the store
}

// viaStore is a request of cost that reaches the store (the memory store of
// newEnv, so the source is SourceMemory), which answers allowed.
func viaStore(cost int64, allowed bool) step {
	return step{cost: cost, allowed: allowed, source: limiter.SourceMemory, storeSeen: true}
}

// viaCache is a request of cost that the cache denies without asking the
// store.
func viaCache(cost int64) step {
	return step{cost: cost, allowed: false, source: limiter.SourceLocalCache}
}

// after is s sent once the fake clock has advanced by d.
func after(d time.Duration, s step) step {
	s.advance = d
	return s
}

func run(t *testing.T, e *env, p *limiter.Policy, subj limiter.SubjectDigest, steps []step) {
	t.Helper()
	for i, s := range steps {
		e.clock.Advance(s.advance)
		before := e.storeReqs()
		out := e.eval(limiter.Request{Policy: p, Subject: subj, Cost: s.cost})
		o := out[0]
		if o.Kind != limiter.Evaluated {
			t.Fatalf("step %d: outcome %v (%v)", i, o.Kind, o.Err)
		}
		if o.Decision.Allowed != s.allowed || o.Decision.Source != s.source {
			t.Fatalf("step %d: allowed %v source %v, want %v %v", i, o.Decision.Allowed, o.Decision.Source, s.allowed, s.source)
		}
		if seen := e.storeReqs() > before; seen != s.storeSeen {
			t.Fatalf("step %d: store asked %v, want %v", i, seen, s.storeSeen)
		}
		if !o.Decision.Allowed && o.Decision.RetryAfter <= 0 {
			t.Fatalf("step %d: denial without a retry", i)
		}
	}
}

// TestDenialCached: a denial is repeated locally, for its cost and more,
// until a smaller cost could be admitted; then the store answers again. The
// cache counts a hit for every request it answers.
func TestDenialCached(t *testing.T) {
	cases := []struct {
		name  string
		alg   limiter.Algorithm
		limit int64
		steps []step
	}{
		{"fixed window until the window's end", limiter.FixedWindow, 2, []step{
			viaStore(1, true),
			viaStore(1, true),
			viaStore(1, false), // cached from here
			viaCache(1),
			after(500*time.Millisecond, viaCache(2)),      // larger cost: still denied
			after(398*time.Millisecond, viaCache(1)),      // 898 ms: before the end less 1 ms
			after(1*time.Millisecond, viaStore(1, false)), // 899 ms: the store answers (re-cached)
			after(1*time.Millisecond, viaStore(1, true)),  // the new window
		}},
		// 10 tokens, refilled 10 per second: one token per 100 ms.
		{"token bucket: a smaller cost asks the store", limiter.TokenBucket, 10, []step{
			viaStore(8, true),
			viaStore(5, false), // 2 left: 300 ms to 5
			viaCache(5),
			viaStore(2, true), // smaller cost: not covered
			after(299*time.Millisecond, viaStore(5, false)),
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, 0)
			run(t, e, policy(t, "p", c.alg, c.limit, time.Second), subject("a"), c.steps)
			var cached int64
			for _, s := range c.steps {
				if !s.storeSeen {
					cached++
				}
			}
			if got := e.hits.n.Load(); got != cached {
				t.Fatalf("hits %d, want %d", got, cached)
			}
		})
	}
}

func TestNeverCached(t *testing.T) {
	e := newEnv(t, 0)
	sw := policy(t, "sw", limiter.SlidingWindow, 1, time.Second)
	run(t, e, sw, subject("c"), []step{
		viaStore(1, true),
		viaStore(1, false),
		viaStore(1, false), // approximate: never cached
	})
	// A denial for one limit says nothing about another limit, revision or
	// subject.
	fw := policy(t, "fw", limiter.FixedWindow, 1, time.Second)
	run(t, e, fw, subject("d"), []step{
		viaStore(1, true),
		viaStore(1, false),
		viaCache(1),
	})
	raised := policy(t, "fw", limiter.FixedWindow, 5, time.Second)
	run(t, e, raised, subject("d"), []step{viaStore(1, true)})
	spec := fw.Spec()
	spec.Revision = 2
	rev := limitertest.Policy(t, spec)
	run(t, e, rev, subject("d"), []step{viaStore(1, true)})
	run(t, e, fw, subject("e"), []step{viaStore(1, true)})
}

func TestFailuresNotCached(t *testing.T) {
	// Denials through a failure outcome must never be cached.
	fs := limitertest.NewDouble(t, nil, nil)
	fs.Set(limitertest.Fault{Kind: limiter.Unavailable, RetryAfter: time.Second})
	c, err := New(Config{Store: fs})
	if err != nil {
		t.Fatal(err)
	}
	p := policy(t, "fw", limiter.FixedWindow, 1, time.Minute)
	out := make([]limiter.Outcome, 1)
	for range 3 {
		c.Evaluate(context.Background(), []limiter.Request{{Policy: p, Subject: subject("f"), Cost: 1}}, out)
	}
	if calls, _ := fs.Counts(); calls != 3 || c.Len() != 0 {
		t.Fatalf("store calls %d, cached %d: failures must reach the store every time", calls, c.Len())
	}
}

// TestBatches: the all-or-nothing rule with a cached denial in the batch.
func TestBatches(t *testing.T) {
	e := newEnv(t, 0)
	hot := policy(t, "hot", limiter.FixedWindow, 1, time.Minute)
	other := policy(t, "other", limiter.FixedWindow, 100, time.Minute)
	hs := subject("hot")
	e.eval(limiter.Request{Policy: hot, Subject: hs, Cost: 1})
	e.eval(limiter.Request{Policy: hot, Subject: hs, Cost: 1}) // denied: cached

	// An ordinary cached denial blocks the batch: the other limit is only
	// checked (nothing consumed) and reported before its cost.
	out := e.eval(limiter.Request{Policy: hot, Subject: hs, Cost: 1}, limiter.Request{Policy: other, Subject: subject("o"), Cost: 1})
	if out[0].Decision.Source != limiter.SourceLocalCache || out[0].Decision.Allowed {
		t.Fatalf("hot limit: %+v", out[0].Decision)
	}
	if d := out[1].Decision; !d.Allowed || d.Consumed || d.Remaining != 100 {
		t.Fatalf("other limit: %+v, want allowed, not consumed, 100 left", d)
	}
	if e.storeModes()[0] != limiter.RoleCheck || len(e.storeModes()) != 1 {
		t.Fatalf("the store saw modes %v, want [check]", e.storeModes())
	}

	// Every limit cached: the store is not asked.
	before := e.storeCalls()
	e.eval(limiter.Request{Policy: hot, Subject: hs, Cost: 1}, limiter.Request{Policy: hot, Subject: hs, Cost: 1, Role: limiter.RoleQuota})
	if e.storeCalls() != before {
		t.Fatal("a fully cached batch reached the store")
	}

	// A shadow denial does not block: the whole batch goes to the store,
	// which consumes the other limit.
	out = e.eval(limiter.Request{Policy: hot, Subject: hs, Cost: 1, Role: limiter.RoleShadow}, limiter.Request{Policy: other, Subject: subject("o"), Cost: 1})
	if d := out[1].Decision; !d.Allowed || !d.Consumed || d.Remaining != 99 {
		t.Fatalf("other limit beside a shadow denial: %+v, want consumed, 99 left", d)
	}
	if e.storeModes()[0] != limiter.RoleShadow || e.storeModes()[1] != limiter.RoleOrdinary {
		t.Fatalf("the store saw modes %v", e.storeModes())
	}

	// A quota denial with another quota limit that allows does not block.
	out = e.eval(limiter.Request{Policy: hot, Subject: hs, Cost: 1, Role: limiter.RoleQuota}, limiter.Request{Policy: other, Subject: subject("o"), Cost: 1, Role: limiter.RoleQuota})
	if d := out[1].Decision; !d.Allowed || !d.Consumed || d.Remaining != 98 {
		t.Fatalf("quota batch: %+v, want consumed, 98 left", d)
	}
}

func TestBounded(t *testing.T) {
	e := newEnv(t, Shards)
	p := policy(t, "fw", limiter.FixedWindow, 1, time.Minute)
	for i := range 10 * Shards {
		s := subject(fmt.Sprintf("s-%d", i))
		e.eval(limiter.Request{Policy: p, Subject: s, Cost: 1})
		e.eval(limiter.Request{Policy: p, Subject: s, Cost: 1})
	}
	if n := e.cache.Len(); n > Shards {
		t.Fatalf("%d entries, bound %d", n, Shards)
	}
}

func TestConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"no store", Config{}},
		{"too small", Config{Store: limitertest.NewDouble(t, nil, nil), Size: Shards - 1}},
	} {
		if _, err := New(tc.cfg); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
}

// TestExactUnderContention: many goroutines on one subject never get more
// than the limit admitted with the cache in front (run with -race), on
// every algorithm whose denials the cache holds (--local-cache lists them).
func TestExactUnderContention(t *testing.T) {
	for _, alg := range []limiter.Algorithm{limiter.FixedWindow, limiter.TokenBucket, limiter.GCRA, limiter.SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) {
			e := newEnv(t, 0)
			const limit, workers, calls = 50, 16, 200
			p := policy(t, "hot", alg, limit, time.Hour)
			s := subject("hammered")
			allowed, _ := hammer(t, e.cache, p, s, workers, calls)
			if allowed != limit {
				t.Fatalf("admitted %d, limit %d", allowed, limit)
			}
			if hits := e.hits.n.Load(); hits == 0 || hits+e.storeReqs() != workers*calls {
				t.Fatalf("hits %d + store requests %d != %d", hits, e.storeReqs(), workers*calls)
			}
		})
	}
}

// hammer sends calls one-request batches for subject s under p from each of
// workers goroutines through c (limitertest.Hammer) and counts the admitted
// and denied ones; any other outcome fails the test.
func hammer(t *testing.T, c *cache, p *limiter.Policy, s limiter.SubjectDigest, workers, calls int) (allowed, denied int64) {
	t.Helper()
	return limitertest.Hammer(t, c, workers, calls, func(int, int) []limiter.Request {
		return []limiter.Request{{Policy: p, Subject: s, Cost: 1}}
	}, nil)
}

// TestProbes: a probe (limiter.RoleProbe) is answered from a cached denial
// and then blocks its batch as an ordinary denial does; a probe's own
// denial is cached like any other; a probe that allows consumes nothing
// and caches nothing.
func TestProbes(t *testing.T) {
	e := newEnv(t, 0)
	hot := policy(t, "hot", limiter.FixedWindow, 2, time.Minute)
	other := policy(t, "other", limiter.FixedWindow, 100, time.Minute)
	hs, osub := subject("hot"), subject("o")
	probe := limiter.Request{Policy: hot, Subject: hs, Cost: 1, Role: limiter.RoleProbe}

	// Below the limit: allowed, nothing taken, nothing cached.
	out := e.eval(probe, limiter.Request{Policy: other, Subject: osub, Cost: 1})
	if d := out[0].Decision; !d.Allowed || d.Consumed || d.Remaining != 2 {
		t.Fatalf("probe below the limit: %+v", d)
	}
	if d := out[1].Decision; !d.Consumed || d.Remaining != 99 {
		t.Fatalf("other limit beside an allowing probe: %+v", d)
	}
	if e.cache.Len() != 0 {
		t.Fatalf("an allowing probe cached %d entries", e.cache.Len())
	}

	// Fill the limit; the probe's denial comes from the store and is cached.
	e.eval(limiter.Request{Policy: hot, Subject: hs, Cost: 2})
	out = e.eval(probe)
	if d := out[0].Decision; d.Allowed || d.Source != limiter.SourceMemory {
		t.Fatalf("probe at a full limit: %+v, want a store denial", d)
	}
	if e.cache.Len() != 1 {
		t.Fatalf("cached %d, want the probe's denial", e.cache.Len())
	}

	// Next: the probe is answered from the cache and blocks its batch; the
	// other limit is only checked.
	calls := e.storeCalls()
	out = e.eval(probe, limiter.Request{Policy: other, Subject: osub, Cost: 1})
	if d := out[0].Decision; d.Allowed || d.Source != limiter.SourceLocalCache || d.Consumed {
		t.Fatalf("probe from the cache: %+v", d)
	}
	if d := out[1].Decision; !d.Allowed || d.Consumed || d.Remaining != 99 {
		t.Fatalf("other limit beside a cached probe denial: %+v, want checked, 99 left", d)
	}
	if e.storeCalls() != calls+1 || len(e.storeModes()) != 1 || e.storeModes()[0] != limiter.RoleCheck {
		t.Fatalf("the store saw modes %v", e.storeModes())
	}
	// An ordinary request of the same state is answered from the
	// probe's denial too (a cost of 1 or more is denied until then).
	if out := e.eval(limiter.Request{Policy: hot, Subject: hs, Cost: 1}); out[0].Decision.Source != limiter.SourceLocalCache {
		t.Fatalf("ordinary request after a cached probe denial: %+v", out[0].Decision)
	}
}
