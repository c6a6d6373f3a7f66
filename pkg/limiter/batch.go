package limiter

import "context"

// Commits is the batch rule of Store: given the outcomes of checking every
// request of batch at one instant (nothing consumed yet), it reports whether
// the batch commits. It does iff every ordinary and probe request allows
// and, when the batch holds quota-mode requests (quota probes included), at
// least one of them allows. A request allows when its outcome is an allowed decision; a
// failed request (any other kind) counts as a denial, except that a
// fail-open policy's failure takes no part, whether a store reports it or
// its failure mode answered it (pkg/limiter/failover). Shadow and check
// requests (by Request.EffectiveRole) and settles (Request.Settles) never
// block; a probe (RoleProbe, RoleQuotaProbe) blocks as an ordinary (or
// quota-mode) request does, and never consumes.
//
// These are the reference's OVER_LIMIT rules, so exactly the requests Envoy
// lets through consume. The Lua batch program of pkg/lua applies the same
// rule inside Redis; the differential tests hold the two equal.
func Commits(batch []Request, out []Outcome) bool {
	commit, _ := decide(batch, out, false)
	return commit
}

// CheckOnly reports whether batch can no longer commit whatever its
// undecided requests answer. out holds, for each request, the outcome already
// known (a cached denial, a limit that can never fit, a request refused before
// it is sent) or the zero Outcome for a request still to be decided, which
// counts as allowing. When CheckOnly is true the caller sends the undecided
// requests as RoleCheck: they are reported and nothing is consumed, which is
// what the whole batch would have answered.
func CheckOnly(batch []Request, out []Outcome) bool {
	commit, _ := decide(batch, out, true)
	return !commit
}

// QuotaBlocks reports whether the quota-mode requests of batch block it:
// there is at least one and none allows (see Commits). A quota-mode request
// that denies is reported as over the limit only then.
func QuotaBlocks(batch []Request, out []Outcome) bool {
	_, blocks := decide(batch, out, false)
	return blocks
}

// decide applies the batch rule. With undecidedAllows, a zero Outcome counts
// as an allowed one.
func decide(batch []Request, out []Outcome, undecidedAllows bool) (commit, quotaBlocks bool) {
	commit = true
	quota, quotaAllows := 0, false
	for i := range batch {
		r := &batch[i]
		role := r.EffectiveRole()
		if !role.Blocks() || r.Settles() {
			continue
		}
		o := &out[i]
		var allows bool
		switch {
		case o.Kind == 0 && undecidedAllows:
			allows = true
		case abstains(r, o):
			continue
		case o.Kind == Evaluated:
			allows = o.Decision.Allowed
		}
		if role.Quota() {
			quota++
			quotaAllows = quotaAllows || allows
			continue
		}
		if !allows {
			commit = false
		}
	}
	quotaBlocks = quota > 0 && !quotaAllows
	return commit && !quotaBlocks, quotaBlocks
}

// Pending sends the part of a batch whose outcomes are still to be decided
// to a store. It is the one place where outcomes known before asking (a
// cached denial, a limit that can never fit, an invalid request, the
// store's own answers for the other limits) demote the rest of the batch
// to checks. The zero value is ready to use; a Pending reuses its buffers
// between calls and is not safe for concurrent use.
type Pending struct {
	reqs []Request
	outs []Outcome
	idx  []int
}

// Evaluate decides, with eval (a Store's Evaluate), the requests of batch
// whose outcome in out is still the zero Outcome, and writes their
// outcomes into out. When no outcome is known yet, eval gets batch and out
// as they are; when every one is, eval is not called. Otherwise eval gets
// copies of the undecided requests, in batch order, with zeroed outcomes;
// when the outcomes already known block the batch whatever the undecided
// ones answer (CheckOnly), every copy is RoleCheck: checked and reported,
// never consumed, which is what the whole batch answers; but a request
// that Charges keeps its role, since it records its cost whatever the
// batch answers. The copies stay valid until the next Evaluate or Release
// (a store may keep using them after it returns).
func (p *Pending) Evaluate(ctx context.Context, batch []Request, out []Outcome, eval func(context.Context, []Request, []Outcome)) {
	known := 0
	for i := range batch {
		if out[i].Kind != 0 {
			known++
		}
	}
	switch known {
	case 0:
		eval(ctx, batch, out)
		return
	case len(batch):
		return
	}
	demoted := CheckOnly(batch, out)
	p.reqs, p.idx = p.reqs[:0], p.idx[:0]
	for i := range batch {
		if out[i].Kind != 0 {
			continue
		}
		r := batch[i]
		if demoted && !r.Charges() {
			r.Role = RoleCheck
		}
		p.reqs = append(p.reqs, r)
		p.idx = append(p.idx, i)
	}
	if cap(p.outs) < len(p.reqs) {
		p.outs = make([]Outcome, len(p.reqs))
	}
	p.outs = p.outs[:len(p.reqs)]
	clear(p.outs)
	eval(ctx, p.reqs, p.outs)
	for k, i := range p.idx {
		out[i] = p.outs[k]
	}
}

// Release drops what the buffers refer to (policies, errors), so that a
// pooled Pending keeps no rule snapshot alive.
func (p *Pending) Release() {
	clear(p.reqs[:cap(p.reqs)])
	clear(p.outs[:cap(p.outs)])
}

// RoleOf is the role a limit is asked in: RoleQuota for a quota-mode limit,
// RoleProbe for a probe (a check that blocks: "would one more be admitted"),
// RoleQuotaProbe for a probe of a quota-mode limit, else RoleOrdinary. A
// shadow policy turns these into RoleShadow or RoleCheck by itself (see
// Request.EffectiveRole).
func RoleOf(quota, probe bool) Role {
	switch {
	case probe && quota:
		return RoleQuotaProbe
	case probe:
		return RoleProbe
	case quota:
		return RoleQuota
	}
	return RoleOrdinary
}

// Alone is the role a request plays in a part of a batch evaluated apart
// from the others (a Redis Cluster slot): a quota-mode limit cannot know
// whether the other quota-mode limits allow, so it is evaluated as a shadow
// one (consumed when allowed, never blocking) and a quota probe as a check,
// and the batch rule is decided over all the parts' outcomes.
func (r Role) Alone() Role {
	switch r {
	case RoleQuota:
		return RoleShadow
	case RoleQuotaProbe:
		return RoleCheck
	}
	return r
}
