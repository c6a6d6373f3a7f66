package algorithm_test

import (
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/algorithm"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/calendar"
)

const (
	hourStart  = 1_700_000_000_000 / 3_600_000 * 3_600_000 // an hour boundary
	reserveTTL = 10 * 60_000
)

// budgets are the reserving policies the table tests run on: 1000 units
// an hour (token bucket and GCRA: 1000 refilled over the hour), reserving
// the request's cost for 10 minutes.
func budgets(t *testing.T, c limiter.Charge) map[string]*limiter.Policy {
	t.Helper()
	out := map[string]*limiter.Policy{}
	rate := limiter.Rate{Limit: 1000, Window: time.Hour}
	for _, a := range []limiter.Algorithm{limiter.FixedWindow, limiter.SlidingWindow, limiter.TokenBucket, limiter.GCRA} {
		out[a.String()] = limitertest.Policy(t, limiter.PolicySpec{ID: "budget", Algorithm: a, Charge: c,
			Params: a.ParamsFor(rate), Reserve: limiter.Reserve{TTL: reserveTTL * time.Millisecond}})
	}
	cal := rate
	cal.Calendar = &calendar.Calendar{Unit: calendar.Hour, Location: time.UTC}
	out["calendar"] = limitertest.Policy(t, limiter.PolicySpec{ID: "budget", Algorithm: limiter.FixedWindow, Charge: c,
		Params: limiter.FixedWindow.ParamsFor(cal), Reserve: limiter.Reserve{TTL: reserveTTL * time.Millisecond}})
	return out
}

// budget drives CheckRequest on one state, writing what it says to write.
type budget struct {
	t  *testing.T
	p  *limiter.Policy
	st algorithm.State
}

func (b *budget) do(now int64, req limiter.Request) (algorithm.Reply, bool) {
	b.t.Helper()
	req.Policy = b.p
	if err := req.Validate(); err != nil {
		b.t.Fatalf("request %+v: %v", req, err)
	}
	next, r, _, write := algorithm.CheckRequest(b.st, now, &req)
	if !write && next != b.st {
		b.t.Fatalf("%+v at %d: %s changed the state without writing", req, now, r.Status)
	}
	if write {
		if _, c, _ := algorithm.Apply(next, now, b.p, 1); c.Status == algorithm.StatusStateIncompatible {
			b.t.Fatalf("%+v at %d: wrote a state its policy refuses: %+v", req, now, next)
		}
		b.st = next
	}
	return r, write
}

// reserve reserves cost at now and returns the reservation's identity (0
// when denied).
func (b *budget) reserve(now, cost int64) (int64, algorithm.Reply) {
	b.t.Helper()
	r, write := b.do(now, limiter.Request{Cost: cost})
	if (r.Status == algorithm.StatusAllowed) != write || write != (r.HoldAtMs != 0) {
		b.t.Fatalf("reserve %d at %d: %+v, write %v", cost, now, r, write)
	}
	return r.HoldAtMs, r
}

func (b *budget) mustReserve(now, cost int64) int64 {
	b.t.Helper()
	id, r := b.reserve(now, cost)
	if id == 0 {
		b.t.Fatalf("reserve %d at %d denied: %+v", cost, now, r)
	}
	return id
}

func (b *budget) settle(now, id, actual int64) (algorithm.Reply, bool) {
	b.t.Helper()
	return b.do(now, limiter.Request{Cost: actual, Lease: limiter.LeaseRelease, LeaseAt: id})
}

// remaining is what a request meets at now, without changing anything.
func (b *budget) remaining(now int64) int64 {
	b.t.Helper()
	_, _, u, _ := algorithm.Check(b.st, now, b.p, 1)
	if u.Status != algorithm.StatusAllowed && u.Status != algorithm.StatusDenied {
		b.t.Fatalf("check at %d: %+v", now, u)
	}
	return u.Remaining
}

