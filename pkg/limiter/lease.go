package limiter

import (
	"context"
	"slices"
)

// EvaluateFunc evaluates part of a batch, as Store.Evaluate does.
type EvaluateFunc func(ctx context.Context, batch []Request, out []Outcome)

// HasLeases reports whether a request of batch is of a concurrency policy
// (Policy.Leases): a store then evaluates the batch with
// EvaluateWithLeases.
func HasLeases(batch []Request) bool {
	for i := range batch {
		if p := batch[i].Policy; p != nil && p.Leases() {
			return true
		}
	}
	return false
}

// BeginEvaluate is how every store's Evaluate begins, out already cut to
// the batch; it reports whether it answered the batch: an empty one, one
// whose ctx has ended (FailIfEnded, errors as "who: err"), and one that
// HasLeases, evaluated by EvaluateWithLeases with the store's rates and
// leases. Otherwise the store evaluates the batch, which holds rate
// requests only.
func BeginEvaluate(ctx context.Context, batch []Request, out []Outcome, who string, rates, leases EvaluateFunc) bool {
	if len(batch) == 0 || FailIfEnded(ctx, out, who) {
		return true
	}
	if HasLeases(batch) {
		EvaluateWithLeases(ctx, batch, out, rates, leases)
		return true
	}
	return false
}

// LeaseDecision is the Outcome of one lease request from Lease's reply r
// (OutcomeFromReply), its Decision.Consumed set when a take consumed
// (write). A store's lease evaluation answers each request with it.
func LeaseDecision(req *Request, r Reply, write bool, src Source) Outcome {
	o := OutcomeFromReply(req.Policy, r, src)
	if o.Kind == Evaluated && req.Lease == LeaseTake {
		o.Decision.Consumed = write
	}
	return o
}

// EvaluateWithLeases is Store.Evaluate for a batch that holds requests of
// concurrency policies (HasLeases), given the store's evaluation of rate
// requests (rates: its Evaluate, which never sees a lease request) and of
// lease requests (leases: each request on its own, in order, through
// Lease, answered by LeaseDecision). The batch stays all or nothing, in
// three steps:
//
//  1. every lease request, in batch order: takes take their leases (a
//     check or a probe only asks), releases and returns give leases back;
//  2. the rate requests, demoted to checks when the lease outcomes already
//     block the batch (Pending), else evaluated as one batch of their own;
//  3. the batch rule (Commits) over the whole batch, a release counting as
//     a check (it never blocks). When the batch does not commit, every
//     lease a take of it took is given back (LeaseReturn of the leases
//     that expire at the take's reset, its own) and the take is reported
//     with Consumed false and its remaining before it.
//
// Between steps 1 and 3 the leases a non-committing batch took are held:
// another request may be denied for them (a conservative error, never an
// admission past the limit). A return that fails leaves them to expire
// after the lease TTL.
func EvaluateWithLeases(ctx context.Context, batch []Request, out []Outcome, rates, leases EvaluateFunc) {
	// view is batch with releases as checks: the batch rule's reading.
	view := slices.Clone(batch)
	var leaseReqs, rateReqs []int
	for i := range view {
		if p := view[i].Policy; p != nil && p.Leases() {
			if view[i].Lease != LeaseTake {
				view[i].Role = RoleCheck
			}
			leaseReqs = append(leaseReqs, i)
		} else {
			rateReqs = append(rateReqs, i)
		}
	}
	lreq, lout := gather(batch, leaseReqs)
	leases(ctx, lreq, lout)
	for k, i := range leaseReqs {
		out[i] = lout[k]
	}
	if len(rateReqs) > 0 {
		for _, i := range rateReqs {
			out[i] = Outcome{}
		}
		var p Pending
		p.Evaluate(ctx, view, out, rates)
	}
	if Commits(view, out) {
		return
	}
	var back []int
	for _, i := range leaseReqs {
		if out[i].Kind == Evaluated && out[i].Decision.Consumed {
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
		breq[k].Lease, breq[k].LeaseAt = LeaseReturn, out[i].Decision.ResetAt.UnixMilli()
	}
	// The caller may have gone: the return still runs, bounded by the
	// store's own timeout.
	leases(context.WithoutCancel(ctx), breq, bout)
	for _, i := range back {
		d := &out[i].Decision
		d.Consumed = false
		d.Remaining = min(d.Limit, d.Remaining+batch[i].Cost)
	}
}

// gather copies the requests of batch at idx, with an outcome each.
func gather(batch []Request, idx []int) ([]Request, []Outcome) {
	reqs := make([]Request, len(idx))
	for k, i := range idx {
		reqs[k] = batch[i]
	}
	return reqs, make([]Outcome, len(idx))
}
