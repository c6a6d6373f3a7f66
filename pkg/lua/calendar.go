package lua

import (
	"encoding/binary"
	"math"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// CalendarPacked is the length of the calendar extension of a key's packed
// numbers: struct.pack('>dddd'), the boundaries b0 < b1 < b2 < b3 (Unix
// ms) of three consecutive calendar periods [b0, b1), [b1, b2), [b2, b3):
// the one before the period holding the sender's estimate of Redis's
// clock, that period, and the one after it (limiter.Calendar.Neighbours).
const CalendarPacked = 4 * 8

// PackedLen is the length of the packed numbers of one key of policy p
// (BatchPackedLen): BatchPacked, plus PenaltyPacked with a penalty box,
// plus CalendarPacked for a calendar window.
func PackedLen(p *limiter.Policy) int {
	return BatchPackedLen(p)
}

// AppendBatchArgsAt is AppendBatchArgs with a calendar window's periods
// around nowMs, the caller's estimate of Redis's clock (Unix ms).
func AppendBatchArgsAt(dst []string, p *limiter.Policy, cost int64, role limiter.Role, nowMs int64) []string {
	var b [BatchPacked + PenaltyPacked + CalendarPacked]byte
	return append(dst, p.ID(), string(AppendBatchPackedAt(b[:0], p, cost, role, nowMs)))
}

// appendCalendar completes the packed numbers of p in dst, whose fixed
// part (with the penalty extension, if any) is fixed: for a calendar window
// it sets fixed's calendar flag and appends the extension around nowMs
// (dst has room for it: PackedLen).
func appendCalendar(dst, fixed []byte, p *limiter.Policy, nowMs int64) []byte {
	c := p.Calendar()
	if c == nil {
		return dst
	}
	fixed[1] |= FlagCalendar
	for _, v := range c.Neighbours(nowMs) {
		dst = binary.BigEndian.AppendUint64(dst, math.Float64bits(float64(v)))
	}
	return dst
}

// refundWindow is the two window arguments of rate-refund-v1.lua for a
// cost taken at effectiveNowMs: limiter.Policy.AlgorithmArgs, or for a
// calendar window the end and the length in ms of the period holding
// effectiveNowMs.
func refundWindow(p *limiter.Policy, effectiveNowMs int64) (int64, int64) {
	if c := p.Calendar(); c != nil {
		start, end := c.Period(effectiveNowMs)
		return end, end - start
	}
	return p.AlgorithmArgs()
}

// wallNow is the wall clock in Unix ms for a calendar policy (0, unread,
// for any other).
func wallNow(p *limiter.Policy) int64 {
	if p.Calendar() == nil {
		return 0
	}
	return time.Now().UnixMilli()
}
