package rls

import (
	"context"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter/deadline"
)

// Bounds of the answer reserve: the part of the caller's deadline kept back
// from the store so that a slow store still leaves time to answer by the
// policy's failure mode before Envoy gives up.
const (
	MinAnswerReserve = 2 * time.Millisecond
	MaxAnswerReserve = 50 * time.Millisecond
	// MaxStoreWait bounds the store's deadline however far the caller's is
	// (the Redis store's own timeout is at most a minute too). It also
	// bounds the memory of the deadline wheel: one entry per millisecond
	// still ahead.
	MaxStoreWait = time.Minute
)

// storeContext gives the store the caller's deadline less a reserve of a
// fifth of the time left, clamped to [MinAnswerReserve, MaxAnswerReserve].
// Without it a hung store would use the whole deadline, the answer would
// arrive after Envoy had given up, and Envoy's own failure_mode_deny would
// decide instead of the policy's failure mode. The deadline is at most
// MaxStoreWait away and comes from w: it fires up to one tick (1 ms) before
// the one reported, which only widens the reserve.
func storeContext(ctx context.Context, w *deadline.Wheel, now time.Time) context.Context {
	dl, ok := ctx.Deadline()
	if !ok {
		return ctx
	}
	reserve := min(max(dl.Sub(now)/5, MinAnswerReserve), MaxAnswerReserve)
	sdl := dl.Add(-reserve)
	if limit := now.Add(MaxStoreWait); sdl.After(limit) {
		sdl = limit
	}
	return w.Context(ctx, now, sdl)
}
