package memory

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// TestSlidingLogKept: the store keeps a sliding log's hits between calls
// (its decisions are Apply's on the state it wrote, request after request,
// alone and in batches), and an entry's log goes with the entry.
func TestSlidingLogKept(t *testing.T) {
	const start = 1_700_000_000_000
	clock := limitertest.NewClock(time.UnixMilli(start))
	s, err := New(Config{Clock: clock, Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	p := limitertest.Policy(t, limiter.PolicySpec{ID: "log", Algorithm: limiter.SlidingLog,
		Params: limiter.SlidingLogParams{Limit: 3, Window: time.Minute}})
	other := limitertest.Policy(t, limiter.PolicySpec{ID: "other", Algorithm: limiter.FixedWindow,
		Params: limiter.FixedWindowParams{Limit: 100, Window: time.Hour}})
	var d limiter.SubjectDigest
	binary.LittleEndian.PutUint64(d[:], 42)
	var st limiter.State
	ctx := context.Background()
	// 3 hits 10 s apart fill it; each later second admits once the oldest
	// hit has left: an estimate from window counts would not.
	for i, dt := range []time.Duration{0, 10 * time.Second, 10 * time.Second, 10 * time.Second, 30 * time.Second, time.Second, 9 * time.Second, 10 * time.Second} {
		now := clock.Advance(dt).UnixMilli()
		next, want, write := limiter.Apply(st, now, p, 1)
		batch := []limiter.Request{{Policy: p, Subject: d, Cost: 1}}
		if i%2 == 1 {
			batch = append(batch, limiter.Request{Policy: other, Subject: d, Cost: 1})
		}
		out := make([]limiter.Outcome, len(batch))
		s.Evaluate(ctx, batch, out)
		if o := out[0]; o.Kind != limiter.Evaluated || o.Decision.Allowed != write || o.Decision.Remaining != want.Remaining ||
			o.Decision.RetryAfter != time.Duration(want.RetryAfterMs)*time.Millisecond {
			t.Fatalf("request %d at +%dms: %+v, want %+v", i, now-start, o, want)
		}
		if write {
			st = next
		}
	}
	if n := len(s.shards[0].logs); n != 1 {
		t.Fatalf("%d logs held, want 1", n)
	}
	clock.Advance(2 * time.Hour)
	if s.SweepExpired() != 2 || len(s.shards[0].logs) != 0 {
		t.Fatalf("after the sweep: %d entries, %d logs; want none", s.Len(), len(s.shards[0].logs))
	}
}
