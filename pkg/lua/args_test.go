package lua

import (
	"encoding/binary"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/algorithm"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/calendar"
)

func TestAppendBatchPacked(t *testing.T) {
	fw := mustPolicy(t, limiter.PolicySpec{ID: "api.users", Algorithm: limiter.FixedWindow, FailureMode: limiter.FailOpen,
		Params: limiter.FixedWindowParams{Limit: 10, Window: time.Minute}})
	tb := mustPolicy(t, limiter.PolicySpec{ID: "tb", Revision: 3, Algorithm: limiter.TokenBucket, MaxCost: 5,
		Params: limiter.TokenBucketParams{Capacity: 100, RefillAmount: 10, RefillPeriod: 4 * time.Second}})
	decode := func(b []byte) string {
		if len(b) != batchPacked {
			t.Fatalf("packed %q", b)
		}
		out := fmt.Sprintf("%d %d", b[0], b[1])
		for i := range 7 {
			out += fmt.Sprintf(" %v", math.Float64frombits(binary.BigEndian.Uint64(b[2+8*i:])))
		}
		return out
	}
	// Flags: the role in bits 0-2, FlagFailOpen (8) for a fail-open policy.
	if got := decode(AppendBatchPacked(nil, fw, 2, limiter.RoleQuota, time.Now().UnixMilli())); got != "1 10 1 10 60000 0 1000 2000 2" {
		t.Errorf("fixed window: %q", got)
	}
	if got := decode(AppendBatchPacked(nil, fw, 1, limiter.RoleProbe, time.Now().UnixMilli())); got != "1 12 1 10 60000 0 1000 2000 1" {
		t.Errorf("fixed window probe: %q", got)
	}
	if got := decode(AppendBatchPacked(nil, tb, 1, limiter.RoleQuotaProbe, time.Now().UnixMilli())); got != "3 5 3 100 1 400 1000 2000 1" {
		t.Errorf("token bucket quota probe: %q", got)
	}
	if got := decode(AppendBatchPacked(nil, tb, 1, limiter.RoleCheck, time.Now().UnixMilli())); got != "3 3 3 100 1 400 1000 2000 1" {
		t.Errorf("token bucket: %q", got)
	}
	// A refund's argument: the batch's, as an ordinary key.
	if got := decode(AppendRefundPacked(nil, tb, 2, 1234)); got != "3 0 3 100 1 400 1000 2000 2" {
		t.Errorf("refund: %q", got)
	}
	if r := AppendRefundTime([]byte("x"), 1234); len(r) != 9 || math.Float64frombits(binary.BigEndian.Uint64(r[1:])) != 1234 {
		t.Errorf("refund time: %q", r)
	}
	g := AppendGroupEntry([]byte("x"), 3, limiter.MaxSafeInteger)
	if len(g) != 1+groupEntry || binary.BigEndian.Uint16(g[1:]) != 3 || math.Float64frombits(binary.BigEndian.Uint64(g[3:])) != float64(limiter.MaxSafeInteger) {
		t.Errorf("group entry: %q", g)
	}
}

// TestAppendBatchPackedPenalty: a policy with a penalty box sets flag bit 16
// and appends struct.pack('>ddd') of its three durations in ms after the
// fixed numbers; its BLOCKED replies parse, and are refused for a policy
// without a penalty or with units left.
func TestAppendBatchPackedPenalty(t *testing.T) {
	p := mustPolicy(t, limiter.PolicySpec{ID: "pen", Algorithm: limiter.FixedWindow, FailureMode: limiter.FailOpen,
		Params:  limiter.FixedWindowParams{Limit: 10, Window: time.Minute},
		Penalty: limiter.Penalty{Duration: 10 * time.Minute, MaxDuration: 24 * time.Hour, Decay: time.Hour}})
	b := AppendBatchPacked(nil, p, 1, limiter.RoleShadow, time.Now().UnixMilli())
	if len(b) != batchPacked+penaltyPacked || BatchPackedLen(p) != len(b) {
		t.Fatalf("packed %d bytes, want %d", len(b), batchPacked+penaltyPacked)
	}
	if b[1] != byte(limiter.RoleShadow)|flagFailOpen|flagPenalty {
		t.Fatalf("flags %d, want shadow | fail open | penalty", b[1])
	}
	var got string
	for i := range 3 {
		got += fmt.Sprintf(" %v", math.Float64frombits(binary.BigEndian.Uint64(b[batchPacked+8*i:])))
	}
	if got != " 600000 8.64e+07 3.6e+06" {
		t.Fatalf("extension %q", got)
	}
	plain := mustPolicy(t, limiter.PolicySpec{ID: "plain", Algorithm: limiter.FixedWindow,
		Params: limiter.FixedWindowParams{Limit: 10, Window: time.Minute}})
	blocked := algorithm.Reply{Status: algorithm.StatusBlocked, ServerNowMs: 1000, EffectiveNowMs: 1000, Limit: 10, RetryAfterMs: 5, ResetAtMs: 60000}
	if err := check(p, blocked); err != nil {
		t.Errorf("BLOCKED: %v", err)
	}
	if err := check(plain, blocked); err == nil {
		t.Error("BLOCKED accepted for a policy without a penalty")
	}
	blocked.Remaining = 1
	if err := check(p, blocked); err == nil {
		t.Error("BLOCKED accepted with units left")
	}
}

