package lua

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

func TestAppendBatchArgs(t *testing.T) {
	fw := mustPolicy(t, limiter.PolicySpec{ID: "api.users", Algorithm: limiter.FixedWindow, FailureMode: limiter.FailOpen,
		Params: limiter.FixedWindowParams{Limit: 10, Window: time.Minute}})
	tb := mustPolicy(t, limiter.PolicySpec{ID: "tb", Revision: 3, Algorithm: limiter.TokenBucket, MaxCost: 5,
		Params: limiter.TokenBucketParams{Capacity: 100, RefillAmount: 10, RefillPeriod: 4 * time.Second}})
	decode := func(a []string) string {
		if len(a) != BatchArgs || len(a[1]) != BatchPacked {
			t.Fatalf("args %q", a)
		}
		b := []byte(a[1])
		out := fmt.Sprintf("%s %d %d", a[0], b[0], b[1])
		for i := range 7 {
			out += fmt.Sprintf(" %v", math.Float64frombits(binary.BigEndian.Uint64(b[2+8*i:])))
		}
		return out
	}
	// Flags: the role in bits 0-2, FlagFailOpen (8) for a fail-open policy.
	if got := decode(AppendBatchArgs(nil, fw, 2, limiter.RoleQuota)); got != "api.users 1 10 1 10 60000 0 1000 2000 2" {
		t.Errorf("fixed window: %q", got)
	}
	if got := decode(AppendBatchArgs(nil, fw, 1, limiter.RoleProbe)); got != "api.users 1 12 1 10 60000 0 1000 2000 1" {
		t.Errorf("fixed window probe: %q", got)
	}
	if got := decode(AppendBatchArgs(nil, tb, 1, limiter.RoleQuotaProbe)); got != "tb 3 5 3 100 1 400 1000 2000 1" {
		t.Errorf("token bucket quota probe: %q", got)
	}
	if got := decode(AppendBatchArgs(nil, tb, 1, limiter.RoleCheck)); got != "tb 3 3 3 100 1 400 1000 2000 1" {
		t.Errorf("token bucket: %q", got)
	}
	if got := strings.Join(AppendRefundArgs(nil, tb, 2, 1234), " "); got != "token_bucket tb 3 100 1 400 2 1234" {
		t.Errorf("refund: %q", got)
	}
	if n := len(AppendBatchArgs(nil, tb, 1, 0)); n != BatchArgs {
		t.Errorf("%d batch args", n)
	}
	if n := len(AppendRefundArgs(nil, tb, 1, 0)); n != RefundArgs {
		t.Errorf("%d refund args", n)
	}
	g := AppendGroupEntry([]byte("x"), 3, limiter.MaxSafeInteger)
	if len(g) != 1+GroupEntry || binary.BigEndian.Uint16(g[1:]) != 3 || math.Float64frombits(binary.BigEndian.Uint64(g[3:])) != float64(limiter.MaxSafeInteger) {
		t.Errorf("group entry: %q", g)
	}
}

