package redis

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/internal/polltest"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// TestLateAnswer: a charge (a request of a charge-always policy) that
// leaves before its program's answer (Redis stopped) is Indeterminate with
// a limiter.Awaited, which its run, waiting past the deadline, resolves
// once the answer comes: Evaluated when the program ran in time by Redis's
// clock and applied the request (here the store believes Redis an hour
// ahead, so the deadline it sends is an hour late: the stand-in for a
// program that ran just before the stop and whose answer was not yet
// written), Unavailable (deadline) when it ran past the deadline it
// carries and applied nothing.
func TestLateAnswer(t *testing.T) {
	e := newEnvWith(t, Config{Timeout: 10 * time.Second}, redistest.Local())
	p := limitertest.Policy(t, limiter.PolicySpec{ID: "late", Algorithm: limiter.FixedWindow, Charge: limiter.ChargeAlways,
		Params: limiter.FixedWindowParams{Limit: 1000, Window: farWindow}})
	e.mustDecide(p, subjectOf("warm-up"))
	for _, tc := range []struct {
		name    string
		aheadMs int64 // what the store believes Redis's clock is ahead by
		want    limiter.OutcomeKind
		applied int64
	}{
		{"applied", time.Hour.Milliseconds(), limiter.Evaluated, 1},
		{"past its deadline", 0, limiter.Unavailable, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sub := subjectOf("late " + tc.name)
			now := e.store.local.ms(time.Now())
			e.store.offsets[0] = clockOffset{}
			e.store.offsets[0].sample(now, now+tc.aheadMs)
			e.srv.Pause()
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			out := make([]limiter.Outcome, 1)
			e.store.Evaluate(ctx, []limiter.Request{{Policy: p, Subject: sub, Cost: 1}}, out)
			cancel()
			e.srv.Resume()
			var awaited *limiter.Awaited
			if out[0].Kind != limiter.Indeterminate || !errors.As(out[0].Err, &awaited) {
				t.Fatalf("a call on a stopped Redis: %v (%v), want Indeterminate awaiting its answer", out[0].Kind, out[0].Err)
			}
			var late limiter.Outcome
			polltest.Eventually(t, 10*time.Second, time.Millisecond, "the late answer", func() error {
				o, ok := awaited.Resolved()
				if !ok {
					return errors.New("not resolved")
				}
				late = o
				return nil
			})
			if late.Kind != tc.want || (tc.want == limiter.Unavailable && late.Category != limiter.CategoryDeadline) {
				t.Fatalf("late answer %v/%s (%v), want %v", late.Kind, late.Category, late.Err, tc.want)
			}
			check := make([]limiter.Outcome, 1)
			e.store.Evaluate(context.Background(), []limiter.Request{{Policy: p, Subject: sub, Cost: 1, Role: limiter.RoleCheck}}, check)
			if got := 1000 - check[0].Decision.Remaining; check[0].Kind != limiter.Evaluated || got != tc.applied {
				t.Fatalf("%d applied (%v), want %d", got, check[0].Kind, tc.applied)
			}
		})
	}
}
