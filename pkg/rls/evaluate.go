package rls

import (
	"context"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// evaluate runs one validated call. Its steps are functions of their own
// so that the stack under each holds only its own frame: gRPC runs each
// call on a new goroutine, whose stack grows (is copied) when a call goes
// deeper than it.
func (s *Server) evaluate(ctx context.Context, req *rlsv3.RateLimitRequest, rules Rules, sc *scratch) *rlsv3.RateLimitResponse {
	known := rules.HasDomain(req.Domain)
	s.matchAll(req, rules, known, sc)
	now := s.decideAll(ctx, sc)
	// 4. Statuses.
	return s.respond(ctx, req, sc, now)
}

// matchAll matches every descriptor of a call into sc.descs (steps 1 and
// 2 of evaluate).
func (s *Server) matchAll(req *rlsv3.RateLimitRequest, rules Rules, known bool, sc *scratch) {
	domain := req.Domain

	// 1. Match every descriptor: one status per limit, in descriptor order
	// (a descriptor with rate_limits has one per limit of its list, and
	// its answer is the binding one, see bindingLimit).
	anyReplaces := false
	var nowMs int64 // read at the first override
	for i, d := range req.Descriptors {
		ds := descStatus{desc: i}
		if !known {
			sc.descs = append(sc.descs, ds)
			continue
		}
		if s.requestIDKey != "" && len(d.Entries) == 1 && d.Entries[0].Key == s.requestIDKey && d.Limit == nil {
			ds.kind = statusRequestID
			sc.requestID = boundRequestID(d.Entries[0].Value)
			sc.descs = append(sc.descs, ds)
			continue
		}
		if d.IsNegativeHits {
			// A refund: this service does not give back consumed units, and a
			// refund never needs a limit decision.
			ds.kind = statusNegative
			sc.descs = append(sc.descs, ds)
			continue
		}
		sc.entries = sc.entries[:0]
		for _, e := range d.Entries {
			sc.entries = append(sc.entries, descriptors.Entry{Key: e.Key, Value: e.Value})
		}
		var m descriptors.Match
		var ok bool
		if d.Limit != nil {
			unit, _ := overrideUnit(d.Limit.Unit) // validated
			m, ok = rules.Override(domain, sc.entries, d.Limit.RequestsPerUnit, unit, d.Limit.GetUnitMultiplier().GetValue())
			ds.override = true
		} else {
			m, ok, ds.release, ds.marker = matchRelease(rules, domain, sc.entries)
		}
		if !ok || m.Rule == nil {
			sc.descs = append(sc.descs, ds)
			continue
		}
		ds.cost, ds.probe = hitsFor(req, d)
		if ds.override {
			if nowMs == 0 {
				nowMs = s.clock.Now().UnixMilli()
			}
			if admitted, wait := s.overrides.admit(domain, m.Rule.Policy, nowMs); !admitted {
				// Beyond the domain's override policies: denied without
				// asking the store, as a limit that can never fit is.
				ds.kind, ds.match, ds.refusedWait = statusNeverFits, m, wait
				sc.descs = append(sc.descs, ds)
				continue
			}
		}
		if m.Rule.Unlimited || m.Rule.Policy == nil {
			ds.kind = statusUnlimited
		} else {
			ds.kind = statusStore
		}
		limits := m.Rule.Limits
		if len(m.Subjects) != len(limits) || ds.kind != statusStore {
			limits = nil
		}
		if limits == nil {
			ds.match = m
			sc.descs = append(sc.descs, ds)
			anyReplaces = anyReplaces || len(m.Rule.Replaces) > 0
			continue
		}
		for k, r := range limits {
			if ds.release && !settles(r.Policy) {
				continue // a release gives back or settles holds, and nothing else
			}
			ds.match = descriptors.Match{Rule: r, Subject: m.Subjects[k], Tag: m.Tag}
			sc.descs = append(sc.descs, ds)
			anyReplaces = anyReplaces || len(r.Replaces) > 0
		}
	}

	// 2. replaces: a matched rule named in another matched rule's replaces
	// is neither evaluated nor reported.
	if anyReplaces {
		markReplaced(sc.descs)
	}
}

// decideAll asks the store for the limits of sc.descs (step 3 of
// evaluate) and returns the clock's reading for the answer.
func (s *Server) decideAll(ctx context.Context, sc *scratch) time.Time {
	// 3. One batch for every limit the store must decide, followed by the
	// limits that can never fit (a zero limit, or a cost above the policy's
	// max cost: denials known without asking the store, which demote the
	// store's part to checks when they block the call, see
	// limiter.Pending). The store commits its part all or nothing by the
	// rule of limiter.Commits, the answer is built by the same rule over
	// the whole, so exactly the calls answered OK consume.
	neverFits := false
	takes, checks := 0, 0
	for i := range sc.descs {
		ds := &sc.descs[i]
		if ds.kind == statusNeverFits { // a refused override
			neverFits = true
			continue
		}
		if ds.kind != statusStore {
			continue
		}
		p := ds.match.Rule.Policy
		if ds.release {
			var named bool
			if ds.leaseAt, ds.localLease, named = s.markers.leaseOf(ds.marker, p, &ds.match.Subject, &checks); !named {
				ds.kind = statusNoLease
				continue
			}
		}
		if r := p.Reserve(); r.On() {
			ds.cost = reserveCost(ds, r, p)
		} else if ds.release && p.Limit() > 0 {
			ds.cost = min(ds.cost, p.MaxCost()) // never more than a take could hold
		} else if p.ChargeAlways() && !ds.probe {
			// A charge beyond the policy's ceiling records the ceiling
			// (limiter.Policy.Ceiling): the usage already happened.
			ds.cost = min(ds.cost, p.MaxCost())
		}
		if p.Limit() == 0 || ds.cost > p.MaxCost() {
			ds.kind = statusNeverFits
			neverFits = true
			continue
		}
		ds.add(&sc.batch)
		if ds.takesLease(&sc.batch[ds.batch]) {
			if takes++; takes > maxLeasesPerCall {
				// Its lease could not be named in the answer's marker, so
				// it could never be released: refused.
				sc.batch = sc.batch[:ds.batch]
				ds.kind = statusNeverFits
				neverFits = true
			}
		}
	}
	n := len(sc.batch)
	if neverFits {
		for i := range sc.descs {
			if ds := &sc.descs[i]; ds.kind == statusNeverFits {
				ds.add(&sc.batch)
			}
		}
	}
	if cap(sc.outs) < len(sc.batch) {
		sc.outs = make([]limiter.Outcome, len(sc.batch))
	}
	sc.outs = sc.outs[:len(sc.batch)]
	clear(sc.outs[:n])
	for i := n; i < len(sc.outs); i++ {
		sc.outs[i] = limiter.EvaluatedOutcome(limiter.Decision{})
	}
	var now time.Time // the answer's clock reading, when the store's end is it
	if n > 0 {
		eval := s.store.Evaluate
		if s.tracer != nil {
			eval = s.evaluateTraced
		}
		t0 := time.Now()
		sc.pending.Evaluate(ctx, sc.batch, sc.outs, eval)
		end := time.Now()
		sc.metrics.store.Observe(end.Sub(t0).Seconds())
		if s.systemClock {
			now = end
		}
	}
	if now.IsZero() {
		now = s.clock.Now()
	}
	return now
}

// reserveCost is the cost of a request of reserving policy p: a settle's
// is the usage its hits_addend reports (0 allowed, a charge beyond the
// policy's max cost records the max cost); a reserve's the policy's
// estimate, else the request's own cost.
func reserveCost(ds *descStatus, r limiter.Reserve, p *limiter.Policy) int64 {
	switch {
	case ds.release && ds.probe:
		ds.probe = false
		return 0
	case ds.release:
		return min(ds.cost, p.MaxCost())
	case r.Estimate != 0 && !ds.probe:
		return r.Estimate
	}
	return ds.cost
}
