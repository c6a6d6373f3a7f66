package redis

import (
	"context"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/memory"
)

// TestSuite runs the store suite (internal/limitertest) on standalone
// Redis: the batch table, resets (TestClusterBatch runs them on a Cluster)
// and the lease scripts (lease-v1.lua). Redis decides with its own TIME,
// which no test sets: the timed cases run on the stores with an injected
// clock, and Redis's side of time is the program's parity with
// limiter.Apply at TIME (parity_test.go, calendar_test.go,
// calendar_penalty_test.go).
func TestSuite(t *testing.T) {
	e := newEnv(t)
	limitertest.RunSuite(t, limitertest.Suite{
		Store:  func(*testing.T) limiter.Store { return e.store },
		Leases: true,
	}, limitertest.Config{Prefix: limitertest.Prefix()})
}

// redisClock reads Redis TIME, so that the memory store decides at (nearly)
// the instant the Redis store does.
type redisClock struct{ e *env }

func (c redisClock) Now() time.Time { return time.UnixMilli(c.e.serverNow()) }

// TestVectorsMemoryAndRedis runs one table of request sequences against the
// memory store and the Redis store and asserts the same outcomes. Windows and
// refill rates are long, so the milliseconds between the two evaluations only
// move retry-after and reset-at, which are compared within a tolerance; the
// exact field-by-field parity is TestRandomDifferential's.
func TestVectorsMemoryAndRedis(t *testing.T) {
	e := newEnv(t)
	mem, err := memory.New(memory.Config{Clock: redisClock{e}, MaxEntries: 1000})
	if err != nil {
		t.Fatal(err)
	}
	type step struct {
		cost      int64
		allowed   bool
		remaining int64
	}
	const maxSlidingWindow = 9007 * time.Second * 1000 // (2^53-1)/1e6 ms, rounded down
	vectors := []struct {
		name   string
		policy *limiter.Policy
		steps  []step
	}{
		{"fixed: fill, then deny", fixed(t, "v.fw1", 5, farWindow),
			[]step{{1, true, 4}, {1, true, 3}, {3, true, 0}, {1, false, 0}, {5, false, 0}}},
		{"fixed: exact boundary after a denial", fixed(t, "v.fw2", 5, farWindow),
			[]step{{3, true, 2}, {3, false, 2}, {2, true, 0}, {1, false, 0}}},
		{"fixed: max cost", limitertest.Policy(t, limiter.PolicySpec{ID: "v.fw3", Algorithm: limiter.FixedWindow, MaxCost: 4,
			Params: limiter.FixedWindowParams{Limit: 10, Window: farWindow}}),
			[]step{{4, true, 6}, {4, true, 2}, {4, false, 2}, {2, true, 0}}},
		{"token bucket: drain", bucket(t, "v.tb1", 5, 1, 24*time.Hour),
			[]step{{5, true, 0}, {1, false, 0}}},
		{"token bucket: boundary", bucket(t, "v.tb2", 5, 1, 24*time.Hour),
			[]step{{2, true, 3}, {2, true, 1}, {2, false, 1}, {1, true, 0}}},
		{"sliding: fresh window", sliding(t, "v.sw1", 5, maxSlidingWindow),
			[]step{{1, true, 4}, {1, true, 3}, {3, true, 0}, {1, false, 0}}},
	}
	const tolerance = time.Second
	for _, v := range vectors {
		sub := subjectOf("vector " + v.name)
		for i, s := range v.steps {
			req := []limiter.Request{{Policy: v.policy, Subject: sub, Cost: s.cost}}
			var got [2]limiter.Outcome
			for j, store := range []limiter.Store{mem, e.store} {
				out := make([]limiter.Outcome, 1)
				store.Evaluate(context.Background(), req, out)
				got[j] = out[0]
			}
			m, r := got[0], got[1]
			if m.Kind != limiter.Evaluated || r.Kind != limiter.Evaluated {
				t.Fatalf("%s step %d: memory %v (%v), redis %v (%v)", v.name, i, m.Kind, m.Err, r.Kind, r.Err)
			}
			md, rd := m.Decision, r.Decision
			if md.Allowed != s.allowed || md.Remaining != s.remaining {
				t.Errorf("%s step %d: memory allowed=%v remaining=%d, want %v %d", v.name, i, md.Allowed, md.Remaining, s.allowed, s.remaining)
			}
			if rd.Allowed != md.Allowed || rd.Remaining != md.Remaining || rd.Limit != md.Limit || rd.Certainty != md.Certainty ||
				rd.PolicyID != md.PolicyID || rd.PolicyRevision != md.PolicyRevision {
				t.Errorf("%s step %d: redis %+v, memory %+v", v.name, i, rd, md)
			}
			if d := rd.RetryAfter - md.RetryAfter; d > tolerance || d < -tolerance || (rd.RetryAfter == 0) != (md.RetryAfter == 0) {
				t.Errorf("%s step %d: retry-after redis %v, memory %v", v.name, i, rd.RetryAfter, md.RetryAfter)
			}
			if d := rd.ResetAt.Sub(md.ResetAt); d > tolerance || d < -tolerance {
				t.Errorf("%s step %d: reset-at redis %v, memory %v", v.name, i, rd.ResetAt, md.ResetAt)
			}
			if rd.Source != limiter.SourceRedis || md.Source != limiter.SourceMemory {
				t.Errorf("%s step %d: sources %v, %v", v.name, i, rd.Source, md.Source)
			}
		}
	}
}