func (b *budget) wantRemaining(now, want int64, what string) {
	b.t.Helper()
	if got := b.remaining(now); got != want {
		b.t.Fatalf("%s: remaining %d, want %d (state %+v)", what, got, want, b.st)
	}
}

// TestReserveAdmits: a reserve is admitted while the budget minus the live
// reservations covers it; remaining counts them; a denied reserve changes
// nothing; the identity is now + TTL and the state lives past it.
func TestReserveAdmits(t *testing.T) {
	for name, p := range budgets(t, limiter.ChargeAllowed) {
		t.Run(name, func(t *testing.T) {
			b := &budget{t: t, p: p}
			now := int64(hourStart + 1000)
			id := b.mustReserve(now, 400)
			if id != now+reserveTTL {
				t.Fatalf("identity %d, want now + TTL %d", id, now+reserveTTL)
			}
			if b.st.ExpiresAtMs < id+p.CleanupGraceMillis() {
				t.Fatalf("state expires at %d, before the reservation's identity %d plus the grace", b.st.ExpiresAtMs, id)
			}
			b.wantRemaining(now, 600, "one reservation")
			b.mustReserve(now, 400)
			b.wantRemaining(now, 200, "two reservations")
			if id, r := b.reserve(now, 400); id != 0 || r.Status != algorithm.StatusDenied || r.Remaining != 200 || r.RetryAfterMs <= 0 {
				t.Fatalf("a reserve past the budget: %+v", r)
			}
			b.mustReserve(now, 200)
			b.wantRemaining(now, 0, "the budget reserved")
		})
	}
}

// TestReserveSettle: a settle removes its reservation and charges the
// actual usage: more (the excess recorded, up to the ceiling), less (the
// shortfall given back), equal, nothing; duplicate and unknown settles
// change nothing.
func TestReserveSettle(t *testing.T) {
	for _, tc := range []struct {
		name              string
		charge            limiter.Charge
		reserved, actual  int64
		want              int64 // remaining after the settle
		wantAfterFullUsed int64 // remaining at the ceiling: a settle of 1500 on 900
	}{
		{"less", limiter.ChargeAllowed, 400, 100, 900, 0},
		{"more", limiter.ChargeAllowed, 400, 700, 300, 0},
		{"equal", limiter.ChargeAllowed, 400, 400, 600, 0},
		{"nothing", limiter.ChargeAllowed, 400, 0, 1000, 0},
		{"more, charge always", limiter.ChargeAlways, 400, 700, 300, 0},
	} {
		for name, p := range budgets(t, tc.charge) {
			t.Run(tc.name+"/"+name, func(t *testing.T) {
				b := &budget{t: t, p: p}
				now := int64(hourStart + 1000)
				id := b.mustReserve(now, tc.reserved)
				if r, write := b.settle(now, id, tc.actual); !write || r.Status != algorithm.StatusAllowed || r.Remaining != tc.want {
					t.Fatalf("settle %d of %d: %+v, write %v; want remaining %d", tc.actual, tc.reserved, r, write, tc.want)
				}
				b.wantRemaining(now, tc.want, "after the settle")
				before := b.st
				for _, at := range []int64{id, id + 1, id - 1, now} {
					if r, write := b.settle(now, at, 300); write || b.st != before || r.Remaining != tc.want {
						t.Fatalf("a settle naming %d after %d settled: %+v, write %v", at, id, r, write)
					}
				}
			})
		}
	}
}

