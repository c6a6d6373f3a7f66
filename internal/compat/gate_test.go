package compat

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/memory"
)

// TestSecretGate: closed, every request is Unavailable (not connected:
// nothing reached the store) with the reason, Ping and the resets fail with
// it, and the store holds nothing; open, everything is the store's.
func TestSecretGate(t *testing.T) {
	store, err := memory.New(memory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	p := limitertest.Policy(t, limiter.PolicySpec{Algorithm: limiter.FixedWindow,
		Params: limiter.FixedWindowParams{Limit: 1, Window: time.Hour}})
	batch := []limiter.Request{{Policy: p, Subject: limitertest.Subject("a"), Cost: 1}}
	out := make([]limiter.Outcome, 1)
	ctx := context.Background()

	g := NewSecretGate(store, errors.New("dial tcp: connection refused"))
	g.Waiting(errors.New("dial tcp: i/o timeout"))
	for range 3 {
		g.Evaluate(ctx, batch, out)
		if o := out[0]; o.Kind != limiter.Unavailable || o.Category != limiter.CategoryUnkeyed ||
			!errors.Is(o.Err, ErrSecretNotRead) || o.Err.Error() != ErrSecretNotRead.Error()+": dial tcp: i/o timeout" || o.RetryAfter <= 0 {
			t.Fatalf("closed: %+v, want Unavailable, not connected, with the last cause", o)
		}
	}
	if err := g.Ping(ctx); !errors.Is(err, ErrSecretNotRead) {
		t.Errorf("closed: Ping %v", err)
	}
	if _, err := g.Reset(ctx, batch); !errors.Is(err, ErrSecretNotRead) {
		t.Errorf("closed: Reset %v", err)
	}
	if _, err := g.ResetPolicy(ctx, p.ID(), p.Revision(), limiter.ResetBounds{MaxScanned: 10}); !errors.Is(err, ErrSecretNotRead) {
		t.Errorf("closed: ResetPolicy %v", err)
	}
	if n := store.Len(); n != 0 {
		t.Fatalf("closed: the store holds %d states, want none", n)
	}

	g.Open()
	if err := g.Ping(ctx); err != nil {
		t.Errorf("open: Ping %v", err)
	}
	for i, want := range []bool{true, false} {
		g.Evaluate(ctx, batch, out)
		if out[0].Kind != limiter.Evaluated || out[0].Decision.Allowed != want {
			t.Fatalf("open, call %d: %+v, want the store's decision (allowed %v)", i+1, out[0], want)
		}
	}
	if n, err := g.Reset(ctx, batch); err != nil || n != 1 {
		t.Errorf("open: Reset %d %v, want the store's state deleted", n, err)
	}
}
