package rlqs

import (
	"context"
	"math"
	"time"

	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// evaluateChunk bounds the requests of one store call of a tick.
const evaluateChunk = 512

// tickScratch is a tick's working memory, reused.
type tickScratch struct {
	aggs    []*aggregate
	subs    [][]*subscription
	reqs    []limiter.Request
	outs    []limiter.Outcome
	demands []Demand
	shares  []int64
	// reads re-reads the states charged (readOf: their index in reqs).
	reads  []limiter.Request
	readOf []int
}

// Tick revises every assignment: it charges the usage reported since the
// last tick and reads each aggregate's state (one store call per chunk),
// exchanges demands with the other replicas, divides each aggregate's
// capacity among every proxy's demand and sends the proxies of this
// replica what changed.
func (s *Service) Tick(ctx context.Context) {
	now := s.cfg.Clock.Now()
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return
	}
	s.revisit(now)
	sc := &s.scratch
	sc.aggs, sc.subs, sc.reqs, sc.demands = sc.aggs[:0], sc.subs[:0], sc.reqs[:0], sc.demands[:0]
	for k, a := range s.aggs {
		if len(a.subs) == 0 && a.pending == 0 {
			delete(s.aggs, k)
			continue
		}
		req := limiter.Request{Policy: a.policy, Subject: a.subject, Tag: a.tag, Cost: 1, Role: limiter.RoleCheck}
		if a.pending > 0 {
			cost := min(a.pending, a.twin.MaxCost())
			a.pending -= cost
			req = limiter.Request{Policy: a.twin, Subject: a.subject, Tag: a.tag, Cost: cost}
		}
		subs := make([]*subscription, 0, len(a.subs))
		mine := make([]int64, 0, len(a.subs))
		for sub := range a.subs {
			subs = append(subs, sub)
			mine = append(mine, sub.demand)
		}
		sc.aggs, sc.subs, sc.reqs = append(sc.aggs, a), append(sc.subs, subs), append(sc.reqs, req)
		sc.demands = append(sc.demands, Demand{Policy: a.policy, Subject: a.subject, Tag: a.tag, Mine: mine})
	}
	sc.outs = append(sc.outs[:0], make([]limiter.Outcome, len(sc.reqs))...)
	s.mu.Unlock()

	ctx, cancel := context.WithTimeout(ctx, s.cfg.Tick)
	s.evaluate(ctx, sc.reqs, sc.outs)
	if !s.single() {
		// The other replicas charge their proxies' usage at the same
		// tick: read the states again once they have, so that the
		// capacity counts every replica's charges, not only those that
		// landed before this replica's.
		select {
		case <-ctx.Done():
		case <-time.After(s.cfg.Tick / 20):
		}
		for i := range sc.reqs {
			if sc.reqs[i].Role != limiter.RoleCheck {
				sc.reads = append(sc.reads, limiter.Request{Policy: sc.aggs[i].policy, Subject: sc.aggs[i].subject,
					Tag: sc.aggs[i].tag, Cost: 1, Role: limiter.RoleCheck})
				sc.readOf = append(sc.readOf, i)
			}
		}
		reread := make([]limiter.Outcome, len(sc.reads))
		s.evaluate(ctx, sc.reads, reread)
		for k, i := range sc.readOf {
			if reread[k].Kind == limiter.Evaluated {
				sc.outs[i] = reread[k]
			}
		}
		sc.reads, sc.readOf = sc.reads[:0], sc.readOf[:0]
	}
	if err := s.cfg.Exchange.Swap(ctx, sc.demands); err != nil {
		s.cfg.Log.Warn("rlqs: demands not exchanged: dividing among this replica's proxies alone", zap.Error(err))
	}
	cancel()

	s.mu.Lock()
	defer s.mu.Unlock()
	for i, a := range sc.aggs {
		if d := a.denied; d > 0 && s.cfg.Denied != nil {
			o := &sc.outs[i].Decision
			s.cfg.Denied(Denial{Domain: a.domain, PolicyID: a.policy.ID(), Subject: a.subject, Denied: d,
				Limit: a.policy.Limit(), Remaining: o.Remaining, Shadow: a.policy.Shadow()})
		}
		var charged int64
		if sc.reqs[i].Policy == a.twin && sc.reqs[i].Role != limiter.RoleCheck {
			charged = sc.reqs[i].Cost
		}
		s.divide(a, sc.subs[i], &sc.outs[i], &sc.demands[i], charged, now)
	}
	for st := range s.streams {
		for _, sub := range st.subs {
			s.assign(sub, now)
		}
	}
	s.cfg.Metrics.observe(s.aggs)
	for _, a := range s.aggs {
		a.allowed, a.denied = 0, 0
	}
}

