package topk

import (
	"crypto/sha256"
	"encoding/binary"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

type fakeClock struct{ ms atomic.Int64 }

func (c *fakeClock) Now() time.Time          { return time.UnixMilli(c.ms.Load()) }
func (c *fakeClock) advance(d time.Duration) { c.ms.Add(d.Milliseconds()) }

func newClock() *fakeClock {
	c := &fakeClock{}
	c.ms.Store(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC).UnixMilli())
	return c
}

// subject is a digest standing in for an HMAC output.
func subject(i int) limiter.SubjectDigest {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(i))
	return sha256.Sum256(b[:])
}

// subjects returns subject(0) to subject(n-1).
func subjects(n int) []limiter.SubjectDigest {
	subs := make([]limiter.SubjectDigest, n)
	for i := range subs {
		subs[i] = subject(i)
	}
	return subs
}

func newTracker(t testing.TB, cfg Config) *Tracker {
	t.Helper()
	tr, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func obs(i int, hits int64, denied bool) Observation {
	return Observation{Domain: "edge", Policy: "edge/user", Key: "user", Subject: subject(i), Hits: hits, Denied: denied}
}

func TestConfigValidation(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"negative counters", Config{Counters: -1}},
		{"too many counters", Config{Counters: maxCounters + 1}},
		{"negative policies", Config{MaxPolicies: -1}},
		{"too many policies", Config{MaxPolicies: maxPolicies + 1}},
		{"sub-second window", Config{Window: time.Millisecond}},
		{"negative window", Config{Window: -time.Minute}},
	} {
		if _, err := New(tc.cfg); err == nil {
			t.Errorf("%s: New accepted %+v", tc.name, tc.cfg)
		}
	}
	tr := newTracker(t, Config{Counters: 10})
	if tr.Counters() != 12 || tr.Window() != defaultWindow {
		t.Fatalf("counters %d window %v, want 12 (rounded to shards) and %v", tr.Counters(), tr.Window(), defaultWindow)
	}
}

// A heavy hitter among many light subjects is found, its estimate bounds
// its true weight, and the sketch's memory stays at its counters.
func TestHeavyHitterAmongNoise(t *testing.T) {
	clock := newClock()
	tr := newTracker(t, Config{Counters: 64, Clock: clock})
	rng := rand.New(rand.NewPCG(1, 2))
	const events = 200_000
	var heavyHits, secondHits int64
	for i := range events {
		switch {
		case i%20 == 0: // 5% of events, cost 3
			tr.Record(obs(-1, 3, i%40 == 0))
			heavyHits += 3
		case i%50 == 1: // 2%
			tr.Record(obs(-2, 1, false))
			secondHits++
		default: // noise over 50,000 subjects
			tr.Record(obs(rng.IntN(50_000), 1, false))
		}
	}
	tops := tr.Top(Filter{}, ByHits, 5)
	if len(tops) != 1 || len(tops[0].Entries) != 5 {
		t.Fatalf("top: %+v", tops)
	}
	e := tops[0].Entries
	if e[0].Subject != subject(-1) || e[1].Subject != subject(-2) {
		t.Fatalf("the two heavy subjects are not first and second: %x %x", e[0].Subject[:4], e[1].Subject[:4])
	}
	if e[0].Hits < heavyHits || e[0].Hits-e[0].HitsError > heavyHits {
		t.Fatalf("heavy estimate %d±%d does not bound its true %d", e[0].Hits, e[0].HitsError, heavyHits)
	}
	if e[1].Hits < secondHits || e[1].Hits-e[1].HitsError > secondHits {
		t.Fatalf("second estimate %d±%d does not bound its true %d", e[1].Hits, e[1].HitsError, secondHits)
	}
	if e[0].Denied != events/40 {
		t.Fatalf("heavy denials %d, want %d", e[0].Denied, events/40)
	}
	p := (*tr.policies.Load())[key{"edge", "edge/user"}]
	for i := range p.shards {
		sh := &p.shards[i]
		for _, s := range []*spaceSaving{&sh.cur.byHits, &sh.cur.byDenied, &sh.old.byHits, &sh.old.byDenied} {
			if len(s.heap) > tr.counters || s.index.len() != len(s.heap) || cap(s.heap) != tr.counters {
				t.Fatalf("shard %d: %d counters, %d indexed, capacity %d; want at most %d", i, len(s.heap), s.index.len(), cap(s.heap), tr.counters)
			}
		}
	}
}