// TestAppendBatchArgsPenalty: a policy with a penalty box sets flag bit 16
// and appends struct.pack('>ddd') of its three durations in ms after the
// fixed numbers; its BLOCKED replies parse, and are refused for a policy
// without a penalty or with units left.
func TestAppendBatchArgsPenalty(t *testing.T) {
	p := mustPolicy(t, limiter.PolicySpec{ID: "pen", Algorithm: limiter.FixedWindow, FailureMode: limiter.FailOpen,
		Params:  limiter.FixedWindowParams{Limit: 10, Window: time.Minute},
		Penalty: limiter.Penalty{Duration: 10 * time.Minute, MaxDuration: 24 * time.Hour, Decay: time.Hour}})
	a := AppendBatchArgs(nil, p, 1, limiter.RoleShadow)
	if len(a[1]) != BatchPacked+PenaltyPacked || BatchPackedLen(p) != len(a[1]) {
		t.Fatalf("packed %d bytes, want %d", len(a[1]), BatchPacked+PenaltyPacked)
	}
	b := []byte(a[1])
	if b[1] != byte(limiter.RoleShadow)|FlagFailOpen|FlagPenalty {
		t.Fatalf("flags %d, want shadow | fail open | penalty", b[1])
	}
	var got string
	for i := range 3 {
		got += fmt.Sprintf(" %v", math.Float64frombits(binary.BigEndian.Uint64(b[BatchPacked+8*i:])))
	}
	if got != " 600000 8.64e+07 3.6e+06" {
		t.Fatalf("extension %q", got)
	}
	plain := mustPolicy(t, limiter.PolicySpec{ID: "plain", Algorithm: limiter.FixedWindow,
		Params: limiter.FixedWindowParams{Limit: 10, Window: time.Minute}})
	blocked := limiter.Reply{Status: limiter.StatusBlocked, ServerNowMs: 1000, EffectiveNowMs: 1000, Limit: 10, RetryAfterMs: 5, ResetAtMs: 60000}
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
// flag and the boundaries of the three periods around the given time; its
// refund arguments are the end and length of the period of the batch's
// effective now. Other policies are packed as before.
func TestCalendarArgs(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	cal := mustPolicy(t, limiter.PolicySpec{ID: "cal", Algorithm: limiter.FixedWindow, FailureMode: limiter.FailOpen,
		Params: limiter.FixedWindowParams{Limit: 10, Window: 24 * time.Hour, Calendar: &limiter.Calendar{Unit: limiter.CalendarDay, Location: berlin}}})
	// 2026-03-29 is the 23-hour day of the spring change.
	at := time.Date(2026, 3, 29, 12, 0, 0, 0, berlin).UnixMilli()
	a := AppendBatchArgsAt(nil, cal, 1, limiter.RoleShadow, at)
	if len(a) != BatchArgs || len(a[1]) != BatchPackedLen(cal) || BatchPackedLen(cal) != BatchPacked+CalendarPacked {
		t.Fatalf("args %q", a)
	}
	b := []byte(a[1])
	if b[1] != byte(limiter.RoleShadow)+FlagFailOpen+FlagCalendar {
		t.Errorf("flags %d", b[1])
	}
	var got [4]int64
	for i := range got {
		got[i] = int64(math.Float64frombits(binary.BigEndian.Uint64(b[BatchPacked+8*i:])))
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
	// The pooled form appends the same bytes after what dst holds.
	if p := AppendBatchPackedAt([]byte("xy"), cal, 1, limiter.RoleShadow, at); string(p[2:]) != a[1] {
		t.Errorf("AppendBatchPackedAt differs from AppendBatchArgsAt")
	}
	if r := strings.Join(AppendRefundArgs(nil, cal, 2, at), " "); r != "fixed_window cal 1 10 "+itoa(want[2])+" 82800000 2 "+itoa(at) {
		t.Errorf("refund args %q", r)
	}
	plain := mustPolicy(t, limiter.PolicySpec{ID: "fw", Algorithm: limiter.FixedWindow, Params: limiter.FixedWindowParams{Limit: 1, Window: time.Second}})
	if p := AppendBatchPackedAt(nil, plain, 1, limiter.RoleOrdinary, at); len(p) != BatchPacked || p[1] != 0 || BatchPackedLen(plain) != BatchPacked {
		t.Errorf("a plain window: %d bytes, flags %d", len(p), p[1])
	}
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// TestAppendBatchArgsCharge: a policy that charges always sets FlagCharge,
// with its cost up to the ceiling; no extension follows.
func TestAppendBatchArgsCharge(t *testing.T) {
	p := mustPolicy(t, limiter.PolicySpec{ID: "budget", Algorithm: limiter.TokenBucket, Charge: limiter.ChargeAlways,
		Params: limiter.TokenBucketParams{Capacity: 10, RefillAmount: 10, RefillPeriod: time.Hour}})
	a := AppendBatchArgs(nil, p, 20, limiter.RoleOrdinary)
	if b := []byte(a[1]); len(b) != BatchPacked || b[1] != FlagCharge {
		t.Fatalf("packed %d bytes, flags %d; want %d bytes, flags %d", len(b), b[1], BatchPacked, FlagCharge)
	}
	if got := math.Float64frombits(binary.BigEndian.Uint64([]byte(a[1])[BatchPacked-8:])); got != 20 {
		t.Fatalf("cost %v, want 20", got)
	}
}
