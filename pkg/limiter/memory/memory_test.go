package memory_test

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/memory"
)

const t0 int64 = 1_700_000_000_000

// newClock returns a test clock reading ms milliseconds after the epoch.
func newClock(ms int64) *limitertest.Clock { return limitertest.NewClock(time.UnixMilli(ms)) }
func subject(i uint64) limiter.SubjectDigest {
	var d limiter.SubjectDigest
	binary.LittleEndian.PutUint64(d[:], i*0x9E3779B97F4A7C15) // spread over shards
	binary.LittleEndian.PutUint64(d[8:], i)
	return d
}

// counter is an Observer.
type counter struct {
	refused, expired atomic.Int64
	madeRefused      atomic.Int64 // of policies made at request time
	mu               sync.Mutex
	overflow         map[string]int
}

func (c *counter) Refused(p *limiter.Policy) {
	c.refused.Add(1)
	if p.Group() != "" {
		c.madeRefused.Add(1)
	}
}
func (c *counter) Expired(n int) { c.expired.Add(int64(n)) }
func (c *counter) Overflow(p string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.overflow == nil {
		c.overflow = make(map[string]int)
	}
	c.overflow[p]++
}

func (c *counter) overflows(p string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.overflow[p]
}

func fixedPolicy(t testing.TB, limit int64, window time.Duration) *limiter.Policy {
	return limitertest.Policy(t, limiter.PolicySpec{Algorithm: limiter.FixedWindow, Params: limiter.FixedWindowParams{Limit: limit, Window: window}})
}

func newStore(t testing.TB, cfg memory.Config) *memory.Store {
	t.Helper()
	s, err := memory.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func eval1(s *memory.Store, ctx context.Context, r limiter.Request) limiter.Outcome {
	out := make([]limiter.Outcome, 1)
	s.Evaluate(ctx, []limiter.Request{r}, out)
	return out[0]
}

func TestNewConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  memory.Config
		ok   bool
	}{
		{"defaults", memory.Config{}, true},
		{"one shard", memory.Config{Shards: 1, MaxEntries: 1}, true},
		{"fewer entries than shards", memory.Config{Shards: 256, MaxEntries: 3}, true},
		{"negative max entries", memory.Config{MaxEntries: -1}, false},
		{"shards not a power of two", memory.Config{Shards: 3}, false},
		{"negative shards", memory.Config{Shards: -4}, false},
		{"more than 2^31 entries per shard", memory.Config{Shards: 1, MaxEntries: 1 << 31}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := memory.New(tc.cfg)
			if tc.ok != (err == nil) || err != nil && !errors.Is(err, memory.ErrInvalidConfig) {
				t.Fatalf("New(%+v) = %v", tc.cfg, err)
			}
		})
	}
}