// With fewer subjects than counters, the counts are exact.
func TestExactBelowCapacity(t *testing.T) {
	tr := newTracker(t, Config{Counters: 64, Clock: newClock()})
	for i := range 10 {
		for range i + 1 {
			tr.Record(obs(i, 2, i%2 == 0))
		}
	}
	top := tr.Top(Filter{Policy: "edge/user"}, ByHits, 100)[0].Entries
	if len(top) != 10 {
		t.Fatalf("%d entries, want 10", len(top))
	}
	for rank, e := range top {
		i := 9 - rank
		wantDenied := int64(0)
		if i%2 == 0 {
			wantDenied = int64(i + 1)
		}
		if e.Subject != subject(i) || e.Hits != int64(2*(i+1)) || e.HitsError != 0 || e.Denied != wantDenied {
			t.Fatalf("rank %d: %+v, want subject %d hits %d denied %d", rank, e, i, 2*(i+1), wantDenied)
		}
	}
	denied := tr.Top(Filter{}, ByDenied, 2)[0].Entries
	if len(denied) != 2 || denied[0].Subject != subject(8) || denied[0].Denied != 9 || denied[0].Hits != 18 || denied[1].Subject != subject(6) {
		t.Fatalf("by denials: %+v", denied)
	}
}

// Step table: what an answer holds as the clock moves across windows.
func TestWindowRotation(t *testing.T) {
	clock := newClock()
	tr := newTracker(t, Config{Window: time.Minute, Clock: clock})
	steps := []struct {
		advance  time.Duration
		record   int // subject to record once, -1 none
		wantSubs []int
	}{
		{0, 1, []int{1}},
		{30 * time.Second, 2, []int{1, 2}}, // same window
		{time.Minute, 3, []int{1, 2, 3}},   // next window: the previous still counts
		{time.Minute, -1, []int{3}},        // 1 and 2 left with the window before
		{20 * time.Second, 4, []int{3, 4}}, // still in the same window pair
		{5 * time.Minute, -1, nil},         // a long gap clears both
		{-10 * time.Minute, 5, []int{5}},   // a clock step back stays in the window
	}
	for i, st := range steps {
		clock.advance(st.advance)
		if st.record >= 0 {
			tr.Record(obs(st.record, 1, false))
		}
		got := map[limiter.SubjectDigest]bool{}
		for _, e := range tr.Top(Filter{}, ByHits, 10)[0].Entries {
			got[e.Subject] = true
		}
		if len(got) != len(st.wantSubs) {
			t.Fatalf("step %d: %d subjects, want %v", i, len(got), st.wantSubs)
		}
		for _, s := range st.wantSubs {
			if !got[subject(s)] {
				t.Fatalf("step %d: subject %d missing", i, s)
			}
		}
	}
	u := tr.Usage(Filter{})[0]
	if u.Decisions != 5 || u.Recent.Decisions != 1 {
		t.Fatalf("usage %+v: want 5 decisions since start, 1 recent", u)
	}
}

func TestUsageTotalsAndDistinct(t *testing.T) {
	clock := newClock()
	tr := newTracker(t, Config{Clock: clock})
	const subjects = 20_000
	for i := range subjects {
		o := obs(i, 2, i%10 == 0)
		o.ShadowDenied = i%4 == 0
		tr.Record(o)
		tr.Record(obs(i, 0, false)) // a probe: a decision, no hits
	}
	tr.Record(Observation{Domain: "api", Policy: "api/key", Key: "key", Subject: subject(1), Hits: 5})
	us := tr.Usage(Filter{})
	if len(us) != 2 || us[0].Policy != "api/key" || us[1].Policy != "edge/user" {
		t.Fatalf("usage order: %+v", us)
	}
	u := us[1]
	if u.Hits != 2*subjects || u.Decisions != 2*subjects || u.Denials != subjects/10 || u.ShadowDenials != subjects/4 {
		t.Fatalf("totals %+v", u)
	}
	if u.Recent.Hits != u.Hits || u.Recent.Denials != u.Denials {
		t.Fatalf("recent %+v differs from totals within one window", u.Recent)
	}
	if d := float64(u.DistinctSubjects)/subjects - 1; d > 0.05 || d < -0.05 {
		t.Fatalf("distinct estimate %d for %d subjects: off by %.1f%%", u.DistinctSubjects, subjects, 100*d)
	}
	if got := tr.Usage(Filter{Key: "key"}); len(got) != 1 || got[0].Hits != 5 || got[0].DistinctSubjects != 1 {
		t.Fatalf("filter by key: %+v", got)
	}
	if got := tr.Usage(Filter{Domain: "nope"}); len(got) != 0 {
		t.Fatalf("filter by unknown domain: %+v", got)
	}
}

