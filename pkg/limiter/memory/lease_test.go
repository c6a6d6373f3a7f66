package memory_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/memory"
)

// TestLeases runs a crashed holder on the injected clock, and three
// "replicas" (goroutine groups) on one store: never more than the limit in
// flight. TestSuite runs the lease scripts.
func TestLeases(t *testing.T) {
	t.Run("crashed holder", func(t *testing.T) {
		clock := limitertest.NewClock(time.UnixMilli(1_700_000_000_000))
		s := newStore(t, memory.Config{Clock: clock})
		p := limitertest.LeasePolicy(t, "mem.crash", 1, time.Minute)
		limitertest.LeaseExpiry(t, s, p, limitertest.Subject("crash"), clock.Now, func(d time.Duration) { clock.Advance(d) })
	})
	t.Run("in flight", func(t *testing.T) {
		s := newStore(t, memory.Config{})
		p := limitertest.LeasePolicy(t, "mem.inflight", 3, time.Hour)
		limitertest.LeaseExactness(t, []limiter.Store{s, s, s}, p, limitertest.Subject("inflight"), 4, 200)
	})
}

// TestLeaseCapacity: lease sets are bounded by MaxEntries, one policy to
// half of them; a new set past its share is refused for capacity (the
// failure mode answers), an expired one makes room.
func TestLeaseCapacity(t *testing.T) {
	clock := limitertest.NewClock(time.UnixMilli(1_700_000_000_000))
	s := newStore(t, memory.Config{Clock: clock, MaxEntries: 16, Shards: 1})
	p := limitertest.LeasePolicy(t, "mem.cap", 1, time.Second)
	out := make([]limiter.Outcome, 1)
	for i := range 9 {
		s.Evaluate(t.Context(), []limiter.Request{{Policy: p, Subject: limitertest.Subject(string(rune('a' + i))), Cost: 1}}, out)
		if want := i < 8; (out[0].Kind == limiter.Evaluated) != want {
			t.Fatalf("set %d: %s %v", i, out[0].Kind, out[0].Err)
		}
	}
	if out[0].Category != limiter.CategoryCapacity || out[0].RetryAfter != memory.CapacityRetryAfter {
		t.Fatalf("9th set: %s %s %s", out[0].Kind, out[0].Category, out[0].RetryAfter)
	}
	clock.Advance(2 * time.Second)
	s.Evaluate(t.Context(), []limiter.Request{{Policy: p, Subject: limitertest.Subject("late"), Cost: 1}}, out)
	if out[0].Kind != limiter.Evaluated || !out[0].Decision.Consumed {
		t.Fatalf("after every lease expired: %s %v", out[0].Kind, out[0].Err)
	}
}

// TestLeaseShare: a flood of new subjects on one concurrency policy takes
// half of the lease table, a second policy half of what is left, a third
// half of that; each keeps exact leases for its own subjects, and every
// new set refused for its policy's share is counted in
// envoy_rls_memory_refused_total. A sweep and a policy reset give a
// policy its share back.
func TestLeaseShare(t *testing.T) {
	clock := limitertest.NewClock(time.UnixMilli(1_700_000_000_000))
	reg := prometheus.NewRegistry()
	m, err := memory.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	s := newStore(t, memory.Config{Clock: clock, MaxEntries: 16, Observer: m})
	flood := limitertest.LeasePolicy(t, "mem.flood", 1, time.Hour)
	second := limitertest.LeasePolicy(t, "mem.second", 2, time.Hour)
	third := limitertest.LeasePolicy(t, "mem.third", 2, time.Hour)
	refusals := 0
	// takes takes one lease of each of n new subjects of p and returns how
	// many took one; every other take must be refused for capacity.
	takes := func(p *limiter.Policy, n int) int {
		t.Helper()
		got := 0
		for i := range n {
			o := eval1(s, t.Context(), limiter.Request{Policy: p, Subject: limitertest.Subject(fmt.Sprintf("%s-%d", p.ID(), i)), Cost: 1})
			switch {
			case o.Kind == limiter.Evaluated && o.Decision.Consumed:
				got++
			case o.Kind == limiter.Unavailable && o.Category == limiter.CategoryCapacity && o.RetryAfter == memory.CapacityRetryAfter:
				refusals++
			default:
				t.Fatalf("%s subject %d: %s %s %+v", p.ID(), i, o.Kind, o.Category, o.Decision)
			}
		}
		return got
	}
	if got := takes(flood, 40); got != 8 {
		t.Fatalf("the flood took %d lease sets of 16, want 8 (half)", got)
	}
	// A subject of the flood that holds a set is still evaluated exactly.
	held := limiter.Request{Policy: flood, Subject: limitertest.Subject("mem.flood-0"), Cost: 1}
	if o := eval1(s, t.Context(), held); o.Kind != limiter.Evaluated || o.Decision.Allowed {
		t.Fatalf("a second take of a held flood subject (limit 1): %s %+v", o.Kind, o.Decision)
	}
	if got := takes(second, 20); got != 4 {
		t.Fatalf("the second policy took %d lease sets, want 4 (half of the 8 left)", got)
	}
	// Its subjects hold exact leases: a second take fits (limit 2), a
	// third does not.
	sub := limiter.Request{Policy: second, Subject: limitertest.Subject("mem.second-0"), Cost: 1}
	for i, want := range []bool{true, false} {
		if o := eval1(s, t.Context(), sub); o.Kind != limiter.Evaluated || o.Decision.Allowed != want {
			t.Fatalf("take %d of a second-policy subject: %s %+v, want allowed %t", i+2, o.Kind, o.Decision, want)
		}
	}
	if got := takes(third, 10); got != 2 {
		t.Fatalf("the third policy took %d lease sets, want 2 (half of the 4 left)", got)
	}
	if refusals != 32+16+8 {
		t.Fatalf("%d refusals, want 56", refusals)
	}
	checkRefused(t, reg, refusals)

	// Expired sets leave the count of their policy.
	clock.Advance(2 * time.Hour)
	s.Sweep(clock.Now())
	if got := takes(flood, 9); got != 8 {
		t.Fatalf("after a sweep the flood took %d lease sets, want 8", got)
	}
	if _, err := s.ResetPolicy(t.Context(), flood.ID(), flood.Revision(), limiter.ResetBounds{MaxScanned: 100}); err != nil {
		t.Fatal(err)
	}
	if got := takes(second, 9); got != 8 {
		t.Fatalf("after the flood's reset the second policy took %d lease sets, want 8", got)
	}
	checkRefused(t, reg, refusals)
}

