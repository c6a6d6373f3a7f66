package limiter_test

import (
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// The fuzz targets drive Apply with random (advance, cost) sequences, three
// bytes per step: a signed 16-bit clock step (negative steps are clock
// regressions of up to 3s, beyond the default 2s threshold) and a cost byte.
// sim checks the invariants every algorithm shares; each target adds its own.

type admit struct{ at, cost int64 }

type sim struct {
	t        *testing.T
	p        *limiter.Policy
	st       limiter.State
	now      int64
	admitted []admit
}

func decode(b0, b1 byte) int64 {
	v := int64(int16(uint16(b0)<<8 | uint16(b1)))
	if v < 0 {
		return -((-v) % 3001)
	}
	return v
}

// run executes ops and returns the admitted requests, in order.
func (s *sim) run(ops []byte) {
	maxCost := s.p.MaxCost()
	for i := 0; i+2 < len(ops); i += 3 {
		s.now = max(0, s.now+decode(ops[i], ops[i+1]))
		s.step(i/3, s.now, 1+int64(ops[i+2])%maxCost)
	}
}

func (s *sim) step(i int, now, cost int64) {
	t, p, st := s.t, s.p, s.st
	next, r, write := limiter.Apply(st, now, p, cost)
	limit := p.Limit()
	if r.ServerNowMs != now || r.Limit != limit {
		t.Fatalf("step %d: reply %+v for now %d", i, r, now)
	}
	unsafe := st.Exists && st.LastObservedMs-now > p.MaxClockRegressionMillis()
	if (r.Status == limiter.StatusClockUnsafe) != unsafe {
		t.Fatalf("step %d: status %s, state last observed %d, now %d", i, r.Status, st.LastObservedMs, now)
	}
	if write != (r.Status == limiter.StatusAllowed) {
		t.Fatalf("step %d: write %v with %s", i, write, r.Status)
	}
	if !write && next != st {
		t.Fatalf("step %d: %s changed the state:\n%+v\n%+v", i, r.Status, st, next)
	}
	if unsafe {
		return
	}
	if r.Status != limiter.StatusAllowed && r.Status != limiter.StatusDenied {
		t.Fatalf("step %d: status %s", i, r.Status)
	}
	eff := now
	if st.Exists {
		eff = max(now, st.LastObservedMs)
	}
	if r.EffectiveNowMs != eff {
		t.Fatalf("step %d: effective now %d, want %d", i, r.EffectiveNowMs, eff)
	}
	if r.Remaining < 0 || r.Remaining > limit {
		t.Fatalf("step %d: remaining %d outside [0, %d]", i, r.Remaining, limit)
	}
	if (r.RetryAfterMs > 0) != (r.Status == limiter.StatusDenied) || r.RetryAfterMs < 0 {
		t.Fatalf("step %d: %s with retry after %d", i, r.Status, r.RetryAfterMs)
	}
	if r.ResetAtMs < eff {
		t.Fatalf("step %d: reset at %d before now %d", i, r.ResetAtMs, eff)
	}
	after := st
	if write {
		after = next
		if next.LastObservedMs != eff || next.ExpiresAtMs <= eff {
			t.Fatalf("step %d: next state %+v at %d", i, next, eff)
		}
		s.admitted = append(s.admitted, admit{eff, cost})
	}
	// Retry-after is exact when nothing else happens: admitted then, not 1ms earlier.
	if r.Status == limiter.StatusDenied {
		if _, r2, _ := limiter.Apply(st, eff+r.RetryAfterMs, p, cost); r2.Status != limiter.StatusAllowed {
			t.Fatalf("step %d: denied with retry %dms, but at that time: %+v", i, r.RetryAfterMs, r2)
		}
		if r.RetryAfterMs > 1 {
			if _, r2, _ := limiter.Apply(st, eff+r.RetryAfterMs-1, p, cost); r2.Status != limiter.StatusDenied {
				t.Fatalf("step %d: retry %dms is not the earliest: %+v", i, r.RetryAfterMs, r2)
			}
		}
	}
	// Reset-at is when the full allowance is back, and not earlier.
	if limit > 0 {
		if _, r2, _ := limiter.Apply(after, r.ResetAtMs, p, limit); r2.Status != limiter.StatusAllowed {
			t.Fatalf("step %d: reset at %d, but then the full limit is %+v", i, r.ResetAtMs, r2)
		}
		if r.ResetAtMs > eff {
			if _, r2, _ := limiter.Apply(after, r.ResetAtMs-1, p, limit); r2.Status != limiter.StatusDenied {
				t.Fatalf("step %d: reset at %d is not the earliest: %+v", i, r.ResetAtMs, r2)
			}
		}
	}
	// After its TTL a state is indistinguishable from none.
	if write {
		at := next.ExpiresAtMs + 1
		n1, r1, _ := limiter.Apply(next, at, p, limit)
		n0, r0, _ := limiter.Apply(limiter.State{}, at, p, limit)
		if r1 != r0 || n1 != n0 {
			t.Fatalf("step %d: state %+v after its TTL differs from no state:\n%+v %+v\n%+v %+v", i, next, r1, n1, r0, n0)
		}
	}
	s.st = after
}

// withinEachWindow fails the test if the requests admitted in any one
// epoch-aligned window of the policy cost more than its limit.
func (s *sim) withinEachWindow() {
	s.t.Helper()
	perWindow := map[int64]int64{}
	for _, a := range s.admitted {
		w := a.at / s.p.WindowMillis()
		if perWindow[w] += a.cost; perWindow[w] > s.p.Limit() {
			s.t.Fatalf("admitted %d in window %d, limit %d", perWindow[w], w, s.p.Limit())
		}
	}
}

func fuzzSeeds(f *testing.F, add func(a, b uint16, ops []byte)) {
	add(10, 1000, []byte{0, 0, 3, 0, 1, 9, 0, 0, 0, 0x03, 0xe8, 9})
	add(1, 1, []byte{0, 0, 0, 0, 0, 0, 0, 1, 0, 0xff, 0x00, 0})                      // regression beyond 2s, then
	add(1000, 60000, []byte{0x7f, 0xff, 200, 0xf8, 0x30, 1, 0xff, 0xff, 7, 0, 0, 9}) // big step, small regressions
	add(7, 333, []byte{0, 100, 4, 0, 100, 4, 0, 133, 6, 0, 1, 2, 0, 200, 6, 0, 99, 1})
}

// fuzzWindowed fuzzes a windowed policy that build makes from a limit and
// a window, then runs check on the simulation's admissions.
func fuzzWindowed(f *testing.F, build func(testing.TB, int64, time.Duration) *limiter.Policy, check func(*sim)) {
	fuzzSeeds(f, func(a, b uint16, ops []byte) { f.Add(a, b, ops) })
	f.Fuzz(func(t *testing.T, limit, window uint16, ops []byte) {
		p := build(t, 1+int64(limit%1000), time.Duration(1+int64(window%5000))*time.Millisecond)
		s := &sim{t: t, p: p, now: t0}
		s.run(ops)
		check(s)
	})
}

func FuzzFixedWindow(f *testing.F) {
	fuzzWindowed(f, fixed, (*sim).withinEachWindow)
}

func FuzzSlidingWindow(f *testing.F) {
	fuzzWindowed(f, sliding, func(s *sim) {
		t, p, W := s.t, s.p, s.p.WindowMillis()
		s.withinEachWindow()
		for j, a := range s.admitted {
			// The estimate is conservative for evenly spread traffic, and
			// no sliding interval of one window ever holds two limits.
			var sum int64
			for _, b := range s.admitted[:j+1] {
				if b.at > a.at-W {
					sum += b.cost
				}
			}
			if sum > 2*p.Limit() {
				t.Fatalf("admitted %d within %dms before %d, limit %d", sum, W, a.at, p.Limit())
			}
		}
	})
}

func FuzzTokenBucket(f *testing.F) {
	fuzzSeeds(f, func(a, b uint16, ops []byte) { f.Add(a, b, uint8(1), ops) })
	f.Add(uint16(1000), uint16(999), uint8(250), []byte{0, 1, 255, 0, 1, 255, 0, 3, 255, 0x10, 0, 255})
	f.Fuzz(func(t *testing.T, capacity, period uint16, amount uint8, ops []byte) {
		p := bucket(t, 1+int64(capacity%1000), 1+int64(amount%100), time.Duration(1+int64(period%5000))*time.Millisecond)
		s := &sim{t: t, p: p, now: t0}
		s.run(ops)
		a, per := p.Refill()
		// Over any span of admissions: at most capacity + refill over the span.
		for j := range s.admitted {
			var sum int64
			for i := j; i >= 0; i-- {
				sum += s.admitted[i].cost
				span := s.admitted[j].at - s.admitted[i].at
				if bound := p.Limit() + a*span/per; sum > bound {
					t.Fatalf("admitted %d between %d and %d, bound %d", sum, s.admitted[i].at, s.admitted[j].at, bound)
				}
			}
		}
	})
}

// FuzzSlidingLog: the sliding log is exact, so no trailing window (of
// every admission's time) ever holds more than the limit.
func FuzzSlidingLog(f *testing.F) {
	fuzzWindowed(f, slidingLog, func(s *sim) {
		W := s.p.WindowMillis()
		for j, a := range s.admitted {
			var sum int64
			for _, b := range s.admitted[:j+1] {
				if b.at > a.at-W {
					sum += b.cost
				}
			}
			if sum > s.p.Limit() {
				s.t.Fatalf("admitted %d in the %dms up to %d, limit %d", sum, W, a.at, s.p.Limit())
			}
		}
	})
}

// FuzzSlidingLogState: any stored state (log bytes, counts, times) is
// decided without a panic, and a state Apply writes is one it reads back.
func FuzzSlidingLogState(f *testing.F) {
	f.Add([]byte(logOf(t0-5, 1, t0, 2)), int64(0), int64(0), int64(0), int64(t0), int64(t0+1), uint8(1))
	f.Add([]byte{}, int64(3), int64(2), int64(t0/1000), int64(t0), int64(t0+1500), uint8(2))
	f.Add([]byte{0x7f, 0xf0, 0, 0, 0, 0, 0, 0, 0, 1}, int64(0), int64(0), int64(0), int64(t0), int64(t0), uint8(1))
	f.Fuzz(func(t *testing.T, log []byte, level, carry, epoch, last, now int64, cost uint8) {
		p := slidingLog(t, 5, time.Second)
		st := limiter.State{Exists: true, Schema: limiter.StateSchema, Algorithm: limiter.SlidingLog, PolicyID: p.ID(), Revision: 1,
			LastObservedMs: min(max(last, 0), limiter.MaxSafeInteger), Epoch: epoch, Level: level, Carry: carry, Log: string(log)}
		now = min(max(now, 0), limiter.MaxSafeInteger)
		next, r, write := limiter.Apply(st, now, p, 1+int64(cost)%p.MaxCost())
		if o := limiter.OutcomeFromReply(p, r, limiter.SourceMemory); r.Status == limiter.StatusAllowed || r.Status == limiter.StatusDenied {
			if o.Kind != limiter.Evaluated {
				t.Fatalf("reply %+v: %v", r, o.Err)
			}
		}
		if !write {
			return
		}
		if _, again, _ := limiter.Apply(next, next.LastObservedMs, p, 1); again.Status == limiter.StatusStateIncompatible {
			t.Fatalf("state %+v written from %+v reads as incompatible", next, st)
		}
	})
}