// TestReserveSettlePastCeiling: an excess is recorded past the limit, up to
// the policy's ceiling only: the limit (charge allowed) or twice it
// (charge always, whose later requests wait for the debt).
func TestReserveSettlePastCeiling(t *testing.T) {
	for _, c := range []limiter.Charge{limiter.ChargeAllowed, limiter.ChargeAlways} {
		for name, p := range budgets(t, c) {
			t.Run(c.String()+"/"+name, func(t *testing.T) {
				b := &budget{t: t, p: p}
				now := int64(hourStart + 1000)
				id := b.mustReserve(now, 500)
				b.mustReserve(now, 400)
				r, write := b.settle(now, id, 700)
				if !write || r.Status != algorithm.StatusDenied || r.Remaining != 0 {
					t.Fatalf("settle 700 of 500 reserved, 400 more reserved: %+v, write %v", r, write)
				}
				later := now + 30*60_000 // half an hour: 500 back to a bucket
				if p.Algorithm() == limiter.TokenBucket || p.Algorithm() == limiter.GCRA {
					// The excess is debt whatever the charge mode: a
					// reserving policy records usage past its limit.
					b.wantRemaining(later, 400, "half an hour after 100 of debt")
				} else {
					b.wantRemaining(later, 0, "in the window charged past its limit")
				}
			})
		}
	}
}

// TestReserveSettleLeaseAtZero: a settle of no reservation is a plain
// charge of its cost, recorded past the limit up to the ceiling.
func TestReserveSettleLeaseAtZero(t *testing.T) {
	for name, p := range budgets(t, limiter.ChargeAllowed) {
		t.Run(name, func(t *testing.T) {
			b := &budget{t: t, p: p}
			now := int64(hourStart + 1000)
			if r, write := b.settle(now, 0, 0); write || r.Status != algorithm.StatusAllowed || r.Remaining != 1000 {
				t.Fatalf("a settle of nothing: %+v, write %v", r, write)
			}
			if r, write := b.settle(now, 0, 700); !write || r.Remaining != 300 {
				t.Fatalf("a settle of 700 without a reservation: %+v, write %v", r, write)
			}
			if r, write := b.settle(now, 0, 700); !write || r.Status != algorithm.StatusDenied || r.Remaining != 0 {
				t.Fatalf("a settle past the limit: %+v, write %v", r, write)
			}
			if r, _ := b.settle(now, 0, 1); r.Status != algorithm.StatusDenied || r.Remaining != 0 {
				t.Fatalf("a settle at the ceiling: %+v", r)
			}
			b.wantRemaining(now, 0, "at the ceiling")
		})
	}
}

// TestReserveExpiry: a reservation never settled stays consumed at its
// amount after its TTL (remaining as if a plain request had taken it), is
// dropped from the state, and a settle after the TTL changes nothing.
func TestReserveExpiry(t *testing.T) {
	for name, p := range budgets(t, limiter.ChargeAllowed) {
		t.Run(name, func(t *testing.T) {
			b := &budget{t: t, p: p}
			now := int64(hourStart + 1000)
			id := b.mustReserve(now, 400)
			plain, _, _ := algorithm.Apply(algorithm.State{}, now, p, 400)
			twin := &budget{t: t, p: p, st: plain}
			after := id + 1
			b.wantRemaining(after, twin.remaining(after), "after the TTL")
			before := b.st
			if _, write := b.settle(after, id, 0); write || b.st != before {
				t.Fatalf("a settle after the TTL wrote %+v", b.st)
			}
			b.mustReserve(after, 1)
			if n := len(b.st.Reserved) / algorithm.ReservationEntryBytes; n != 1 {
				t.Fatalf("%d reservations held after the first expired, want 1", n)
			}
		})
	}
}

