package lua

import (
	"encoding/binary"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

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
	if len(a) != BatchArgs || len(a[1]) != PackedLen(cal) || PackedLen(cal) != BatchPacked+CalendarPacked {
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
	if p := AppendBatchPackedAt(nil, plain, 1, limiter.RoleOrdinary, at); len(p) != BatchPacked || p[1] != 0 || PackedLen(plain) != BatchPacked {
		t.Errorf("a plain window: %d bytes, flags %d", len(p), p[1])
	}
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }
