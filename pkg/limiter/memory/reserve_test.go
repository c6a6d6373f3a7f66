package memory

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// TestReservationsHeld: a reserving entry's reservations are held beside
// its slot, and go with the entry; a new reserving subject with no room
// is refused for capacity, never decided by a sketch (which holds no
// reservations).
func TestReservationsHeld(t *testing.T) {
	clock := &stepClock{t: time.UnixMilli(1_700_000_000_000)}
	s, err := New(Config{Clock: clock, Shards: 1, MaxEntries: 8})
	if err != nil {
		t.Fatal(err)
	}
	p := newPolicy(t, limiter.PolicySpec{ID: "budget", Algorithm: limiter.FixedWindow,
		Params: limiter.FixedWindowParams{Limit: 100, Window: time.Minute}, Reserve: limiter.Reserve{TTL: time.Hour}})
	subject := func(i uint64) limiter.SubjectDigest {
		var d limiter.SubjectDigest
		binary.LittleEndian.PutUint64(d[8:], i)
		return d
	}
	out := make([]limiter.Outcome, 1)
	for i := range uint64(4) { // the policy's share of a shard of 8
		s.Evaluate(context.Background(), []limiter.Request{{Policy: p, Subject: subject(i), Cost: 1}}, out)
		if !out[0].Decision.Consumed || out[0].Decision.HoldAt.IsZero() {
			t.Fatalf("reserve %d: %+v", i, out[0])
		}
	}
	if n := len(s.shards[0].logs); n != 4 {
		t.Fatalf("%d reservation sets held, want 4", n)
	}
	s.Evaluate(context.Background(), []limiter.Request{{Policy: p, Subject: subject(9), Cost: 1}}, out)
	if out[0].Kind != limiter.Unavailable || out[0].Category != limiter.CategoryCapacity || s.Sketches() != 0 {
		t.Fatalf("a reserve with no room: %+v, %d sketches", out[0], s.Sketches())
	}
	clock.t = clock.t.Add(2 * time.Hour)
	if s.SweepExpired() != 4 || len(s.shards[0].logs) != 0 {
		t.Fatalf("after the sweep: %d entries, %d reservation sets; want none", s.Len(), len(s.shards[0].logs))
	}
}
