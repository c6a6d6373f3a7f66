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
	// unreported is each aggregate's usage not reported at the tick.
	unreported []int64
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
	sc.aggs, sc.subs, sc.reqs, sc.demands, sc.unreported = sc.aggs[:0], sc.subs[:0], sc.reqs[:0], sc.demands[:0], sc.unreported[:0]
	for k, a := range s.aggs {
		if len(a.subs) == 0 && a.pending == 0 {
			delete(s.aggs, k)
			continue
		}
		req := limiter.Request{Policy: a.policy, Subject: a.subject, Tag: a.tag, Cost: 1, Role: limiter.RoleCheck}
		start, began := a.windowAt(now)
		if began {
			// The reports that arrive before this tick has read the new
			// window are split at its start.
			a.start = start
			a.pending -= min(a.beforeEnd, a.pending)
		} else {
			a.pending -= min(a.beforeStart, a.pending)
		}
		a.beforeStart, a.beforeEnd = 0, 0
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
		// What the proxies admitted and have not reported, as of now:
		// the reports that arrive while the tick runs are not in the
		// states it reads.
		sc.aggs, sc.subs, sc.reqs = append(sc.aggs, a), append(sc.subs, subs), append(sc.reqs, req)
		sc.unreported = append(sc.unreported, s.unreported(a, subs, start, now))
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
		s.divide(a, sc.subs[i], &sc.outs[i], &sc.demands[i], charged, sc.unreported[i], now)
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

// windowAt returns the start of the fixed window that a charge at now
// falls in, as far as a knows (zero when it does not), and whether that
// window began since the last tick. What a's proxies admitted before it
// is not charged: it belongs to a window that is over, not to the limit
// in force.
func (a *aggregate) windowAt(now time.Time) (start time.Time, began bool) {
	if !a.window.IsZero() && !now.Before(a.window) {
		return a.window, true
	}
	return a.start, false
}

// divide sets, for each subscription of a on this replica, its share of
// a's capacity: max-min fair over the demands of every replica's
// proxies. charged is what this tick charged of the usage reported,
// unreported what the proxies admitted since. A decision the store could
// not make follows the policy's failure mode: open lets every proxy
// through, closed none.
func (s *Service) divide(a *aggregate, subs []*subscription, o *limiter.Outcome, d *Demand, charged, unreported int64, now time.Time) {
	var c int64
	switch {
	case o.Kind == limiter.Evaluated && o.Decision.Known():
		// What remains, less what the proxies admitted and have not
		// reported: over the time left for a window (at least a tick: an
		// assignment lasts until the next one); the other algorithms
		// renew continuously, over a tick at least.
		remaining, reset, lag := o.Decision.Remaining-unreported, o.Decision.ResetAt, s.cfg.Tick
		if a.policy.Algorithm() == limiter.FixedWindow {
			if !reset.Equal(a.window) {
				a.start, a.window = a.window, reset
			} else if elapsed := now.Sub(a.readAt).Seconds(); elapsed > 0 && s.single() {
				// What else drew on the window since the last tick (RLS
				// calls): its rate is kept for the rest of the window.
				// Only a replica whose proxies alone report the subject
				// knows what the reports charged.
				other := max(0, float64(a.lastRemaining-o.Decision.Remaining-charged)/elapsed)
				a.others = (a.others + other) / 2
			}
			a.lastRemaining, a.readAt = o.Decision.Remaining, now
			reset, lag = maxTime(reset, now.Add(s.cfg.Tick)), 0
		}
		c = max(0, capacity(a.policy, remaining, reset, now, lag)-int64(a.others*1000))
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

// unreported estimates the requests a's proxies admitted since start
// (a fixed window's; else zero) or their last report, the later, that
// the store has not been told:
// each of this replica's proxies at the rate it holds (or, holding none,
// admitted over its last interval), no more than it wants; the other
// replicas' at their assignment, as long ago on average as this
// replica's reported (the ticks are aligned, the proxies alike), or half
// a tick when this replica has none.
func (s *Service) unreported(a *aggregate, subs []*subscription, start, now time.Time) int64 {
	var u, rate float64 // u: Σ mrps × seconds
	for _, sub := range subs {
		if sub.gone || sub.lastReport.IsZero() {
			continue
		}
		r := sub.admitting
		if sub.sent != nil && sub.sentRate != unknownDemand {
			r = sub.sentRate
		}
		if sub.demand != unknownDemand {
			r = min(r, sub.demand)
		}
		if since := now.Sub(maxTime(sub.lastReport, start)).Seconds(); since > 0 {
			u += float64(r) * since
			rate += float64(r)
		}
	}
	if a.remote != unknownDemand && a.remote > 0 {
		if rate > 0 {
			u += float64(a.remote) * u / rate
		} else {
			wait := s.cfg.Tick / 2
			if !start.IsZero() {
				wait = max(0, min(wait, now.Sub(start)))
			}
			u += float64(a.remote) * wait.Seconds()
		}
	}
	return int64(math.Ceil(min(u/1000, 1<<53)))
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

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
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
