package memory

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// stepClock is a clock the test moves (this in-package test cannot use
// internal/limitertest, whose store double imports this package).
type stepClock struct{ t time.Time }

func (c *stepClock) Now() time.Time { return c.t }

func newPolicy(t *testing.T, spec limiter.PolicySpec) *limiter.Policy {
	t.Helper()
	p, err := limiter.NewPolicy(spec)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSlidingLogHeld: a sliding log's hits are held beside its entry (the
// store suite's "sliding log over time" checks the decisions), and go with
// the entry.
func TestSlidingLogHeld(t *testing.T) {
	clock := &stepClock{t: time.UnixMilli(1_700_000_000_000)}
	s, err := New(Config{Clock: clock, Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	p := newPolicy(t, limiter.PolicySpec{ID: "log", Algorithm: limiter.SlidingLog,
		Params: limiter.SlidingLogParams{Limit: 3, Window: time.Minute}})
	other := newPolicy(t, limiter.PolicySpec{ID: "other", Algorithm: limiter.FixedWindow,
		Params: limiter.FixedWindowParams{Limit: 100, Window: time.Hour}})
	var d limiter.SubjectDigest
	binary.LittleEndian.PutUint64(d[:], 42)
	out := make([]limiter.Outcome, 2)
	for range 2 {
		s.Evaluate(context.Background(), []limiter.Request{{Policy: p, Subject: d, Cost: 1}, {Policy: other, Subject: d, Cost: 1}}, out)
		if !out[0].Decision.Consumed || !out[1].Decision.Consumed {
			t.Fatalf("%+v", out)
		}
	}
	if n := len(s.shards[0].logs); n != 1 {
		t.Fatalf("%d logs held, want 1", n)
	}
	clock.t = clock.t.Add(2 * time.Hour)
	if s.SweepExpired() != 2 || len(s.shards[0].logs) != 0 {
		t.Fatalf("after the sweep: %d entries, %d logs; want none", s.Len(), len(s.shards[0].logs))
	}
}
