package redis

import (
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/algorithm"
)

// TestBlockedRetryWaitsForTheLimit: rate-batch-v2.lua answers a blocked
// subject as algorithm.Check (the memory store) does. On a limit of 2 an
// hour whose window is full, a block that ends before the window does
// tells the client to come back when the window admits again (coming back
// at the block's end would be a new offence), and carries the block's own
// end for the deny cache; when the window has room the retry is the
// block's.
func TestBlockedRetryWaitsForTheLimit(t *testing.T) {
	e := newEnv(t)
	p := limitertest.Policy(t, limiter.PolicySpec{ID: "hourly.pen", Algorithm: limiter.FixedWindow,
		Params:  limiter.FixedWindowParams{Limit: 2, Window: time.Hour},
		Penalty: limiter.Penalty{Duration: 30 * time.Second, MaxDuration: time.Hour, Decay: time.Hour}})
	subject := subjectOf("blocked-retry")
	key := keyOf(p, subject)
	now := e.serverNow()
	window := p.WindowMillis()
	end := (now/window + 1) * window
	// The block ends halfway to the window's end (whatever the hour's
	// minute the test runs at).
	until := now + max((end-now)/2, 1)
	full := stateOf(p, now, now/window, 2, 0)
	full.PenaltyUntilMs, full.PenaltyLevel, full.ExpiresAtMs = until, 1, until+time.Hour.Milliseconds()

	r := checkParity(t, e, p, key, full, 1)
	if r.Status != algorithm.StatusBlocked || r.RetryAfterMs != end-r.EffectiveNowMs || r.ResetAtMs != end ||
		r.BlockLeftMs != until-r.EffectiveNowMs || r.BlockLeftMs >= r.RetryAfterMs {
		t.Fatalf("full window, shorter block: %+v, want BLOCKED until the window's end %d, the block's end %d", r, end, until)
	}
	// Through the store: the decision's retry is the window's, its block
	// the shorter one.
	e.seed(key, full)
	d := e.evaluate(p, subject, 1).Decision
	if !d.Blocked || d.BlockedFor <= 0 || d.BlockedFor >= d.RetryAfter || !d.ResetAt.Equal(time.UnixMilli(end)) {
		t.Fatalf("store decision %+v, want blocked for less than its retry, reset at %d", d, end)
	}

	room := full
	room.Level = 0
	if r := checkParity(t, e, p, key, room, 1); r.Status != algorithm.StatusBlocked || r.RetryAfterMs != until-r.EffectiveNowMs ||
		r.BlockLeftMs != r.RetryAfterMs {
		t.Fatalf("window with room: %+v, want BLOCKED until the block's end %d", r, until)
	}
}