// TestReserveSettleAfterRollover: a shortfall is given back only to the
// window that holds the reservation (sliding window: or the next one, as
// its previous window); the new window keeps what it counts. An excess is
// charged to the window of the settle.
func TestReserveSettleAfterRollover(t *testing.T) {
	for name, p := range budgets(t, limiter.ChargeAllowed) {
		if p.Algorithm() != limiter.FixedWindow && p.Algorithm() != limiter.SlidingWindow {
			continue
		}
		t.Run(name, func(t *testing.T) {
			spec := p.Spec()
			spec.Reserve.TTL = 3 * time.Hour // live until two windows later
			b := &budget{t: t, p: limitertest.Policy(t, spec)}
			rolls := int64(1)
			if p.Algorithm() == limiter.SlidingWindow {
				rolls = 2
			}
			late := int64(hourStart + 3_600_000 - 60_000)       // a minute before the window ends
			next := int64(hourStart + rolls*3_600_000 + 60_000) // a minute into a later window
			short := b.mustReserve(late, 400)                   // settled with less
			more := b.mustReserve(late, 100)                    // settled with more
			if _, write := b.do(next, limiter.Request{Cost: 500}); !write {
				t.Fatal("500 in the new window denied")
			}
			left := b.remaining(next)
			if _, write := b.settle(next, short, 100); !write {
				t.Fatal("settle not written")
			}
			b.wantRemaining(next, left, "a shortfall settled in a later window")
			if _, write := b.settle(next, more, 300); !write {
				t.Fatal("settle not written")
			}
			b.wantRemaining(next, left-200, "an excess settled in a later window")
		})
	}
}

// TestReserveSettleSlidingNextWindow: a sliding window's reservation
// settled in the next window gives its shortfall back to the previous
// window's count.
func TestReserveSettleSlidingNextWindow(t *testing.T) {
	p := budgets(t, limiter.ChargeAllowed)["sliding_window"]
	b := &budget{t: t, p: p}
	id := b.mustReserve(hourStart+3_600_000-60_000, 1000)
	next := int64(hourStart + 3_600_000 + 60_000)
	full := b.remaining(next)
	b.settle(next, id, 0)
	if got := b.remaining(next); got != 1000 || full >= 1000 {
		t.Fatalf("remaining %d after the settle, %d before; want 1000", got, full)
	}
}

// TestReserveMaxReservations: at most MaxReservations are live; the next
// reserve is denied until the soonest expires or one is settled.
func TestReserveMaxReservations(t *testing.T) {
	for name, p := range budgets(t, limiter.ChargeAllowed) {
		t.Run(name, func(t *testing.T) {
			b := &budget{t: t, p: p}
			now := int64(hourStart + 1000)
			var ids []int64
			for i := range limiter.MaxReservations {
				ids = append(ids, b.mustReserve(now+int64(i), 1))
			}
			at := now + limiter.MaxReservations
			id, r := b.reserve(at, 1)
			if id != 0 || r.RetryAfterMs != ids[0]-at {
				t.Fatalf("reserve %d: %+v, want denied with a retry of %d", limiter.MaxReservations+1, r, ids[0]-at)
			}
			b.settle(at, ids[3], 1)
			b.mustReserve(at, 1)
			if id, _ := b.reserve(at, 1); id != 0 {
				t.Fatal("a reserve past the bound after one settle admitted")
			}
			b.mustReserve(ids[0], 1) // the soonest expired
		})
	}
}

// TestReserveIdentities: reserves in one ms get identities of their own,
// after every identity the state issued, settled ones included, so that a
// replayed settle never names a later reservation; the push is bounded.
func TestReserveIdentities(t *testing.T) {
	for name, p := range budgets(t, limiter.ChargeAllowed) {
		t.Run(name, func(t *testing.T) {
			b := &budget{t: t, p: p}
			now := int64(hourStart + 1000)
			a, c := b.mustReserve(now, 10), b.mustReserve(now, 10)
			if a != now+reserveTTL || c != a+1 {
				t.Fatalf("identities %d, %d in one ms", a, c)
			}
			b.settle(now, c, 10)
			d := b.mustReserve(now, 10)
			if d <= c {
				t.Fatalf("identity %d reissued after its settle (%d)", d, c)
			}
			before := b.remaining(now)
			b.settle(now, c, 0) // a replay of c's settle
			if got := b.remaining(now); got != before {
				t.Fatalf("a replayed settle changed remaining %d -> %d", before, got)
			}
			// Reserve and settle in one ms until the identity would be
			// pushed past the bound: then denied, with a retry.
			denied := false
			for range 2 * limiter.MaxReservations {
				id, r := b.reserve(now, 1)
				if id == 0 {
					if r.RetryAfterMs < 1 {
						t.Fatalf("denied without a retry: %+v", r)
					}
					denied = true
					break
				}
				if id > now+reserveTTL+limiter.MaxReservations {
					t.Fatalf("identity %d pushed %d ms past now + TTL", id, id-now-reserveTTL)
				}
				b.settle(now, id, 1)
			}
			if !denied {
				t.Fatal("identities pushed without bound")
			}
		})
	}
}

