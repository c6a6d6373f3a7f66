package algorithm

import (
	"encoding/binary"
	"math"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

var slidingLogRules = rules{step: slidingLog, sketch: sketchRules{windows: 2}}

// SlidingLogEntryBytes is the size of one hit in State.Log: its effective
// time in ms as a big-endian IEEE-754 double (exact below 2^53), then its
// cost as a big-endian uint16 — the Lua programs' struct.pack('>dH').
const SlidingLogEntryBytes = 10

// AppendSlidingLogEntry appends one hit of cost units at atMs to a packed
// log (State.Log). atMs must be in [0, 2^53-1], cost in [1, 65535].
func AppendSlidingLogEntry(dst []byte, atMs, cost int64) []byte {
	dst = binary.BigEndian.AppendUint64(dst, math.Float64bits(float64(atMs)))
	return binary.BigEndian.AppendUint16(dst, uint16(cost))
}

// logTime returns the time of hit i of a packed log as stored.
func logTime(log string, i int) float64 {
	b := log[i*SlidingLogEntryBytes : i*SlidingLogEntryBytes+8]
	return math.Float64frombits(uint64(b[0])<<56 | uint64(b[1])<<48 | uint64(b[2])<<40 | uint64(b[3])<<32 |
		uint64(b[4])<<24 | uint64(b[5])<<16 | uint64(b[6])<<8 | uint64(b[7]))
}

// logEntry returns hit i of a packed log (validLog has checked its time is
// an integer in range).
func logEntry(log string, i int) (atMs, cost int64) {
	b := log[i*SlidingLogEntryBytes : (i+1)*SlidingLogEntryBytes]
	return int64(logTime(log, i)), int64(b[8])<<8 | int64(b[9])
}

// validLog reports whether st's log can be ours; Check refuses another as
// STATE_INCOMPATIBLE after the clock rule (where the Lua step, which checks
// the log as it reads it, finds it): whole entries, at most
// limiter.MaxSlidingLogLimit of them, each a time that is an integer not before the
// previous one (nor 0) and not after the state's last-observed time (a hit
// is logged at the effective time, which becomes the last-observed time),
// and a cost of at least 1; counts (Level, Carry) of at most
// MaxSlidingLogLimit, and, without a log, a window (Epoch) that starts
// below 2^53 ms. Other algorithms' states hold no log.
func validLog(st State, p *limiter.Policy) bool {
	if st.Algorithm != limiter.SlidingLog {
		return st.Log == ""
	}
	n := len(st.Log) / SlidingLogEntryBytes
	if len(st.Log)%SlidingLogEntryBytes != 0 || n > limiter.MaxSlidingLogLimit ||
		st.Level < 0 || st.Level > limiter.MaxSlidingLogLimit || st.Carry < 0 || st.Carry > limiter.MaxSlidingLogLimit {
		return false
	}
	if n == 0 {
		return st.Epoch >= 0 && st.Epoch <= limiter.MaxSafeInteger/p.WindowMillis()
	}
	prev := 0.0
	for i := range n {
		ti, c := logEntry(st.Log, i)
		t := logTime(st.Log, i)
		if !(t >= prev && t <= float64(st.LastObservedMs)) || float64(ti) != t || c == 0 {
			return false
		}
		prev = t
	}
	return true
}

// slidingLogOf returns the log st holds: its log, or, for a state without
// one (the memory store's overflow sketch, which keeps only counts per
// epoch-aligned window), State.Carry units at the last ms of window Epoch-1
// and State.Level units at the last ms of window Epoch, neither after now:
// the latest each could have been taken, so that they stay in the window
// at least as long as the real hits.
func slidingLogOf(st State, now int64, p *limiter.Policy) string {
	if !st.Exists || st.Log != "" {
		return st.Log
	}
	w := p.WindowMillis()
	var b []byte
	if st.Carry > 0 {
		// (Not before 0: a log's times are not negative.)
		b = AppendSlidingLogEntry(b, max(0, min(now, st.Epoch*w-1)), st.Carry)
	}
	if st.Level > 0 {
		b = AppendSlidingLogEntry(b, min(now, (st.Epoch+1)*w-1), st.Level)
	}
	return string(b)
}

// slidingLog: the hits of State.Log in (now - window, now] count exactly;
// a request of cost c is admitted iff their sum plus c is at most the limit.
// An admitted request writes the log pruned to the window with the hit
// appended (merged into the last entry when it has the same ms); Epoch is
// now's window id, Level the units of the written log in that window,
// Carry the rest (window Epoch-1: the window is one window long). Retry:
// when the oldest hits have left so that c fits; reset: when the newest
// hit leaves. One pass over the log, as the Lua step.
func slidingLog(st State, now int64, p *limiter.Policy, limit, cost int64) step {
	w := p.WindowMillis()
	lw := windowOfLog(st, now, p)
	log, n, from, used := lw.log, lw.n, lw.from, lw.used
	s := step{allowed: cost <= limit-used}
	if !s.allowed {
		s.remaining, s.resetAt = max(0, limit-used), lw.resetBefore
		// The hits leave oldest first: the first time the rest leave room.
		s.retryAfter = max(1, lw.resetBefore-now)
		freed := int64(0)
		for i := from; i < n; i++ {
			t, c := logEntry(log, i)
			freed += c
			if used-freed <= limit-cost {
				s.retryAfter = t + w - now
				break
			}
		}
		return s
	}
	s.remainingBefore, s.resetAtBefore = limit-used, lw.resetBefore
	lw.appendHit(&s, now, w, cost)
	s.remaining, s.resetAt = limit-used-cost, now+w
	s.ttl = w + p.CleanupGraceMillis()
	return s
}

// logWindow is a sliding log read at now: the hits from index from on are
// in the window, used units in all, level of them since now's
// epoch-aligned window began; the newest is lastC units at lastT.
type logWindow struct {
	log                       string
	n, from                   int
	used, level, lastT, lastC int64
	resetBefore               int64
}

func windowOfLog(st State, now int64, p *limiter.Policy) logWindow {
	w := p.WindowMillis()
	log := slidingLogOf(st, now, p)
	n := len(log) / SlidingLogEntryBytes
	epochStart := now - now%w
	lw := logWindow{log: log, n: n, from: n, lastT: -1, resetBefore: now}
	for i := range n {
		t, c := logEntry(log, i)
		if t <= now-w {
			continue
		}
		if lw.used == 0 {
			lw.from = i
		}
		lw.used += c
		if t >= epochStart {
			lw.level += c
		}
		lw.lastT, lw.lastC = t, c
	}
	if lw.from < n {
		lw.resetBefore = lw.lastT + w
	}
	return lw
}

// appendHit sets s's state to the log pruned to the window with a hit of
// cost at now appended (merged into the last entry when it has the same
// ms).
func (lw *logWindow) appendHit(s *step, now, w, cost int64) {
	kept := lw.log[lw.from*SlidingLogEntryBytes:]
	newest := cost
	if lw.lastT == now {
		kept, newest = kept[:len(kept)-SlidingLogEntryBytes], lw.lastC+cost // the same ms: one entry
	}
	var entry [SlidingLogEntryBytes]byte
	s.log = kept + string(AppendSlidingLogEntry(entry[:0], now, newest))
	s.epoch, s.level, s.carry = now/w, lw.level+cost, lw.used-lw.level
}
