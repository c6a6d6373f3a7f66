package memory_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/algorithm"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/memory"
)

// outcomeString renders an outcome with its error as text, so that outcomes
// of two stores (whose errors are distinct values) compare.
func outcomeString(o limiter.Outcome) string {
	err := ""
	if o.Err != nil {
		err = o.Err.Error()
	}
	o.Err = nil
	return fmt.Sprintf("%+v err=%q", o, err)
}

// TestBatchOfOneMatchesGeneralPath drives two stores with the same random
// requests: one evaluates each as a batch of one (the fast path), the other
// as a batch of two whose second request is a RoleCheck on a policy that
// never stores state (the general path, with no effect of its own). Every
// outcome, the stored entries and the observer counts must agree, across
// all algorithms and modes, invalid requests, clock steps (small and large,
// backward), expiry, a small capacity bound, overflow sketches and their
// bound.
func TestBatchOfOneMatchesGeneralPath(t *testing.T) {
	policies := []*limiter.Policy{
		fixedPolicy(t, 3, time.Second),
		limitertest.Policy(t, limiter.PolicySpec{ID: "sliding", Algorithm: limiter.SlidingWindow, MaxCost: 4,
			Params: limiter.SlidingWindowParams{Limit: 4, Window: 500 * time.Millisecond}}),
		limitertest.Policy(t, limiter.PolicySpec{ID: "bucket", Algorithm: limiter.TokenBucket, MaxCost: 3,
			Params: limiter.TokenBucketParams{Capacity: 5, RefillAmount: 1, RefillPeriod: 100 * time.Millisecond}}),
		limitertest.Policy(t, limiter.PolicySpec{ID: "log", Algorithm: limiter.SlidingLog, MaxCost: 3,
			Params: limiter.SlidingLogParams{Limit: 5, Window: 700 * time.Millisecond}}),
		limitertest.Policy(t, limiter.PolicySpec{ID: "shadow", Algorithm: limiter.FixedWindow, Shadow: true,
			Params: limiter.FixedWindowParams{Limit: 2, Window: time.Second}}),
		limitertest.Policy(t, limiter.PolicySpec{ID: "open", Algorithm: limiter.FixedWindow, FailureMode: limiter.FailOpen,
			Params: limiter.FixedWindowParams{Limit: 2, Window: 300 * time.Millisecond}}),
		// Same ID as policies[0], another revision: a state of its own.
		limitertest.Policy(t, limiter.PolicySpec{Revision: 2, Algorithm: limiter.FixedWindow,
			Params: limiter.FixedWindowParams{Limit: 1, Window: time.Second}}),
	}
	never := limitertest.Policy(t, limiter.PolicySpec{ID: "never-stored", Algorithm: limiter.FixedWindow,
		Params: limiter.FixedWindowParams{Limit: 1, Window: time.Second}})
	for _, seed := range []uint64{1, 2, 3} {
		rng := rand.New(rand.NewPCG(seed, 99))
		clock := newClock(t0)
		obsOne, obsGen := &counter{}, &counter{}
		cfg := memory.Config{Clock: clock, MaxEntries: 24, Shards: 4, MaxSketches: 2}
		cfg.Observer = obsOne
		one := newStore(t, cfg)
		cfg.Observer = obsGen
		gen := newStore(t, cfg)
		ctx := context.Background()
		outOne, outGen := make([]limiter.Outcome, 1), make([]limiter.Outcome, 2)
		for op := range 20_000 {
			switch r := rng.IntN(100); {
			case r < 10:
				clock.Advance(time.Duration(rng.IntN(400)) * time.Millisecond)
			case r == 10:
				clock.Advance(-time.Duration(rng.IntN(3000)) * time.Millisecond) // sometimes beyond the allowed regression
			case r == 11:
				clock.Advance(time.Duration(rng.IntN(10_000)) * time.Millisecond)
			}
			p := policies[rng.IntN(len(policies))]
			req := limiter.Request{Policy: p, Subject: subject(uint64(rng.IntN(40))), Cost: 1 + int64(rng.IntN(int(p.MaxCost())+1))}
			switch r := rng.IntN(20); {
			case r < 2:
				req.Role = limiter.RoleCheck
			case r < 4:
				req.Role = limiter.RoleQuota
			case r == 4:
				req.Role = limiter.RoleShadow
			case r == 5:
				req.Policy = nil
			case r == 6:
				req.Role = limiter.Role(9)
			case r == 7:
				req.Role = limiter.RoleProbe
			}
			one.Evaluate(ctx, []limiter.Request{req}, outOne)
			gen.Evaluate(ctx, []limiter.Request{req, {Policy: never, Subject: req.Subject, Cost: 1, Role: limiter.RoleCheck}}, outGen)
			if a, b := outcomeString(outOne[0]), outcomeString(outGen[0]); a != b {
				t.Fatalf("seed %d op %d: %+v\nbatch of one: %s\ngeneral:      %s", seed, op, req, a, b)
			}
			if op%64 == 0 && one.Len() != gen.Len() {
				t.Fatalf("seed %d op %d: Len %d vs %d", seed, op, one.Len(), gen.Len())
			}
			if op%500 == 0 {
				// The binary sweeps on a ticker: both stores at once.
				one.SweepExpired()
				gen.SweepExpired()
			}
		}
		if obsOne.refused.Load() != obsGen.refused.Load() || obsOne.expired.Load() != obsGen.expired.Load() {
			t.Fatalf("seed %d: observers refused %d/%d expired %d/%d", seed,
				obsOne.refused.Load(), obsGen.refused.Load(), obsOne.expired.Load(), obsGen.expired.Load())
		}
		for _, p := range policies {
			if a, b := obsOne.overflows(p.ID()), obsGen.overflows(p.ID()); a != b {
				t.Fatalf("seed %d: policy %s: overflow decisions %d/%d", seed, p.ID(), a, b)
			}
		}
		if obsOne.refused.Load() == 0 || obsOne.expired.Load() == 0 || obsOne.overflows(policies[1].ID()) == 0 {
			t.Fatalf("seed %d: the run never refused (%d), expired (%d) or overflowed (%d): widen it", seed,
				obsOne.refused.Load(), obsOne.expired.Load(), obsOne.overflows(policies[1].ID()))
		}
	}
}

