package failover

import (
	"context"
	"maps"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/leases"
)

// generation is the local limiter of the time since (Unix ms, the clock's;
// the first one's is 0: nothing was dropped before it): its rate states
// hold the reservations made since then.
type generation struct {
	*leases.Store
	since int64
}

// holds reports whether the rate states of g may hold the local
// reservation that r settles: one taken after g began, so its identity
// (its expiry) is after that plus the policy's TTL. An identity may lie up
// to limiter.MaxReservations ms after its reserve's time plus the TTL (the
// reserves of one state in one millisecond), so one that close to the
// start is taken for the dropped state's: its usage goes to the store
// rather than be lost.
func (g *generation) holds(r *limiter.Request) bool {
	return r.LeaseAt-r.Policy.Reserve().TTL.Milliseconds() > g.since+limiter.MaxReservations
}

// reservation names a local reservation: its policy, subject and identity.
type reservation struct {
	id       string
	revision uint32
	subject  limiter.SubjectDigest
	at       int64
}

// evaluateSplit evaluates a batch that holds releases of local leases or
// settles of local reservations: those by the local limiter (its lease
// table, or the rate states of its generation), the others as a batch of
// their own. A settle whose reservation was held by a dropped generation
// joins the others as a plain charge, the first time. A release or a
// settle never blocks its batch, so the two parts decide apart as they
// would together.
func (s *Store) evaluateSplit(ctx context.Context, batch []limiter.Request, out []limiter.Outcome) {
	gen := s.local.Load()
	now := s.clock.Now().UnixMilli()
	var local, rest []int
	for i := range batch {
		r := &batch[i]
		switch {
		case !r.LocalLease:
			rest = append(rest, i)
		case r.Settles() && (r.LeaseAt == 0 || !gen.holds(r) && s.chargeOnce(r, now)):
			rest = append(rest, i)
		default:
			local = append(local, i)
		}
	}
	if len(rest) > 0 {
		reqs, outs := gather(batch, rest)
		for k := range reqs {
			// The local reservation never reached the store: its usage
			// is charged there.
			reqs[k].LeaseAt, reqs[k].LocalLease = 0, false
		}
		s.evaluate(ctx, reqs, outs)
		for k, i := range rest {
			out[i] = outs[k]
		}
	}
	if len(local) == 0 {
		return
	}
	reqs, outs := gather(batch, local)
	for k := range reqs {
		// The local leases and reservations are held by the policy's
		// share, under its ID and revision; a release gives back at most
		// what a take of the share could hold.
		if q, err := s.share(reqs[k].Policy); err == nil {
			reqs[k].Policy = q
			reqs[k].Cost = min(reqs[k].Cost, q.MaxCost())
		}
	}
	gen.Evaluate(ctx, reqs, outs)
	for k, i := range local {
		out[i] = outs[k]
		s.answer(&batch[i], &out[i])
	}
}

// chargeOnce reports whether r, a settle of a local reservation that a
// dropped generation held, is to be charged to the store: the first
// settle of that reservation while it would still be live. It remembers
// the reservation until its expiry (at most maxCharged of them).
func (s *Store) chargeOnce(r *limiter.Request, now int64) bool {
	if r.LeaseAt <= now {
		return false
	}
	k := reservation{id: r.Policy.ID(), revision: r.Policy.Revision(), subject: r.Subject, at: r.LeaseAt}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.charged[k]; dup {
		return false
	}
	if len(s.charged) >= maxCharged {
		maps.DeleteFunc(s.charged, func(_ reservation, at int64) bool { return at <= now })
	}
	if len(s.charged) < maxCharged {
		s.charged[k] = r.LeaseAt
	}
	return true
}

// gather copies the requests of batch at idx, with an outcome each.
func gather(batch []limiter.Request, idx []int) ([]limiter.Request, []limiter.Outcome) {
	reqs := make([]limiter.Request, len(idx))
	for k, i := range idx {
		reqs[k] = batch[i]
	}
	return reqs, make([]limiter.Outcome, len(idx))
}