func TestEvaluateBatch(t *testing.T) {
	clock := newClock(t0 + 250)
	s := newStore(t, memory.Config{Clock: clock})
	fw := fixedPolicy(t, 2, time.Second)
	sw := limitertest.Policy(t, limiter.PolicySpec{ID: "sliding", Algorithm: limiter.SlidingWindow, Params: limiter.SlidingWindowParams{Limit: 5, Window: time.Second}})
	batch := []limiter.Request{
		{Policy: fw, Subject: subject(1), Cost: 1},
		{Policy: fw, Subject: subject(1), Cost: 1},
		{Policy: fw, Subject: subject(1), Cost: 1}, // checked in order: sees the first two, denied
		{Policy: sw, Subject: subject(1), Cost: 5}, // same subject, other policy: its own state
		{Policy: fw, Subject: subject(2), Cost: 3}, // above max cost
		{Policy: nil, Subject: subject(2), Cost: 1},
	}
	out := make([]limiter.Outcome, len(batch))
	s.Evaluate(context.Background(), batch, out)
	// The denial (and the invalid requests) block the batch: nothing is
	// consumed, and the allowed requests report their state before their
	// own cost (the second one after the first's tentative cost).
	want := []struct {
		kind      limiter.OutcomeKind
		allowed   bool
		remaining int64
		category  string
	}{
		{limiter.Evaluated, true, 2, ""},
		{limiter.Evaluated, true, 1, ""},
		{limiter.Evaluated, false, 0, ""},
		{limiter.Evaluated, true, 5, ""},
		{limiter.Unavailable, false, 0, limiter.CategoryInvalidRequest},
		{limiter.Unavailable, false, 0, limiter.CategoryInvalidRequest},
	}
	for i, w := range want {
		o := out[i]
		if o.Kind != w.kind || o.Category != w.category || o.Decision.Allowed != w.allowed || o.Decision.Remaining != w.remaining || o.Decision.Consumed {
			t.Fatalf("request %d: got %+v, want %+v", i, o, w)
		}
	}
	d := out[2].Decision
	if d.Source != limiter.SourceMemory || d.Certainty != limiter.Certain || d.RetryAfter != 750*time.Millisecond ||
		!d.ResetAt.Equal(time.UnixMilli(t0+1000)) || d.PolicyID != "test" || d.PolicyRevision != 1 || d.Limit != 2 {
		t.Fatalf("denied decision: %+v", d)
	}
	if c := out[3].Decision.Certainty; c != limiter.Approximate {
		t.Fatalf("sliding certainty = %v", c)
	}
	if r := out[3].Decision.ResetAt; !r.Equal(time.UnixMilli(t0 + 250)) {
		t.Fatalf("uncommitted sliding reset %v, want now (nothing counted)", r)
	}
	var fe *limiter.FieldError
	if !errors.As(out[4].Err, &fe) || fe.Field != "cost" {
		t.Fatalf("invalid request error: %v", out[4].Err)
	}
	if n := s.Len(); n != 0 {
		t.Fatalf("Len() = %d, want 0 (a batch that does not commit stores nothing)", n)
	}
	// Without the blockers the batch commits: every allowed request consumes.
	s.Evaluate(context.Background(), batch[:2], out[:2])
	for i := range 2 {
		if d := out[i].Decision; !d.Allowed || !d.Consumed || d.Remaining != int64(1-i) {
			t.Fatalf("committed request %d: %+v", i, d)
		}
	}
	if n := s.Len(); n != 1 {
		t.Fatalf("Len() = %d, want 1", n)
	}
}

// TestBatchExactness: 32 goroutines on one store, requests with a tight and
// a loose limit: the loose limit consumes exactly once per admitted request.
func TestBatchExactness(t *testing.T) {
	s := newStore(t, memory.Config{})
	limitertest.Exactness(t, []limiter.Store{s}, limitertest.Config{Prefix: "mem"}, 32, 50, 300)
}