// modelKey identifies a state in batchModel.
type modelKey struct {
	subject  limiter.SubjectDigest
	policy   string
	revision uint32
	alg      limiter.Algorithm
}

// batchModel is the batch rule of limiter.Store on a map, with no capacity
// bound: the reference TestBatchMatchesModel holds the store to.
type batchModel map[modelKey]algorithm.State

func (m batchModel) evaluate(nowMs int64, batch []limiter.Request, out []limiter.Outcome) {
	tentative := map[modelKey]algorithm.State{}
	type write struct {
		k           modelKey
		next        algorithm.State
		uncommitted algorithm.Reply
	}
	writes := map[int]write{}
	for i, r := range batch {
		if err := r.Validate(); err != nil {
			out[i] = limiter.UnavailableOutcome(0, limiter.CategoryInvalidRequest, fmt.Errorf("memory store: %w", err))
			continue
		}
		p := r.Policy
		k := modelKey{r.Subject, p.ID(), p.Revision(), p.Algorithm()}
		st, ok := tentative[k]
		if !ok {
			st = m[k]
			if st.Exists && nowMs > st.ExpiresAtMs {
				st = algorithm.State{}
			}
		}
		next, reply, uncommitted, w := algorithm.Check(st, nowMs, p, r.Cost)
		tentative[k] = st
		if !r.EffectiveRole().Consumes() {
			out[i] = algorithm.OutcomeFromReply(p, uncommitted, limiter.SourceMemory)
			continue
		}
		if w {
			tentative[k] = next
			writes[i] = write{k, next, uncommitted}
		}
		out[i] = algorithm.OutcomeFromReply(p, reply, limiter.SourceMemory)
	}
	commit := limiter.Commits(batch, out)
	for i := range batch {
		w, ok := writes[i]
		if !ok {
			continue
		}
		if !commit || out[i].Kind != limiter.Evaluated {
			out[i] = algorithm.OutcomeFromReply(batch[i].Policy, w.uncommitted, limiter.SourceMemory)
			continue
		}
		m[w.k] = w.next
		out[i].Decision.Consumed = true
	}
}