// checkRefused: reg exposes envoy_rls_memory_refused_total n.
func checkRefused(t *testing.T, reg *prometheus.Registry, n int) {
	t.Helper()
	want := fmt.Sprintf("\nenvoy_rls_memory_refused_total %d\n", n)
	if got := limitertest.Exposition(t, reg); !strings.Contains(got, want) {
		t.Fatalf("exposed:\n%s\nwant a line %q", got, strings.TrimSpace(want))
	}
}

// TestLeaseReset: a subject reset and a policy reset drop lease sets.
func TestLeaseReset(t *testing.T) {
	s := newStore(t, memory.Config{})
	p := limitertest.LeasePolicy(t, "mem.reset", 1, time.Hour)
	take := func(subject string) bool {
		out := make([]limiter.Outcome, 1)
		s.Evaluate(t.Context(), []limiter.Request{{Policy: p, Subject: limitertest.Subject(subject), Cost: 1}}, out)
		return out[0].Decision.Consumed
	}
	if !take("a") || !take("b") || take("a") {
		t.Fatal("one lease each, then full")
	}
	if n, err := s.Reset(t.Context(), []limiter.Request{{Policy: p, Subject: limitertest.Subject("a")}}); n != 1 || err != nil {
		t.Fatalf("Reset: %d %v", n, err)
	}
	if !take("a") || take("b") {
		t.Fatal("after the subject reset: a free, b still held")
	}
	res, err := s.ResetPolicy(t.Context(), p.ID(), p.Revision(), limiter.ResetBounds{MaxScanned: 100})
	if err != nil || res.Deleted != 2 {
		t.Fatalf("ResetPolicy: %+v %v", res, err)
	}
	if !take("b") {
		t.Fatal("after the policy reset: b free")
	}
}

// TestMixedBatchWithoutLeasesWrapper: the store evaluates lease requests
// only in a batch of their own (the leases wrapper sends them so); a lease
// request in a batch of rate requests is refused as incompatible, never
// allowed, and blocks the batch.
func TestMixedBatchWithoutLeasesWrapper(t *testing.T) {
	s := newStore(t, memory.Config{})
	lease := limitertest.LeasePolicy(t, "mem.mixed", 1, time.Hour)
	rate := limitertest.Policy(t, limiter.PolicySpec{ID: "mem.mixed-rate", Algorithm: limiter.FixedWindow,
		Params: limiter.FixedWindowParams{Limit: 5, Window: time.Hour}})
	sub := limitertest.Subject("mixed")
	out := make([]limiter.Outcome, 2)
	s.Evaluate(t.Context(), []limiter.Request{{Policy: lease, Subject: sub, Cost: 1}, {Policy: rate, Subject: sub, Cost: 1}}, out)
	if out[0].Kind != limiter.Incompatible || out[1].Kind != limiter.Evaluated || out[1].Decision.Consumed {
		t.Fatalf("mixed batch: %s %v, %s %+v", out[0].Kind, out[0].Err, out[1].Kind, out[1].Decision)
	}
	if o := eval1(s, t.Context(), limiter.Request{Policy: lease, Subject: sub, Cost: 1}); o.Kind != limiter.Evaluated || !o.Decision.Consumed {
		t.Fatalf("a batch of the lease alone: %s %+v", o.Kind, o.Decision)
	}
}