// revisit rebinds the subscriptions matched on an older rule snapshot and
// abandons the ones whose proxy has sent no request for AbandonAfter.
func (s *Service) revisit(now time.Time) {
	snap := s.cfg.Rules()
	for st := range s.streams {
		for key, sub := range st.subs {
			if now.Sub(sub.lastUsed) >= s.cfg.AbandonAfter {
				sub.unbind()
				delete(st.subs, key)
				st.enqueue(key, sub.abandon())
				s.cfg.Metrics.action(actionAbandon)
				continue
			}
			if sub.snap != snap {
				for _, a := range sub.aggs {
					delete(a.subs, sub)
				}
				s.bind(sub, now)
			}
		}
	}
}

// divide sets, for each subscription of a on this replica, its share of
// a's capacity: max-min fair over the demands of every replica's
// proxies. A decision the store could not make follows the policy's
// failure mode: open lets every proxy through, closed none.
func (s *Service) divide(a *aggregate, subs []*subscription, o *limiter.Outcome, d *Demand, charged int64, now time.Time) {
	var c int64
	switch {
	case o.Kind == limiter.Evaluated && o.Decision.Known():
		// A window's remaining goes over the time left (at least a tick:
		// an assignment lasts until the next one). The usage the proxies
		// have not reported yet is not taken from it: at the window's end
		// it is charged to the next window, as the usage of this one's
		// start was to this one, so a window admits its limit. The other
		// algorithms renew continuously: their remaining less what is
		// unreported goes over a tick at least.
		remaining, reset, lag := o.Decision.Remaining, o.Decision.ResetAt, s.cfg.Tick
		if a.policy.Algorithm() == limiter.FixedWindow {
			// The usage reported before a window began and charged at its
			// first tick was admitted in the window before: it is not
			// this window's (ticks fall on window boundaries, Run). The
			// other replicas charged theirs too: in proportion to what
			// their proxies were assigned beside this replica's.
			scale := 1.0
			if a.assigned > 0 && a.assigned != unknownDemand && a.remote != unknownDemand {
				scale = float64(satAdd(a.assigned, a.remote)) / float64(a.assigned)
			}
			charges := float64(charged) * scale // every replica's charge
			if !reset.Equal(a.window) {
				a.carried = 0
				if !a.window.IsZero() {
					a.carried = int64(charges)
				}
				a.window = reset
			} else if elapsed := now.Sub(a.readAt).Seconds(); elapsed > 0 && s.single() {
				// What else drew on the window since the last tick (RLS
				// calls): its rate is kept for the rest of the window.
				// Only a replica whose proxies alone report the subject
				// knows what the reports charged; with several, the
				// others' share is an estimate too coarse to subtract.
				other := max(0, (float64(a.lastRemaining-o.Decision.Remaining)-charges)/elapsed)
				a.others = (a.others + other) / 2
			}
			a.lastRemaining, a.readAt = o.Decision.Remaining, now
			remaining += a.carried
			reset, lag = maxTime(reset, now.Add(s.cfg.Tick)), 0
			c = capacity(a.policy, remaining, reset, now, lag)
			c = max(0, c-int64(a.others*1000))
		} else {
			remaining -= s.unreported(a, subs, now)
			c = capacity(a.policy, remaining, reset, now, lag)
		}
	case a.policy.FailureMode() == limiter.FailOpen:
		c = unknownDemand
	}
	all := append(append(s.scratch.shares[:0], d.Mine...), d.Others...)
	shares := make([]int64, len(all))
	if c == unknownDemand {
		for i := range shares {
			shares[i] = unknownDemand
		}
	} else {
		// A proxy that reported once has no demand yet: it counts for an
		// equal share, not for all that is left; one that wants little
		// or nothing counts for a request a second at least (or its
		// equal share, when less), so that its next request finds a
		// quota rather than DENY_ALL.
		if n := int64(len(all)); n > 0 {
			equal := c / n
			floor := min(1000, equal)
			for i, dm := range all {
				if dm == unknownDemand {
					all[i] = equal
				} else {
					all[i] = max(dm, floor)
				}
			}
		}
		fairShares(c, all, shares)
	}
	s.scratch.shares = all
	a.capacity, a.demand, a.assigned, a.remote = c, 0, 0, 0
	for _, r := range shares[len(d.Mine):] {
		a.remote = satAdd(a.remote, r)
	}
	for i, sub := range subs {
		if sub.gone {
			continue
		}
		for j, b := range sub.aggs {
			if b == a {
				sub.rates[j] = shares[i]
				sub.divided = true
			}
		}
		if sub.demand != unknownDemand {
			a.demand = satAdd(a.demand, sub.demand)
		}
		a.assigned = satAdd(a.assigned, shares[i])
	}
}