// TestBatchMatchesModel: random batches of two to six requests, naming the
// same state several times, with expiries removing entries (and shifting
// others) during the load and inserts growing the table during the commit,
// on one shard so that every request of a batch shares its table. Outcomes
// must match the reference model request for request: a key named twice sees
// the tentative state, and the commit writes every state where it now is.
func TestBatchMatchesModel(t *testing.T) {
	policies := []*limiter.Policy{
		fixedPolicy(t, 4, 200*time.Millisecond),
		limitertest.Policy(t, limiter.PolicySpec{ID: "sliding", Algorithm: limiter.SlidingWindow, MaxCost: 3,
			Params: limiter.SlidingWindowParams{Limit: 6, Window: 300 * time.Millisecond}}),
		limitertest.Policy(t, limiter.PolicySpec{ID: "bucket", Algorithm: limiter.TokenBucket, MaxCost: 3,
			Params: limiter.TokenBucketParams{Capacity: 5, RefillAmount: 1, RefillPeriod: 50 * time.Millisecond}}),
		limitertest.Policy(t, limiter.PolicySpec{ID: "shadow", Algorithm: limiter.FixedWindow, Shadow: true,
			Params: limiter.FixedWindowParams{Limit: 3, Window: 100 * time.Millisecond}}),
		limitertest.Policy(t, limiter.PolicySpec{ID: "log", Algorithm: limiter.SlidingLog, MaxCost: 3,
			Params: limiter.SlidingLogParams{Limit: 7, Window: 400 * time.Millisecond}}),
	}
	for _, seed := range []uint64{1, 2, 3, 4} {
		rng := rand.New(rand.NewPCG(seed, 7))
		clock := newClock(t0)
		s := newStore(t, memory.Config{Clock: clock, Shards: 1})
		m := batchModel{}
		ctx := context.Background()
		subjects := 8 + rng.IntN(120) // a small table that grows while batches run
		for op := range 5_000 {
			if rng.IntN(8) == 0 {
				clock.Advance(time.Duration(rng.IntN(600)) * time.Millisecond)
			}
			n := 2 + rng.IntN(5)
			batch := make([]limiter.Request, n)
			for i := range batch {
				p := policies[rng.IntN(len(policies))]
				batch[i] = limiter.Request{Policy: p, Subject: subject(uint64(rng.IntN(subjects))), Cost: 1 + int64(rng.IntN(int(p.MaxCost())))}
				if i > 0 && rng.IntN(3) == 0 { // the same state again
					batch[i].Policy, batch[i].Subject = batch[i-1-rng.IntN(i)].Policy, batch[i-1].Subject
				}
				switch rng.IntN(12) {
				case 0:
					batch[i].Role = limiter.RoleCheck
				case 1, 2:
					batch[i].Role = limiter.RoleQuota
				case 3:
					batch[i].Role = limiter.RoleProbe
				}
			}
			got, want := make([]limiter.Outcome, n), make([]limiter.Outcome, n)
			s.Evaluate(ctx, batch, got)
			m.evaluate(clock.Now().UnixMilli(), batch, want)
			for i := range batch {
				if a, b := outcomeString(got[i]), outcomeString(want[i]); a != b {
					t.Fatalf("seed %d op %d request %d of %+v:\nstore: %s\nmodel: %s", seed, op, i, batch, a, b)
				}
			}
		}
	}
}
