package redistest

import (
	"encoding/binary"
	"math"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/algorithm"
)

// TestStateLayout: AppendState and ParseState are each other's inverse for
// a state of every algorithm, with and without a penalty box, a sliding
// log's log after the numbers; a state without either is StateLen bytes
// (Redis keeps a string of up to 44 bytes in the key's own allocation),
// with a penalty box
// StateLen+StatePenaltyLen; every malformed value is refused.
func TestStateLayout(t *testing.T) {
	policies := statePolicies(t)
	for _, p := range policies {
		st := algorithm.State{Exists: true, Schema: algorithm.StateSchema, Algorithm: p.Algorithm(), PolicyID: p.ID(),
			Revision: p.Revision(), LastObservedMs: 1_700_000_000_123, Epoch: 28_333_333, Level: 3, Carry: 1}
		if p.Algorithm() == limiter.SlidingLog {
			st.Log = string(algorithm.AppendSlidingLogEntry(nil, 1_700_000_000_100, 2))
		}
		for _, penalty := range []bool{false, true} {
			s := st
			want := StateLen + len(s.Log)
			if penalty {
				s.PenaltyUntilMs, s.PenaltyLevel = 1_700_000_060_000, 3
				want += StatePenaltyLen
			}
			v := AppendState(nil, s)
			if len(v) != want || !penalty && s.Log == "" && len(v) > 44 {
				t.Fatalf("%s penalty %v: %d bytes, want %d", p.ID(), penalty, len(v), want)
			}
			got, ok := ParseState(v, p)
			if !ok || got != s {
				t.Fatalf("%s penalty %v: ParseState = %+v %v, want %+v", p.ID(), penalty, got, ok, s)
			}
		}
	}
	fw, sw := policies[0], policies[1]
	good := AppendState(nil, algorithm.State{Algorithm: limiter.FixedWindow, LastObservedMs: 1000, Epoch: 1, Level: 1})
	set := func(v []byte, field int, f float64) []byte {
		c := append([]byte(nil), v...)
		binary.BigEndian.PutUint64(c[1+8*field:], math.Float64bits(f))
		return c
	}
	withPenalty := AppendState(nil, algorithm.State{Algorithm: limiter.FixedWindow, LastObservedMs: 1000, Epoch: 1, Level: 1,
		PenaltyUntilMs: 5000, PenaltyLevel: 2})
	for name, v := range map[string][]byte{
		"empty":              nil,
		"short":              good[:StateLen-1],
		"trailing":           append(append([]byte(nil), good...), 'x'),
		"other algorithm":    append([]byte{byte(limiter.TokenBucket)}, good[1:]...),
		"unknown bit":        append([]byte{good[0] | 128}, good[1:]...),
		"penalty bit, short": append([]byte{good[0] | StatePenalty}, good[1:]...),
		"NaN":                set(good, 2, math.NaN()),
		"fraction":           set(good, 2, 1.5),
		"negative":           set(good, 0, -1),
		"2^53":               set(good, 1, 1<<53),
		"penalty level 0":    set(withPenalty, 5, 0),
		"penalty level 100":  set(withPenalty, 5, 100),
		"penalty until 0":    set(withPenalty, 4, 0),
	} {
		if st, ok := ParseState(v, fw); ok {
			t.Errorf("%s: ParseState = %+v, want refused", name, st)
		}
	}
	over := AppendState(nil, algorithm.State{Algorithm: limiter.SlidingWindow, Level: limiter.MaxSafeInteger/limiter.SlidingScale + 1})
	if _, ok := ParseState(over, sw); ok {
		t.Error("a sliding count above any sliding limit was read")
	}
}

// statePolicies is a policy of each rate algorithm, and one with a penalty
// box.
func statePolicies(t *testing.T) []*limiter.Policy {
	var out []*limiter.Policy
	for _, spec := range []limiter.PolicySpec{
		{ID: "fw", Algorithm: limiter.FixedWindow, Params: limiter.FixedWindowParams{Limit: 10, Window: time.Second}},
		{ID: "sw", Algorithm: limiter.SlidingWindow, Params: limiter.SlidingWindowParams{Limit: 5, Window: time.Minute}},
		{ID: "tb", Algorithm: limiter.TokenBucket, Params: limiter.TokenBucketParams{Capacity: 10, RefillAmount: 1, RefillPeriod: time.Second}},
		{ID: "gc", Algorithm: limiter.GCRA, Params: limiter.GCRAParams{Burst: 4, Limit: 2, Period: time.Second}},
		{ID: "sl", Algorithm: limiter.SlidingLog, Params: limiter.SlidingLogParams{Limit: 3, Window: time.Second}},
		{ID: "pen", Algorithm: limiter.TokenBucket, Penalty: limiter.Penalty{Duration: time.Minute},
			Params: limiter.TokenBucketParams{Capacity: 3, RefillAmount: 1, RefillPeriod: time.Second}},
	} {
		p, err := limiter.NewPolicy(spec)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

// TestStateReserved: a reserving policy's state keeps its reservations
// after the numbers (StateReserved, a count, 16 bytes each), read back as
// written; a policy that does not reserve, a count of 0 or one that does
// not match the length is refused; no reservations, no section.
func TestStateReserved(t *testing.T) {
	p, err := limiter.NewPolicy(limiter.PolicySpec{ID: "rv", Algorithm: limiter.FixedWindow,
		Params: limiter.FixedWindowParams{Limit: 10, Window: time.Second}, Reserve: limiter.Reserve{TTL: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	entry := func(id, amount float64) string {
		b := binary.BigEndian.AppendUint64(nil, math.Float64bits(id))
		return string(binary.BigEndian.AppendUint64(b, math.Float64bits(amount)))
	}
	st := algorithm.State{Exists: true, Schema: algorithm.StateSchema, Algorithm: p.Algorithm(), PolicyID: p.ID(),
		Revision: p.Revision(), LastObservedMs: 1000, Epoch: 1, Level: 3, Reserved: entry(61_000, 2) + entry(61_001, 0)}
	v := AppendState(nil, st)
	if len(v) != StateLen+2+32 || v[0] != 1|StateReserved {
		t.Fatalf("%x: %d bytes, head %d", v, len(v), v[0])
	}
	if got, ok := ParseState(v, p); !ok || got != st {
		t.Fatalf("ParseState = %+v %v, want %+v", got, ok, st)
	}
	if id, amount := Reservation(st.Reserved, 1); id != 61_001 || amount != 0 {
		t.Fatalf("Reservation(1) = %d, %d", id, amount)
	}
	none := st
	none.Reserved = ""
	if v := AppendState(nil, none); len(v) != StateLen || v[0] != 1 {
		t.Fatalf("no reservations: %x", v)
	}
	count0 := append(append([]byte(nil), v[:StateLen]...), 0, 0)
	short := v[:len(v)-1]
	plain := statePolicies(t)[0]
	for name, c := range map[string]struct {
		v []byte
		p *limiter.Policy
	}{"count 0": {count0, p}, "short": {short, p}, "not reserving": {v, plain}} {
		if got, ok := ParseState(c.v, c.p); ok {
			t.Errorf("%s: ParseState = %+v, want refused", name, got)
		}
	}
}