// TestReserveWindowEnd: a second reserve in the last ms of a window, whose
// identity would name the next window, waits for it; a shortfall of a
// reserve at the window's end is given back to that window.
func TestReserveWindowEnd(t *testing.T) {
	for name, p := range budgets(t, limiter.ChargeAllowed) {
		if p.Algorithm() != limiter.FixedWindow && p.Algorithm() != limiter.SlidingWindow {
			continue
		}
		t.Run(name, func(t *testing.T) {
			b := &budget{t: t, p: p}
			end := int64(hourStart + 3_600_000)
			id := b.mustReserve(end-1, 400)
			if id2, r := b.reserve(end-1, 1); id2 != 0 || r.RetryAfterMs != 1 {
				t.Fatalf("a reserve named past the window's end: %+v", r)
			}
			b.settle(end-1, id, 0)
			b.wantRemaining(end-1, 1000, "the shortfall given back to its window")
			b.mustReserve(end, 1)
		})
	}
}

// TestReserveStateChecked: reservations a reserving policy cannot have
// written are STATE_INCOMPATIBLE, and a state of another policy holds none.
func TestReserveStateChecked(t *testing.T) {
	p := budgets(t, limiter.ChargeAllowed)["fixed_window"]
	b := &budget{t: t, p: p}
	now := int64(hourStart + 1000)
	b.mustReserve(now, 10)
	b.mustReserve(now, 10)
	good := b.st
	plain := limitertest.Policy(t, limiter.PolicySpec{ID: "budget", Algorithm: limiter.FixedWindow,
		Params: limiter.FixedWindowParams{Limit: 1000, Window: time.Hour}})
	if _, r, _ := algorithm.Apply(good, now, plain, 1); r.Status != algorithm.StatusStateIncompatible {
		t.Fatalf("reservations on a policy without them: %+v", r)
	}
	e := algorithm.ReservationEntryBytes
	for name, res := range map[string]string{
		"a partial entry":    good.Reserved[:e+3],
		"out of order":       good.Reserved[e:] + good.Reserved[:e],
		"a settled one held": good.Reserved[:e-8] + "\x00\x00\x00\x00\x00\x00\x00\x00" + good.Reserved[e:],
	} {
		st := good
		st.Reserved = res
		req := limiter.Request{Policy: p, Cost: 1}
		if next, r, _, write := algorithm.CheckRequest(st, now, &req); r.Status != algorithm.StatusStateIncompatible || write || next != st {
			t.Errorf("%s: %+v", name, r)
		}
	}
}

// TestCheckRequestPlain: a request of a policy without reservations is
// Check of its cost.
func TestCheckRequestPlain(t *testing.T) {
	for _, a := range limiter.Algorithms() {
		p := chargePolicy(t, a, 10, limiter.ChargeAlways)
		var st algorithm.State
		for i := range 30 {
			now := int64(hourStart + i*50)
			req := limiter.Request{Policy: p, Cost: int64(1 + i%4)}
			n1, r1, u1, w1 := algorithm.Check(st, now, p, req.Cost)
			n2, r2, u2, w2 := algorithm.CheckRequest(st, now, &req)
			if n1 != n2 || r1 != r2 || u1 != u2 || w1 != w2 {
				t.Fatalf("%s step %d: CheckRequest differs from Check", a, i)
			}
			if w1 {
				st = n1
			}
		}
	}
}
