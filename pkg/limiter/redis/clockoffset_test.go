package redis

import (
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// TestClockOffsetSteps: the offset estimate, step by step in local ms: the
// largest sample of the current and the previous window with samples; no
// estimate (so no deadline) before the first sample.
func TestClockOffsetSteps(t *testing.T) {
	const margin = int64(DeadlineMargin / time.Millisecond)
	var c clockOffset
	if _, ok := c.redisDeadline(5000); ok {
		t.Fatal("a deadline without any sample")
	}
	type step struct {
		local, server int64 // a sample, when local > 0
		want          int64 // the estimate afterwards
	}
	steps := []step{
		{local: 10_000, server: 10_500, want: 500},
		{local: 10_200, server: 10_650, want: 500},                   // a slower reply: lower
		{local: 10_300, server: 10_805, want: 505},                   // a faster one: tighter
		{local: 11_000, server: 11_400, want: 505},                   // new window; the previous stays
		{local: 12_100, server: 12_500, want: 400},                   // two windows on: the old one is gone
		{local: 12_200, server: 13_200, want: 1000},                  // Redis stepped forward: at once
		{local: 13_000, server: 12_950, want: 1000},                  // stepped back: the previous window stays
		{local: 14_000, server: 13_960, want: -40},                   // after one more window, followed
		{local: 13_500, server: 99_999, want: -40},                   // a late sample of an old window: dropped
		{local: 14_100, server: 14_100 + maxOffsetMs + 1, want: -40}, // beyond the trusted range: dropped
	}
	for i, s := range steps {
		c.sample(s.local, s.server)
		got, ok := c.estimate()
		if !ok || got != s.want {
			t.Fatalf("step %d: estimate %d %v, want %d", i, got, ok, s.want)
		}
		if d, ok := c.redisDeadline(20_000); !ok || d != 20_000+s.want-margin {
			t.Fatalf("step %d: deadline %d %v, want %d", i, d, ok, 20_000+s.want-margin)
		}
	}
	// The deadline sent is an integer in [1, 2^53-1].
	var low, high clockOffset
	low.sample(10_000, 0)
	if d, _ := low.redisDeadline(5_000); d != 1 {
		t.Errorf("a deadline before Redis's epoch: %d, want 1", d)
	}
	high.sample(10_000, 10_000+maxOffsetMs)
	if d, _ := high.redisDeadline(limiter.MaxSafeInteger); d != limiter.MaxSafeInteger {
		t.Errorf("a deadline past 2^53-1: %d", d)
	}
}

// TestLocalClock: local ms follow the monotonic clock from the wall clock
// at the base, floored.
func TestLocalClock(t *testing.T) {
	base := time.UnixMilli(1_000_000).Add(400 * time.Microsecond)
	l := newLocalClock(base)
	for _, c := range []struct {
		d    time.Duration
		want int64
	}{
		{0, 1_000_000},
		{599 * time.Microsecond, 1_000_000},
		{600 * time.Microsecond, 1_000_000},
		{time.Millisecond, 1_000_001},
		{-time.Microsecond, 999_999},
		{-time.Millisecond, 999_999},
		{-1001 * time.Microsecond, 999_998},
	} {
		if got := l.ms(base.Add(c.d)); got != c.want {
			t.Errorf("base%+v: %d, want %d", c.d, got, c.want)
		}
	}
}
