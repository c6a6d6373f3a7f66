package limitertest_test

import (
	"context"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// TestDouble: the double passes batches to its memory store and counts
// them, answers each fault shape, holds calls until released or their
// context ends, and panics when told.
func TestDouble(t *testing.T) {
	d := limitertest.NewDouble(t, nil, nil)
	p := limitertest.Policy(t, limiter.PolicySpec{ID: "d", Algorithm: limiter.FixedWindow,
		Params: limiter.FixedWindowParams{Limit: 1, Window: time.Hour}})
	req := []limiter.Request{{Policy: p, Subject: limitertest.Subject("s"), Cost: 1}}
	eval := func(ctx context.Context) limiter.Outcome {
		out := make([]limiter.Outcome, 1)
		d.Evaluate(ctx, req, out)
		return out[0]
	}
	if o := eval(context.Background()); o.Kind != limiter.Evaluated || !o.Decision.Consumed {
		t.Fatalf("passed through: %v %+v", o.Kind, o.Decision)
	}
	for _, k := range []limiter.OutcomeKind{limiter.Unavailable, limiter.Indeterminate, limiter.Incompatible} {
		d.Set(limitertest.Fault{Kind: k, RetryAfter: time.Second})
		if o := eval(context.Background()); o.Kind != k {
			t.Errorf("fault %v: answered %v", k, o.Kind)
		}
	}
	d.Set(limitertest.Fault{Hang: true})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	if o := eval(ctx); o.Kind != limiter.Indeterminate {
		t.Errorf("hang: %v", o.Kind)
	}
	cancel()
	<-d.Entered
	d.Set(limitertest.Fault{Hold: true})
	done := make(chan limiter.Outcome)
	go func() { done <- eval(context.Background()) }()
	<-d.Entered
	d.Release()
	if o := <-done; o.Kind != limiter.Evaluated || o.Decision.Allowed {
		t.Errorf("held then released: %v %+v, want the store's denial (its limit of 1 is spent)", o.Kind, o.Decision)
	}
	if b, r := d.Counts(); b != 6 || r != 6 {
		t.Errorf("counts %d batches %d requests, want 6 and 6", b, r)
	}
	d.Set(limitertest.Fault{Panic: "boom"})
	defer func() {
		if recover() != "boom" {
			t.Error("no panic")
		}
	}()
	eval(context.Background())
}