// TestUsageReservations: a reserving policy's usage counts the units its
// reserves held and the usage its settles reported; a settle is no
// decision and adds no hits.
func TestUsageReservations(t *testing.T) {
	tr := newTracker(t, Config{Clock: newClock()})
	for i := range 3 {
		o := obs(i, 500, false)
		o.Reserved = 500
		tr.Record(o)
	}
	tr.Record(obs(3, 500, true)) // a denied reserve holds nothing
	for i, used := range []int64{300, 700} {
		tr.Record(Observation{Domain: "edge", Policy: "edge/user", Key: "user", Subject: subject(i), Settle: true, Used: used})
	}
	u := tr.Usage(Filter{})[0]
	if u.Reserved != 1500 || u.Used != 1000 || u.Decisions != 4 || u.Hits != 2000 || u.Denials != 1 {
		t.Fatalf("usage %+v: want 1500 reserved, 1000 used, 4 decisions of 2000 hits, 1 denial", u)
	}
	if u.Recent.Decisions != 4 {
		t.Fatalf("recent %+v: a settle counted as a decision", u.Recent)
	}
}

func TestMaxPolicies(t *testing.T) {
	tr := newTracker(t, Config{MaxPolicies: 2, Clock: newClock()})
	for _, p := range []string{"a", "b", "c", "a", "c"} {
		tr.Record(Observation{Domain: "d", Policy: p, Subject: subject(1), Hits: 1})
	}
	if n := len(tr.Usage(Filter{})); n != 2 || tr.Untracked() != 2 {
		t.Fatalf("%d policies tracked, %d untracked; want 2 and 2", n, tr.Untracked())
	}
}

// Concurrent records and reads (run with -race) lose nothing.
func TestConcurrent(t *testing.T) {
	tr := newTracker(t, Config{Clock: newClock()})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				tr.Record(Observation{Domain: "d", Policy: []string{"p1", "p2"}[g%2], Subject: subject(i % 50), Hits: 1})
				if i%500 == 0 {
					tr.Top(Filter{}, ByHits, 3)
					tr.Usage(Filter{})
				}
			}
		})
	}
	wg.Wait()
	var total int64
	for _, u := range tr.Usage(Filter{}) {
		total += u.Hits
	}
	if total != 8*2000 {
		t.Fatalf("%d hits recorded, want %d", total, 8*2000)
	}
}

// BenchmarkRecord measures the decision path's cost: one policy, many
// subjects, every goroutine recording.
func BenchmarkRecord(b *testing.B) {
	tr := newTracker(b, Config{})
	subs := subjects(100_000)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := rand.IntN(len(subs))
		for pb.Next() {
			i++
			if i == len(subs) {
				i = 0
			}
			tr.Record(Observation{Domain: "edge", Policy: "edge/user", Key: "user", Subject: subs[i], Hits: 1, Denied: i%16 == 0})
		}
	})
}

// BenchmarkRecordZipf records a skewed population (Zipf s=1.1 over 100,000
// subjects), closer to real traffic: heavy subjects are found in the
// sketch without taking over a counter.
func BenchmarkRecordZipf(b *testing.B) {
	tr := newTracker(b, Config{})
	subs := subjects(100_000)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		z := rand.NewZipf(rand.New(rand.NewPCG(rand.Uint64(), 1)), 1.1, 1, uint64(len(subs)-1))
		for pb.Next() {
			tr.Record(Observation{Domain: "edge", Policy: "edge/user", Key: "user", Subject: subs[z.Uint64()], Hits: 1})
		}
	})
}

// BenchmarkPolicyMemory reports the heap one policy holds with every
// counter of both windows in use and its HyperLogLog dense.
func BenchmarkPolicyMemory(b *testing.B) {
	const policies = 64
	for range b.N {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		clock := newClock()
		tr := newTracker(b, Config{Clock: clock, MaxPolicies: policies})
		for p := range policies {
			for w := range 2 {
				for i := range 20_000 {
					tr.Record(Observation{Domain: "d", Policy: strconv.Itoa(p), Subject: subject(i + 20_000*w), Hits: 1, Denied: true})
				}
				clock.advance(defaultWindow)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/policies, "B/policy")
		runtime.KeepAlive(tr)
	}
}
