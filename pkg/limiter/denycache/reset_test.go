package denycache

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// TestResetKeepsOtherCachedDenials: a reset forgets only the cached denials
// of what it resets (the store suite checks that a reset state is decided
// afresh): another subject's, and another policy's, are still answered
// from the cache.
func TestResetKeepsOtherCachedDenials(t *testing.T) {
	e := newEnv(t, 0)
	p := policy(t, "fw", limiter.FixedWindow, 1, time.Minute)
	other := policy(t, "other", limiter.FixedWindow, 1, time.Minute)
	a, b := subject("a"), subject("b")
	run(t, e, p, a, []step{viaStore(1, true), viaStore(1, false), viaCache(1)})
	run(t, e, p, b, []step{viaStore(1, true), viaStore(1, false), viaCache(1)})
	run(t, e, other, a, []step{viaStore(1, true), viaStore(1, false), viaCache(1)})
	if n, err := e.cache.Reset(context.Background(), []limiter.Request{{Policy: p, Subject: a}}); err != nil || n != 1 {
		t.Fatalf("Reset: %d, %v; want 1 state reset", n, err)
	}
	run(t, e, p, b, []step{viaCache(1)})
	run(t, e, other, a, []step{viaCache(1)})
	res, err := e.cache.ResetPolicy(context.Background(), "fw", p.Revision(), limiter.ResetBounds{MaxScanned: 1000})
	if err != nil || res.Deleted != 1 || !res.Complete {
		t.Fatalf("ResetPolicy: %+v, %v; want b's state deleted, complete", res, err)
	}
	run(t, e, p, b, []step{viaStore(1, true)})
	run(t, e, other, a, []step{viaCache(1)})
}

// TestResetUnsupported: a store behind that cannot reset is said so.
func TestResetUnsupported(t *testing.T) {
	c, err := New(Config{Store: evalOnly{}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Reset(context.Background(), nil); !errors.Is(err, limiter.ErrResetUnsupported) {
		t.Fatalf("Reset over a store without Reset: %v", err)
	}
	if _, err := c.ResetPolicy(context.Background(), "p", 1, limiter.ResetBounds{MaxScanned: 1}); !errors.Is(err, limiter.ErrResetUnsupported) {
		t.Fatalf("ResetPolicy over a store without Reset: %v", err)
	}
}

// evalOnly is a store without Reset.
type evalOnly struct{}

func (evalOnly) Evaluate(context.Context, []limiter.Request, []limiter.Outcome) {}
