package algorithm_test

import (
	"errors"
	"math/big"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/algorithm"
)

// The fuzz targets drive Apply with random (advance, cost) sequences, three
// bytes per step: a signed 16-bit clock step (negative steps are clock
// regressions of up to 3s, beyond the default 2s threshold) and a cost byte.
// sim checks the invariants every algorithm shares; each target adds its own.

type admit struct{ at, cost int64 }

type sim struct {
	t        *testing.T
	p        *limiter.Policy
	st       algorithm.State
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
		s.now = min(max(0, s.now+decode(ops[i], ops[i+1])), limiter.MaxSafeInteger)
		s.step(i/3, s.now, 1+int64(ops[i+2])%maxCost)
	}
}

func (s *sim) step(i int, now, cost int64) {
	t, p, st := s.t, s.p, s.st
	next, r, write := algorithm.Apply(st, now, p, cost)
	limit := p.Limit()
	if r.ServerNowMs != now || r.Limit != limit {
		t.Fatalf("step %d: reply %+v for now %d", i, r, now)
	}
	unsafe := st.Exists && st.LastObservedMs-now > p.MaxClockRegressionMillis()
	if (r.Status == algorithm.StatusClockUnsafe) != unsafe {
		t.Fatalf("step %d: status %s, state last observed %d, now %d", i, r.Status, st.LastObservedMs, now)
	}
	if write != (r.Status == algorithm.StatusAllowed) {
		t.Fatalf("step %d: write %v with %s", i, write, r.Status)
	}
	if !write && next != st {
		t.Fatalf("step %d: %s changed the state:\n%+v\n%+v", i, r.Status, st, next)
	}
	if unsafe {
		return
	}
	if r.Status != algorithm.StatusAllowed && r.Status != algorithm.StatusDenied {
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
	if (r.RetryAfterMs > 0) != (r.Status == algorithm.StatusDenied) || r.RetryAfterMs < 0 {
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
	if r.Status == algorithm.StatusDenied {
		if _, r2, _ := algorithm.Apply(st, eff+r.RetryAfterMs, p, cost); r2.Status != algorithm.StatusAllowed {
			t.Fatalf("step %d: denied with retry %dms, but at that time: %+v", i, r.RetryAfterMs, r2)
		}
		if r.RetryAfterMs > 1 {
			if _, r2, _ := algorithm.Apply(st, eff+r.RetryAfterMs-1, p, cost); r2.Status != algorithm.StatusDenied {
				t.Fatalf("step %d: retry %dms is not the earliest: %+v", i, r.RetryAfterMs, r2)
			}
		}
	}
	// Reset-at is when the full allowance is back, and not earlier.
	if limit > 0 {
		if _, r2, _ := algorithm.Apply(after, r.ResetAtMs, p, limit); r2.Status != algorithm.StatusAllowed {
			t.Fatalf("step %d: reset at %d, but then the full limit is %+v", i, r.ResetAtMs, r2)
		}
		if r.ResetAtMs > eff {
			if _, r2, _ := algorithm.Apply(after, r.ResetAtMs-1, p, limit); r2.Status != algorithm.StatusDenied {
				t.Fatalf("step %d: reset at %d is not the earliest: %+v", i, r.ResetAtMs, r2)
			}
		}
	}
	// After its TTL a state is indistinguishable from none.
	if write {
		at := next.ExpiresAtMs + 1
		n1, r1, _ := algorithm.Apply(next, at, p, limit)
		n0, r0, _ := algorithm.Apply(algorithm.State{}, at, p, limit)
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
		s.withinRate()
	})
}

// withinRate fails the test if the requests admitted over any span cost
// more than the policy's capacity (burst) plus its refill over the span.
func (s *sim) withinRate() {
	s.t.Helper()
	a, per := s.p.Refill()
	for j := range s.admitted {
		var sum int64
		for i := j; i >= 0; i-- {
			sum += s.admitted[i].cost
			span := s.admitted[j].at - s.admitted[i].at
			if bound := s.p.Limit() + a*span/per; sum > bound {
				s.t.Fatalf("admitted %d between %d and %d, bound %d", sum, s.admitted[i].at, s.admitted[j].at, bound)
			}
		}
	}
}

// FuzzGCRA drives GCRA through the sim (retry-after and reset-at exact,
// TTL, clock regression) from a clock anywhere in the range a store may
// read (an exact integer, with room for the longest reset and grace), for
// bursts, rates and periods up to what NewPolicy accepts, and checks: over
// any span no more is admitted than the burst plus the rate over the span;
// every reply and the token bucket of the same rate agree; the stored
// theoretical arrival time is never further ahead than the burst's
// tolerance, its fraction below the reduced amount, its level 0; and every
// reply and state field stays within [0, 2^53-1].
func FuzzGCRA(f *testing.F) {
	fuzzSeeds(f, func(a, b uint16, ops []byte) { f.Add(a, b, uint32(a), uint64(t0), ops) })
	f.Add(uint16(2), uint16(2), uint32(999), uint64(t0), []byte{0, 0, 1, 0, 0, 2, 0, 1, 1, 0x01, 0x4d, 1, 0x05, 0x35, 3, 0, 0, 1, 0, 0, 3})            // 3 a second, fractional interval
	f.Add(uint16(4), uint16(1), uint32(999), uint64(t0), []byte{0, 0, 5, 0x01, 0xf3, 1, 0, 1, 1, 0x04, 0x4c, 4, 0x0d, 0xac, 2, 0xf8, 0x30, 1})         // burst 5, 2 a second, a clamped step back
	f.Add(uint16(999), uint16(0), uint32(310_000_000), uint64(limiter.MaxSafeInteger-1<<40-1), []byte{0, 0, 255, 0, 0, 255, 0x7f, 0xff, 255, 0, 1, 1}) // a fill of ten years near the top of the clock's range
	f.Add(uint16(0), uint16(65535), uint32(0), uint64(0), []byte{0, 0, 1, 0, 0, 1, 0, 1, 1, 0xff, 0xff, 1})                                            // 65,536 a millisecond from time 0
	f.Fuzz(func(t *testing.T, burst, limit uint16, period uint32, start uint64, ops []byte) {
		params := limiter.GCRAParams{Burst: 1 + int64(burst), Limit: 1 + int64(limit), Period: time.Duration(1+int64(period)) * time.Millisecond}
		p, err := limiter.NewPolicy(limiter.PolicySpec{ID: "gcra", Algorithm: limiter.GCRA, Params: params})
		if err != nil {
			if fe := (*limiter.FieldError)(nil); !errors.As(err, &fe) {
				t.Fatalf("NewPolicy(%+v): %v, not a *FieldError", params, err)
			}
			return
		}
		tb := bucket(t, params.Burst, params.Limit, params.Period)
		s := &sim{t: t, p: p, now: int64(start % uint64(limiter.MaxSafeInteger-1<<40))}
		var bst algorithm.State
		amount, per := p.Refill()
		tolerance := new(big.Int).Mul(big.NewInt(p.Limit()), big.NewInt(per))
		for i := 0; i+2 < len(ops); i += 3 {
			s.now = min(max(0, s.now+decode(ops[i], ops[i+1])), limiter.MaxSafeInteger)
			cost := 1 + int64(ops[i+2])%p.MaxCost()
			before := s.st
			s.step(i/3, s.now, cost)
			next, r, write := algorithm.Apply(before, s.now, p, cost)
			bnext, br, bwrite := algorithm.Apply(bst, s.now, tb, cost)
			if r != br || write != bwrite || next.ExpiresAtMs != bnext.ExpiresAtMs {
				t.Fatalf("step %d: gcra %+v (write %v, expires %d), token bucket %+v (write %v, expires %d)", i/3, r, write, next.ExpiresAtMs, br, bwrite, bnext.ExpiresAtMs)
			}
			if bwrite {
				bst = bnext
			}
			for _, v := range []int64{r.EffectiveNowMs, r.Remaining, r.RetryAfterMs, r.ResetAtMs, next.LastObservedMs, next.Epoch, next.Carry, next.ExpiresAtMs} {
				if v < 0 || v > limiter.MaxSafeInteger {
					t.Fatalf("step %d: a field outside [0, 2^53-1]: reply %+v, state %+v", i/3, r, next)
				}
			}
			if !write {
				continue
			}
			// TAT - now = Epoch + Carry/amount - now, in units of 1/amount ms:
			// above 0 (this request moved it), at most burst * I.
			ahead := new(big.Int).Mul(big.NewInt(next.Epoch-r.EffectiveNowMs), big.NewInt(amount))
			ahead.Add(ahead, big.NewInt(next.Carry))
			if next.Level != 0 || next.Carry >= amount || ahead.Sign() <= 0 || ahead.Cmp(tolerance) > 0 {
				t.Fatalf("step %d at %d: state %+v (amount %d, period %d, burst %d): the arrival time is not within (now, now + burst*I]",
					i/3, r.EffectiveNowMs, next, amount, per, p.Limit())
			}
		}
		s.withinRate()
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
		st := algorithm.State{Exists: true, Schema: algorithm.StateSchema, Algorithm: limiter.SlidingLog, PolicyID: p.ID(), Revision: 1,
			LastObservedMs: min(max(last, 0), limiter.MaxSafeInteger), Epoch: epoch, Level: level, Carry: carry, Log: string(log)}
		now = min(max(now, 0), limiter.MaxSafeInteger)
		next, r, write := algorithm.Apply(st, now, p, 1+int64(cost)%p.MaxCost())
		if o := algorithm.OutcomeFromReply(p, r, limiter.SourceMemory); r.Status == algorithm.StatusAllowed || r.Status == algorithm.StatusDenied {
			if o.Kind != limiter.Evaluated {
				t.Fatalf("reply %+v: %v", r, o.Err)
			}
		}
		if !write {
			return
		}
		if _, again, _ := algorithm.Apply(next, next.LastObservedMs, p, 1); again.Status == algorithm.StatusStateIncompatible {
			t.Fatalf("state %+v written from %+v reads as incompatible", next, st)
		}
	})
}
