// Package leases keeps a batch that holds leases all or nothing: a
// limiter.Store wrapper that evaluates the requests of concurrency policies
// (limiter.Policy.Leases) and the rate requests of one batch with the store
// below it, each kind as a batch of its own, and gives back the leases a
// batch took when it does not commit.
//
// The store below never sees the two kinds mixed (limiter.LeasesOnly); the
// wrapper calls down, never back. A Store is safe for concurrent use.
package leases

import (
	"context"
	"slices"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// Store evaluates batches that mix leases and rates.
type Store struct {
	rates, leases limiter.Store
}

var (
	_ limiter.Store    = (*Store)(nil)
	_ limiter.Resetter = (*Store)(nil)
)

// New wraps rates, the store of the rate requests; leases evaluates the
// lease requests (often the same store).
func New(rates, leases limiter.Store) *Store { return &Store{rates: rates, leases: leases} }

// Evaluate implements limiter.Store. A batch without lease requests goes
// to the rate store as it is. Otherwise the batch stays all or nothing, in
// three steps:
//
//  1. every lease request, in batch order, as one batch of the lease
//     store: takes take their leases (a check or a probe only asks),
//     releases and returns give leases back;
//  2. the rate requests, demoted to checks when the lease outcomes already
//     block the batch (limiter.Pending), else as one batch of their own;
//  3. the batch rule (limiter.Commits) over the whole batch, a release
//     counting as a check (it never blocks). When the batch does not
//     commit, every lease a take of it took is given back (LeaseReturn of
//     the leases that expire at the take's reset, its own) and the take is
//     reported with Consumed false and its remaining before it.
//
// Between steps 1 and 3 the leases a non-committing batch took are held:
// another request may be denied for them (a conservative error, never an
// admission past the limit). A return that fails leaves them to expire
// after the lease TTL.
func (s *Store) Evaluate(ctx context.Context, batch []limiter.Request, out []limiter.Outcome) {
	if !slices.ContainsFunc(batch, leases) {
		s.rates.Evaluate(ctx, batch, out)
		return
	}
	// view is batch with releases as checks: the batch rule's reading.
	view := slices.Clone(batch)
	var leaseReqs, rateReqs []int
	for i := range view {
		if leases(view[i]) {
			if view[i].Lease != limiter.LeaseTake {
				view[i].Role = limiter.RoleCheck
			}
			leaseReqs = append(leaseReqs, i)
		} else {
			rateReqs = append(rateReqs, i)
		}
	}
	lreq, lout := gather(batch, leaseReqs)
	s.leases.Evaluate(ctx, lreq, lout)
	for k, i := range leaseReqs {
		out[i] = lout[k]
	}
	if len(rateReqs) > 0 {
		for _, i := range rateReqs {
			out[i] = limiter.Outcome{}
		}
		var p limiter.Pending
		p.Evaluate(ctx, view, out, s.rates.Evaluate)
	}
	if limiter.Commits(view, out) {
		return
	}
	var back []int
	for _, i := range leaseReqs {
		if out[i].Kind == limiter.Evaluated && out[i].Decision.Consumed {
			back = append(back, i)
		}
	}
	if len(back) == 0 {
		return
	}
	breq, bout := gather(batch, back)
	for k, i := range back {
		// The take's reset is the expiry of the leases it took: the
		// return gives back exactly those.
		breq[k].Lease, breq[k].LeaseAt = limiter.LeaseReturn, out[i].Decision.ResetAt.UnixMilli()
	}
	// The caller may have gone: the return still runs, bounded by the
	// store's own timeout.
	s.leases.Evaluate(context.WithoutCancel(ctx), breq, bout)
	for _, i := range back {
		d := &out[i].Decision
		d.Consumed = false
		d.Remaining = min(d.Limit, d.Remaining+batch[i].Cost)
	}
}

// Reset implements limiter.Resetter by the rate store's, whose states
// include the lease sets (limiter.ErrResetUnsupported when it has none).
func (s *Store) Reset(ctx context.Context, states []limiter.Request) (int, error) {
	if rs, ok := s.rates.(limiter.Resetter); ok {
		return rs.Reset(ctx, states)
	}
	return 0, limiter.ErrResetUnsupported
}

// ResetPolicy implements limiter.Resetter as Reset does.
func (s *Store) ResetPolicy(ctx context.Context, policyID string, revision uint32, b limiter.ResetBounds) (limiter.PolicyReset, error) {
	if rs, ok := s.rates.(limiter.Resetter); ok {
		return rs.ResetPolicy(ctx, policyID, revision, b)
	}
	return limiter.PolicyReset{}, limiter.ErrResetUnsupported
}

// leases reports whether r is a request of a concurrency policy.
func leases(r limiter.Request) bool { return r.Policy != nil && r.Policy.Leases() }

// gather copies the requests of batch at idx, with an outcome each.
func gather(batch []limiter.Request, idx []int) ([]limiter.Request, []limiter.Outcome) {
	reqs := make([]limiter.Request, len(idx))
	for k, i := range idx {
		reqs[k] = batch[i]
	}
	return reqs, make([]limiter.Outcome, len(idx))
}