// TestBatchLockOrder: batches over many shards in every order, from many
// goroutines, finish (shards are locked in ascending order, each once) and
// stay exact.
func TestBatchLockOrder(t *testing.T) {
	s := newStore(t, memory.Config{Shards: 8})
	p := fixedPolicy(t, 1_000_000, time.Hour)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := make([]limiter.Outcome, 6)
			batch := make([]limiter.Request, 6)
			for i := range 200 {
				for j := range batch {
					batch[j] = limiter.Request{Policy: p, Subject: subject(uint64((g*7 + i*3 + j*5) % 12)), Cost: 1}
				}
				s.Evaluate(context.Background(), batch, out)
				for j := range out {
					if !out[j].Decision.Consumed {
						t.Errorf("not consumed: %+v", out[j])
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	used := int64(0)
	out := make([]limiter.Outcome, 1)
	for i := range uint64(12) {
		s.Evaluate(context.Background(), []limiter.Request{{Policy: p, Subject: subject(i), Cost: 1, Role: limiter.RoleCheck}}, out)
		used += 1_000_000 - out[0].Decision.Remaining
	}
	if used != 16*200*6 {
		t.Fatalf("consumed %d, want %d", used, 16*200*6)
	}
}

// TestBatchCapacityRefusalBlocks: a new subject refused for capacity (no
// room and no sketch left) is a failure found before the commit, so it
// blocks the batch.
func TestBatchCapacityRefusalBlocks(t *testing.T) {
	s := newStore(t, memory.Config{Clock: newClock(t0), MaxEntries: 1, Shards: 1, MaxSketches: 1})
	p := fixedPolicy(t, 5, time.Minute)
	q := limitertest.Policy(t, limiter.PolicySpec{ID: "q", Algorithm: limiter.FixedWindow, Params: limiter.FixedWindowParams{Limit: 5, Window: time.Minute}})
	out := make([]limiter.Outcome, 2)
	s.Evaluate(context.Background(), []limiter.Request{{Policy: p, Subject: subject(1), Cost: 1}}, out[:1])
	s.Evaluate(context.Background(), []limiter.Request{{Policy: q, Subject: subject(3), Cost: 1}}, out[:1]) // q takes the only sketch
	if out[0].Decision.Source != limiter.SourceMemoryOverflow {
		t.Fatalf("q without room: %+v", out[0])
	}
	s.Evaluate(context.Background(), []limiter.Request{{Policy: p, Subject: subject(1), Cost: 1}, {Policy: p, Subject: subject(2), Cost: 1}}, out)
	if out[0].Decision.Consumed || out[0].Decision.Remaining != 4 || out[1].Category != limiter.CategoryCapacity {
		t.Fatalf("outcomes %+v", out)
	}
}

func TestEvaluateShortOutPanics(t *testing.T) {
	s := newStore(t, memory.Config{})
	defer func() {
		if recover() == nil {
			t.Fatal("no panic for a short out slice")
		}
	}()
	s.Evaluate(context.Background(), make([]limiter.Request, 2), make([]limiter.Outcome, 1))
}

func TestDeadline(t *testing.T) {
	clock := newClock(t0)
	s := newStore(t, memory.Config{Clock: clock})
	p := fixedPolicy(t, 5, time.Second)
	r := limiter.Request{Policy: p, Subject: subject(7), Cost: 1}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	for _, c := range []struct {
		ctx  context.Context
		want error
	}{{ctx, context.Canceled}, {expired, context.DeadlineExceeded}} {
		o := eval1(s, c.ctx, r)
		if o.Kind != limiter.Unavailable || o.Category != limiter.CategoryDeadline || !errors.Is(o.Err, c.want) {
			t.Fatalf("done context: %+v", o)
		}
	}
	if n := s.Len(); n != 0 {
		t.Fatalf("a done context stored state: Len() = %d", n)
	}
	if o := eval1(s, context.Background(), r); !o.Decision.Allowed || o.Decision.Remaining != 4 {
		t.Fatalf("after the refusals: %+v (a refusal must consume nothing)", o)
	}
}

func TestClockUnsafe(t *testing.T) {
	clock := newClock(t0 + 5000)
	s := newStore(t, memory.Config{Clock: clock})
	p := fixedPolicy(t, 5, time.Minute)
	r := limiter.Request{Policy: p, Subject: subject(1), Cost: 1}
	eval1(s, context.Background(), r)
	clock.Set(time.UnixMilli(t0 + 5000 - 2001))
	if o := eval1(s, context.Background(), r); o.Kind != limiter.Unavailable || o.Category != limiter.CategoryClockUnsafe ||
		!errors.Is(o.Err, limiter.ErrClockUnsafe) || o.RetryAfter <= 0 {
		t.Fatalf("large regression: %+v", o)
	}
	clock.Set(time.UnixMilli(t0 + 5000 - 2000))
	if o := eval1(s, context.Background(), r); !o.Decision.Allowed || o.Decision.Remaining != 3 {
		t.Fatalf("clamped regression: %+v", o)
	}
	clock.Set(time.UnixMilli(-1))
	if o := eval1(s, context.Background(), r); o.Kind != limiter.Unavailable || o.Category != limiter.CategoryClockUnsafe {
		t.Fatalf("clock before the epoch: %+v", o)
	}
}

func TestExpiry(t *testing.T) {
	clock := newClock(t0)
	obs := &counter{}
	s := newStore(t, memory.Config{Clock: clock, Observer: obs})
	p := fixedPolicy(t, 5, time.Second) // TTL: window end + 1s grace -> expires at t0+2000
	for i := range uint64(10) {
		eval1(s, context.Background(), limiter.Request{Policy: p, Subject: subject(i), Cost: 1})
	}
	clock.Set(time.UnixMilli(t0 + 2000))
	if n := s.SweepExpired(); n != 0 || s.Len() != 10 {
		t.Fatalf("sweep at the expiry millisecond dropped %d, Len %d", n, s.Len())
	}
	// Lazy expiry: an expired state reads as none.
	clock.Set(time.UnixMilli(t0 + 2001))
	o := eval1(s, context.Background(), limiter.Request{Policy: p, Subject: subject(0), Cost: 5})
	if !o.Decision.Allowed || obs.expired.Load() != 1 {
		t.Fatalf("lazy expiry: %+v, expired %d", o, obs.expired.Load())
	}
	if n := s.Sweep(clock.Now()); n != 9 || s.Len() != 1 || obs.expired.Load() != 10 {
		t.Fatalf("sweep dropped %d, Len %d, observer %d; want 9, 1, 10", n, s.Len(), obs.expired.Load())
	}
	// Token bucket: the state lives until the bucket is full again + grace.
	tb := limitertest.Policy(t, limiter.PolicySpec{ID: "tb", Algorithm: limiter.TokenBucket, CleanupGrace: 500 * time.Millisecond,
		Params: limiter.TokenBucketParams{Capacity: 10, RefillAmount: 1, RefillPeriod: time.Second}})
	clock.Set(time.UnixMilli(t0))
	eval1(s, context.Background(), limiter.Request{Policy: tb, Subject: subject(99), Cost: 4}) // full again at t0+4000
	clock.Set(time.UnixMilli(t0 + 4500))
	if n := s.SweepExpired(); n != 1 { // subject(0)'s fixed-window state from t0+2001 expires at t0+4000
		t.Fatalf("sweep at t0+4500 dropped %d, want 1", n)
	}
	clock.Set(time.UnixMilli(t0 + 4501))
	if n := s.SweepExpired(); n != 1 || s.Len() != 0 {
		t.Fatalf("sweep at t0+4501 dropped %d, Len %d; want the bucket gone", n, s.Len())
	}
}

// TestCapacityBound: one policy holds at most half of a shard (it may take
// an entry while it holds fewer than are free); its further new subjects
// are limited by its overflow sketch, known subjects stay exact, and
// expired entries make room again.
func TestCapacityBound(t *testing.T) {
	clock := newClock(t0)
	obs := &counter{}
	s := newStore(t, memory.Config{Clock: clock, MaxEntries: 4, Shards: 1, Observer: obs})
	p := fixedPolicy(t, 3, time.Second)
	ctx := context.Background()
	for i := range uint64(2) {
		if o := eval1(s, ctx, limiter.Request{Policy: p, Subject: subject(i), Cost: 1}); !o.Decision.Allowed || o.Decision.Source != limiter.SourceMemory {
			t.Fatalf("subject %d: %+v", i, o)
		}
	}
	o := eval1(s, ctx, limiter.Request{Policy: p, Subject: subject(2), Cost: 1})
	if o.Kind != limiter.Evaluated || !o.Decision.Allowed || o.Decision.Source != limiter.SourceMemoryOverflow || obs.overflows(p.ID()) != 1 {
		t.Fatalf("new subject beyond the policy's share: %+v, overflow %d", o, obs.overflows(p.ID()))
	}
	// Known subjects keep exact counters.
	for i := range 3 {
		o := eval1(s, ctx, limiter.Request{Policy: p, Subject: subject(0), Cost: 1})
		if o.Decision.Allowed != (i < 2) || o.Decision.Source != limiter.SourceMemory {
			t.Fatalf("known subject, call %d: %+v", i, o)
		}
	}
	if s.Len() != 2 || obs.refused.Load() != 0 {
		t.Fatalf("Len %d refused %d", s.Len(), obs.refused.Load())
	}
	// Once entries expire, the shard makes room for a new subject.
	clock.Set(time.UnixMilli(t0 + 2001))
	if o := eval1(s, ctx, limiter.Request{Policy: p, Subject: subject(4), Cost: 1}); !o.Decision.Allowed || o.Decision.Source != limiter.SourceMemory {
		t.Fatalf("after expiry: %+v", o)
	}
	if s.Len() != 1 || obs.expired.Load() != 2 {
		t.Fatalf("Len %d expired %d; want 1, 2", s.Len(), obs.expired.Load())
	}
}

func TestCapacityBoundManyShards(t *testing.T) {
	clock := newClock(t0)
	obs := &counter{}
	const max, shards = 100, 8
	s := newStore(t, memory.Config{Clock: clock, MaxEntries: max, Shards: shards, Observer: obs})
	p := fixedPolicy(t, 3, time.Minute)
	for i := range uint64(1000) {
		o := eval1(s, context.Background(), limiter.Request{Policy: p, Subject: subject(i), Cost: 1})
		if o.Kind != limiter.Evaluated {
			t.Fatalf("subject %d: %+v", i, o)
		}
	}
	if n := s.Len(); n > max/2+shards || obs.overflows(p.ID()) != 1000-n || obs.refused.Load() != 0 {
		t.Fatalf("Len %d (half of %d at most), overflow %d, refused %d", n, max, obs.overflows(p.ID()), obs.refused.Load())
	}
}

// TestHammerFixedWindow: 64 goroutines on one subject, the clock standing
// still, admit exactly the limit.
func TestHammerFixedWindow(t *testing.T) {
	clock := newClock(t0 + 10)
	s := newStore(t, memory.Config{Clock: clock})
	const limit = 1000
	p := fixedPolicy(t, limit, time.Minute)
	admitted, _ := limitertest.Hammer(t, s, 64, 100, func(int, int) []limiter.Request {
		return []limiter.Request{{Policy: p, Subject: subject(1), Cost: 1}}
	}, nil)
	if admitted != limit {
		t.Fatalf("admitted %d in one window, want exactly %d", admitted, limit)
	}
}

// TestHammerTokenBucket: with the clock advancing, 64 goroutines never get
// more than capacity + refill over the elapsed time.
func TestHammerTokenBucket(t *testing.T) {
	clock := newClock(t0)
	s := newStore(t, memory.Config{Clock: clock})
	const capacity, amount, periodMs = 50, 3, 7
	p := limitertest.Policy(t, limiter.PolicySpec{Algorithm: limiter.TokenBucket,
		Params: limiter.TokenBucketParams{Capacity: capacity, RefillAmount: amount, RefillPeriod: periodMs * time.Millisecond}})
	var admitted atomic.Int64
	cost := func(g int) int64 { return int64(1 + g%3) }
	limitertest.Hammer(t, s, 64, 200, func(g, i int) []limiter.Request {
		if g == 0 && i%2 == 0 {
			clock.Advance(time.Millisecond)
		}
		return []limiter.Request{{Policy: p, Subject: subject(1), Cost: cost(g)}}
	}, func(g, _ int) { admitted.Add(cost(g)) })
	elapsed := clock.Now().UnixMilli() - t0
	bound := capacity + amount*elapsed/periodMs
	if got := admitted.Load(); got > bound || got < capacity {
		t.Fatalf("admitted %d tokens over %dms, bound %d", got, elapsed, bound)
	}
}