// TestCalendarArgs: a calendar window's packed numbers carry the calendar
// flag and the boundaries of the three periods around the given time, and
// a refund's those around the batch's effective now. Other policies are
// packed without the extension.
func TestCalendarArgs(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	cal := mustPolicy(t, limiter.PolicySpec{ID: "cal", Algorithm: limiter.FixedWindow, FailureMode: limiter.FailOpen,
		Params: limiter.FixedWindowParams{Limit: 10, Window: 24 * time.Hour, Calendar: &calendar.Calendar{Unit: calendar.Day, Location: berlin}}})
	// 2026-03-29 is the 23-hour day of the spring change.
	at := time.Date(2026, 3, 29, 12, 0, 0, 0, berlin).UnixMilli()
	b := AppendBatchPacked(nil, cal, 1, limiter.RoleShadow, at)
	if len(b) != BatchPackedLen(cal) || BatchPackedLen(cal) != batchPacked+calendarPacked {
		t.Fatalf("packed %q", b)
	}
	if b[1] != byte(limiter.RoleShadow)+flagFailOpen+flagCalendar {
		t.Errorf("flags %d", b[1])
	}
	var got [4]int64
	for i := range got {
		got[i] = int64(math.Float64frombits(binary.BigEndian.Uint64(b[batchPacked+8*i:])))
	}
	want := [4]int64{
		time.Date(2026, 3, 28, 0, 0, 0, 0, berlin).UnixMilli(),
		time.Date(2026, 3, 29, 0, 0, 0, 0, berlin).UnixMilli(),
		time.Date(2026, 3, 30, 0, 0, 0, 0, berlin).UnixMilli(),
		time.Date(2026, 3, 31, 0, 0, 0, 0, berlin).UnixMilli(),
	}
	if got != want || got[2]-got[1] != 23*3600*1000 {
		t.Errorf("boundaries %v, want %v", got, want)
	}
	// Appended after what dst holds, the same bytes.
	if p := AppendBatchPacked([]byte("xy"), cal, 1, limiter.RoleShadow, at); string(p[2:]) != string(b) {
		t.Errorf("AppendBatchPacked after xy differs")
	}
	// A refund's argument: the periods around the batch's effective now.
	if r := AppendRefundPacked(nil, cal, 1, at); string(r[2:]) != string(b[2:]) || r[1] != flagFailOpen+flagCalendar {
		t.Errorf("refund argument %q", r)
	}
	plain := mustPolicy(t, limiter.PolicySpec{ID: "fw", Algorithm: limiter.FixedWindow, Params: limiter.FixedWindowParams{Limit: 1, Window: time.Second}})
	if p := AppendBatchPacked(nil, plain, 1, limiter.RoleOrdinary, at); len(p) != batchPacked || p[1] != 0 || BatchPackedLen(plain) != batchPacked {
		t.Errorf("a plain window: %d bytes, flags %d", len(p), p[1])
	}
}

// TestAppendBatchPackedCharge: a policy that charges always sets flagCharge,
// with its cost up to the ceiling; no extension follows.
func TestAppendBatchPackedCharge(t *testing.T) {
	p := mustPolicy(t, limiter.PolicySpec{ID: "budget", Algorithm: limiter.TokenBucket, Charge: limiter.ChargeAlways,
		Params: limiter.TokenBucketParams{Capacity: 10, RefillAmount: 10, RefillPeriod: time.Hour}})
	b := AppendBatchPacked(nil, p, 20, limiter.RoleOrdinary, time.Now().UnixMilli())
	if len(b) != batchPacked || b[1] != flagCharge {
		t.Fatalf("packed %d bytes, flags %d; want %d bytes, flags %d", len(b), b[1], batchPacked, flagCharge)
	}
	if got := math.Float64frombits(binary.BigEndian.Uint64(b[batchPacked-8:])); got != 20 {
		t.Fatalf("cost %v, want 20", got)
	}
}
