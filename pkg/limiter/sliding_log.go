package limiter

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"
)

// SlidingLogParams: at most Limit units in the trailing Window, counted
// exactly from a log of the admitted hits.
type SlidingLogParams struct {
	Limit  int64         // 0..MaxSlidingLogLimit
	Window time.Duration // whole milliseconds, >= 1ms
}

// MaxSlidingLogLimit bounds a sliding log's limit, and so its log: a log
// holds at most one entry per admitted unit in the window, and every
// request reads the whole log (docs/algorithms.md gives the Redis time of a
// full log).
const MaxSlidingLogLimit = 1000

// SlidingLogEntryBytes is the size of one hit in State.Log: its effective
// time in ms as a big-endian IEEE-754 double (exact below 2^53), then its
// cost as a big-endian uint16 — the Lua programs' struct.pack('>dH').
const SlidingLogEntryBytes = 10

var slidingLogRules = algorithmRules{
	name:        "sliding_log",
	step:        slidingLog,
	certainty:   Certain,
	denialsHold: true,
	params: func(r Rate) Params {
		return SlidingLogParams{Limit: r.Limit, Window: r.Window}
	},
	sketch: sketchRules{windows: 2},
}

func (SlidingLogParams) algorithm() Algorithm { return SlidingLog }

func (prm SlidingLogParams) divided(n int64) Params {
	prm.Limit = share(prm.Limit, n)
	return prm
}

// apply: the window rule (applyWindow) with the limit at most
// MaxSlidingLogLimit.
func (prm SlidingLogParams) apply(p *Policy) error {
	if prm.Limit > MaxSlidingLogLimit {
		return &FieldError{Field: "limit", Reason: fmt.Sprintf("must be at most %d for sliding_log (every request reads the whole log)", MaxSlidingLogLimit)}
	}
	return applyWindow(p, prm.Limit, prm.Window)
}

// AppendSlidingLogEntry appends one hit of cost units at atMs to a packed
// log (State.Log). atMs must be in [0, 2^53-1], cost in [1, 65535].
func AppendSlidingLogEntry(dst []byte, atMs, cost int64) []byte {
	dst = binary.BigEndian.AppendUint64(dst, math.Float64bits(float64(atMs)))
	return binary.BigEndian.AppendUint16(dst, uint16(cost))
}

// logEntry returns hit i of a packed log.
func logEntry(log string, i int) (atMs, cost int64) {
	b := log[i*SlidingLogEntryBytes : (i+1)*SlidingLogEntryBytes]
	bits := uint64(b[0])<<56 | uint64(b[1])<<48 | uint64(b[2])<<40 | uint64(b[3])<<32 |
		uint64(b[4])<<24 | uint64(b[5])<<16 | uint64(b[6])<<8 | uint64(b[7])
	return int64(math.Float64frombits(bits)), int64(b[8])<<8 | int64(b[9])
}

// validLog reports whether st's log can be ours (Check refuses another as
// STATE_INCOMPATIBLE, as load.lua does): whole entries, at most
// MaxSlidingLogLimit of them, each a time that is an integer in [0, 2^53-1]
// not before the previous one and not after the state's last-observed time
// (a hit is logged at the effective time, which becomes the last-observed
// time), and a cost of at least 1. Other algorithms' states hold no log.
func validLog(st State) bool {
	if st.Algorithm != SlidingLog {
		return st.Log == ""
	}
	n := len(st.Log) / SlidingLogEntryBytes
	if len(st.Log)%SlidingLogEntryBytes != 0 || n > MaxSlidingLogLimit {
		return false
	}
	prev := 0.0
	for i := range n {
		b := st.Log[i*SlidingLogEntryBytes:]
		t := math.Float64frombits(binary.BigEndian.Uint64([]byte(b[:8])))
		if !(t >= prev && t <= float64(st.LastObservedMs)) || t != math.Trunc(t) || b[8]|b[9] == 0 {
			return false
		}
		prev = t
	}
	return true
}

// slidingLogHits returns the hits st holds, oldest first, as (time, cost)
// pairs: its log, or, for a state without one (the memory store's overflow
// sketch, which keeps only counts per epoch-aligned window), State.Carry
// units at the last ms of window Epoch-1 and State.Level units at the last
// ms of window Epoch not after now: the latest each could have been taken,
// so that they stay in the window at least as long as the real hits.
func slidingLogHits(st State, now int64, p *Policy, buf []int64) []int64 {
	if !st.Exists {
		return buf
	}
	if st.Log != "" {
		for i := range len(st.Log) / SlidingLogEntryBytes {
			t, c := logEntry(st.Log, i)
			buf = append(buf, t, c)
		}
		return buf
	}
	w := p.windowMs
	if st.Carry > 0 {
		buf = append(buf, st.Epoch*w-1, st.Carry)
	}
	if st.Level > 0 {
		buf = append(buf, min(now, (st.Epoch+1)*w-1), st.Level)
	}
	return buf
}

// slidingLog: the hits of State.Log in (now - window, now] count exactly;
// a request of cost c is admitted iff their sum plus c is at most the limit.
// An admitted request writes the log pruned to the window with the hit
// appended (merged into the last entry when it has the same ms); Epoch is
// now's window id, Level the units of the written log in that window,
// Carry the rest (window Epoch-1: the window is one window long). Retry:
// when the oldest hits have left so that c fits; reset: when the newest
// hit leaves.
func slidingLog(st State, now int64, p *Policy, cost int64) step {
	limit, w := p.limit, p.windowMs
	var arr [64]int64
	hits := slidingLogHits(st, now, p, arr[:0])
	// first: the first hit still in the window; used: their units.
	first, used := len(hits), int64(0)
	for i := 0; i < len(hits); i += 2 {
		if hits[i] > now-w {
			if first == len(hits) {
				first = i
			}
			used += hits[i+1]
		}
	}
	resetBefore := now
	if first < len(hits) {
		resetBefore = hits[len(hits)-2] + w
	}
	s := step{allowed: cost <= limit-used}
	if !s.allowed {
		s.remaining, s.resetAt = max(0, limit-used), resetBefore
		// The hits leave oldest first: the first time the rest leave room.
		s.retryAfter = max(1, resetBefore-now)
		freed := int64(0)
		for i := first; i < len(hits); i += 2 {
			freed += hits[i+1]
			if used-freed <= limit-cost {
				s.retryAfter = hits[i] + w - now
				break
			}
		}
		return s
	}
	s.remainingBefore, s.resetAtBefore = limit-used, resetBefore
	epoch := now / w
	log := make([]byte, 0, len(hits)/2*SlidingLogEntryBytes+SlidingLogEntryBytes)
	var level, carry int64
	newest := cost
	for i := first; i < len(hits); i += 2 {
		t, c := hits[i], hits[i+1]
		if i == len(hits)-2 && t == now {
			newest += c // the same ms: one entry
			break
		}
		log = AppendSlidingLogEntry(log, t, c)
		if t/w >= epoch {
			level += c
		} else {
			carry += c
		}
	}
	log = AppendSlidingLogEntry(log, now, newest)
	level += newest
	s.epoch, s.level, s.carry, s.log = epoch, level, carry, string(log)
	s.remaining, s.resetAt = limit-used-cost, now+w
	s.ttl = w + p.CleanupGraceMillis()
	return s
}
