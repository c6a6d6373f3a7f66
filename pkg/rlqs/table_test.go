package rlqs

import (
	"testing"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

// TestAdmittedBefore: the part of a report admitted before a window's
// boundary, in proportion to time while the rates the proxy held are not
// known, else to what it could admit on either side, never more than it
// was asked.
func TestAdmittedBefore(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	held := &typev3.RateLimitStrategy{}
	cases := []struct {
		name            string
		sub             subscription
		b, from, to     time.Time
		allowed, denied int64
		want            int64
	}{
		{"no boundary", subscription{}, time.Time{}, at(0), at(1000), 100, 0, 0},
		{"no start", subscription{}, at(500), time.Time{}, at(1000), 100, 0, 0},
		{"boundary before the report", subscription{}, at(0), at(0), at(1000), 100, 0, 0},
		{"boundary after the report", subscription{}, at(1000), at(0), at(1000), 100, 0, 100},
		{"by time, rates unknown", subscription{}, at(750), at(0), at(1000), 100, 0, 75},
		{"by rate: 300/s before, 100/s after", subscription{sent: held, prevRate: 300_000, sentRate: 100_000, sentAt: at(500)},
			at(500), at(0), at(1000), 200, 200, 150},
		{"by rate, capped by what was asked", subscription{sent: held, prevRate: 900_000, sentRate: 100_000, sentAt: at(500)},
			at(500), at(0), at(1000), 150, 50, 100},
		{"same rate either side: by time", subscription{sent: held, prevRate: 100_000, sentRate: 100_000, sentAt: at(200)},
			at(500), at(0), at(1000), 100, 0, 50},
		{"blanket held: by time", subscription{sent: held, prevRate: unknownDemand, sentRate: 100_000, sentAt: at(500)},
			at(250), at(0), at(1000), 100, 0, 25},
	}
	for _, c := range cases {
		if got := c.sub.admittedBefore(c.b, c.from, c.to, c.allowed, c.denied); got != c.want {
			t.Errorf("%s: %d admitted before, want %d", c.name, got, c.want)
		}
	}
}
