package algorithm_test

import (
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/algorithm"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/calendar"
)

// held is a reservation the fuzz target's model holds: when and in which
// window it was admitted, its amount, and once settled its actual usage.
type held struct {
	at, window, amount, actual int64
	settled                    bool
}

// FuzzReserve drives CheckRequest with random reserves and settles, four
// bytes a step: the ms to advance (0-63), the operation (reserve; settle a
// live reservation; settle with no live one: replayed, unknown or LeaseAt
// 0), the reserve's cost and the settle's usage. The first two bytes
// choose the policy: the algorithm (a calendar window among them), the
// charge mode and a fixed estimate or none. It checks that every state
// written is one the policy accepts, that nothing changes what it does
// not write, that no identity is issued twice, and the bound: what the
// admitted reservations used (actual when settled, else the amount) is at
// most the limit plus the sum of their excesses (max(0, actual - amount)),
// in every window (token bucket and GCRA: over the run, plus their refill).
func FuzzReserve(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 10, 5, 0, 2, 3, 5, 1, 1, 0, 1, 9, 3})
	f.Add([]byte{2, 1, 5, 0, 9, 0, 0, 1, 9, 0, 60, 1, 0, 20, 60, 3, 0, 0})
	f.Add([]byte{3, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 1, 1, 15, 0, 2, 2, 0, 40, 1, 1, 19})
	f.Add([]byte{4, 1, 63, 0, 20, 0, 63, 0, 20, 0, 63, 1, 0, 0, 63, 1, 0, 20})
	// A fixed window's reservation settled with nothing in the next
	// window, full by then: its shortfall is not the new window's.
	rolled := []byte{0, 0, 0, 0, 9, 0}
	for range 16 {
		rolled = append(rolled, 63, 7, 0, 0) // a settle of nothing, 63 ms later
	}
	rolled = append(rolled, 0, 0, 9, 0, 0, 0, 9, 0, 0, 4, 0, 0, 0, 0, 9, 0)
	f.Add(rolled)
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) < 2 {
			return
		}
		p := reservePolicy(t, ops[0], ops[1])
		runReserve(t, p, ops[2:])
	})
}

func reservePolicy(t *testing.T, b0, b1 byte) *limiter.Policy {
	rate := limiter.Rate{Limit: 20, Window: time.Second}
	algs := []limiter.Algorithm{limiter.FixedWindow, limiter.SlidingWindow, limiter.TokenBucket, limiter.GCRA, limiter.FixedWindow}
	a := algs[int(b0)%len(algs)]
	if int(b0)%len(algs) == 4 {
		rate.Window = time.Minute
		rate.Calendar = &calendar.Calendar{Unit: calendar.Minute, Location: time.UTC}
	}
	c := limiter.ChargeAllowed
	if b1&1 != 0 {
		c = limiter.ChargeAlways
	}
	var estimate int64
	if b1&2 != 0 {
		estimate = 5
	}
	return limitertest.Policy(t, limiter.PolicySpec{ID: "fuzz", Algorithm: a, Charge: c, Params: a.ParamsFor(rate),
		Reserve: limiter.Reserve{TTL: 1500 * time.Millisecond, Estimate: estimate}})
}

func runReserve(t *testing.T, p *limiter.Policy, ops []byte) {
	var st algorithm.State
	now := int64(1_700_000_000_000)
	start := now
	live := map[int64]*held{}
	var all []*held
	issued := map[int64]bool{}
	var settled []int64
	for i := 0; i+3 < len(ops); i += 4 {
		now += int64(ops[i] % 64)
		req := limiter.Request{Policy: p}
		var target *held
		switch op := ops[i+1] % 8; {
		case op < 4: // reserve
			req.Cost = 1 + int64(ops[i+2])%10
		case op < 6: // settle a live reservation (the oldest of those left)
			req.Lease, req.Cost = limiter.LeaseRelease, int64(ops[i+3])%21
			for id, h := range live {
				if target == nil || id < req.LeaseAt {
					req.LeaseAt, target = id, h
				}
			}
		case op == 6 && len(settled) > 0: // a replayed settle
			req.Lease, req.Cost = limiter.LeaseRelease, int64(ops[i+3])%21
			req.LeaseAt = settled[int(ops[i+2])%len(settled)]
		default: // a settle of nothing held: an unknown identity or LeaseAt 0
			req.Lease, req.Cost = limiter.LeaseRelease, int64(ops[i+3])%21
			if ops[i+2]&1 != 0 {
				req.LeaseAt = now + int64(ops[i+2])
				if live[req.LeaseAt] != nil {
					req.LeaseAt = 0
				}
			}
		}
		if err := req.Validate(); err != nil {
			t.Fatalf("step %d: %+v: %v", i/4, req, err)
		}
		next, r, _, write := algorithm.CheckRequest(st, now, &req)
		if r.Status != algorithm.StatusAllowed && r.Status != algorithm.StatusDenied {
			t.Fatalf("step %d: %+v", i/4, r)
		}
		if !write && next != st {
			t.Fatalf("step %d: %s changed the state without writing", i/4, r.Status)
		}
		if write {
			if _, _, u, _ := algorithm.Check(next, now, p, 1); u.Status == algorithm.StatusStateIncompatible {
				t.Fatalf("step %d: wrote a state the policy refuses: %+v", i/4, next)
			}
			st = next
		}
		for id, h := range live {
			if id <= now { // expired: consumed at its amount
				delete(live, id)
				_ = h
			}
		}
		switch {
		case req.Lease == limiter.LeaseTake && r.HoldAtMs != 0:
			if issued[r.HoldAtMs] || r.HoldAtMs <= now {
				t.Fatalf("step %d: identity %d issued again or not after now %d", i/4, r.HoldAtMs, now)
			}
			issued[r.HoldAtMs] = true
			amount := req.Cost
			if e := p.Reserve().Estimate; e != 0 {
				amount = e
			}
			w, _ := algorithm.WindowAt(p, now)
			h := &held{at: now, window: w, amount: amount}
			live[r.HoldAtMs] = h
			all = append(all, h)
		case target != nil && live[req.LeaseAt] != nil:
			target.settled, target.actual = true, req.Cost
			delete(live, req.LeaseAt)
			settled = append(settled, req.LeaseAt)
			if !write {
				t.Fatalf("step %d: the settle of a live reservation wrote nothing", i/4)
			}
		}
	}
	checkReserveBound(t, p, all, start, now)
}

// checkReserveBound checks the bound on the reservations admitted between
// start and end.
func checkReserveBound(t *testing.T, p *limiter.Policy, all []*held, start, end int64) {
	used, excess := map[int64]int64{}, map[int64]int64{}
	var usedAll, excessAll int64
	for _, h := range all {
		u := h.amount
		if h.settled {
			u = h.actual
		}
		x := max(0, u-h.amount)
		used[h.window] += u
		excess[h.window] += x
		usedAll += u
		excessAll += x
	}
	switch p.Algorithm() {
	case limiter.TokenBucket, limiter.GCRA:
		amount, period := p.Refill()
		if most := p.Limit() + algorithm.CeilDiv((end-start)*amount, period); usedAll > most+excessAll {
			t.Fatalf("used %d over %d ms, above %d + the excess %d", usedAll, end-start, most, excessAll)
		}
	default:
		for w, u := range used {
			if u > p.Limit()+excess[w] {
				t.Fatalf("window %d: used %d, above the limit %d + the excess %d", w, u, p.Limit(), excess[w])
			}
		}
	}
}