// evaluate evaluates reqs on the store, evaluateChunk a call.
func (s *Service) evaluate(ctx context.Context, reqs []limiter.Request, outs []limiter.Outcome) {
	for from := 0; from < len(reqs); from += evaluateChunk {
		to := min(from+evaluateChunk, len(reqs))
		s.cfg.Store.Evaluate(ctx, reqs[from:to], outs[from:to])
	}
}

// unreported estimates the requests a's proxies admitted that the store
// has not been told: each of this replica's proxies at the rate it last
// reported admitting, since its last report; the other replicas' at their
// assignment, over half a reporting interval and half a tick (their
// reports and ticks are not this replica's).
func (s *Service) unreported(a *aggregate, subs []*subscription, now time.Time) int64 {
	var u, interval float64
	n := 0
	for _, sub := range subs {
		if sub.gone {
			continue
		}
		u += float64(sub.admitting) * now.Sub(sub.lastReport).Seconds() / 1000
		if sub.interval > 0 {
			interval += sub.interval.Seconds()
			n++
		}
	}
	if n > 0 {
		interval /= float64(n)
	}
	if a.remote != unknownDemand {
		u += float64(a.remote) * (interval + s.cfg.Tick.Seconds()) / 2 / 1000
	}
	return int64(math.Ceil(min(u, 1<<53)))
}

// assign sends sub the strategy of its rate: the lowest of its limits'
// shares.
func (s *Service) assign(sub *subscription, now time.Time) {
	if sub.fixed != nil {
		s.push(sub, sub.fixed, unknownDemand, now)
		return
	}
	if len(sub.rates) == 0 || !sub.divided {
		// Subscribed since this tick read the states: the next tick
		// divides it.
		return
	}
	rate := sub.rates[0]
	for _, r := range sub.rates[1:] {
		rate = min(rate, r)
	}
	if rate == unknownDemand {
		s.push(sub, blanket(true), unknownDemand, now)
		return
	}
	s.push(sub, strategyFor(rate, max(2, rate/2000)), rate, now)
}

// satAdd is a + b, at most unknownDemand.
func satAdd(a, b int64) int64 {
	if a > unknownDemand-b {
		return unknownDemand
	}
	return a + b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// single reports whether this replica divides its limits alone (no
// Exchange: the memory store).
func (s *Service) single() bool {
	_, ok := s.cfg.Exchange.(alone)
	return ok
}
