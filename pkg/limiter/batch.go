package limiter

// Commits is the batch rule of Store: given the outcomes of checking every
// request of batch at one instant (nothing consumed yet), it reports whether
// the batch commits. It does iff every ordinary and probe request allows
// and, when the batch holds quota-mode requests (quota probes included), at
// least one of them allows. A request allows when its outcome is an allowed decision; a
// failed request (any other kind) counts as a denial, except that a
// fail-open policy's failure takes no part (Envoy is answered OK for it, as pkg/rls does). Shadow and check
// requests (by Request.EffectiveRole) never block; a probe (RoleProbe,
// RoleQuotaProbe) blocks as an ordinary (or quota-mode) request does, and
// never consumes.
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
		if !role.Blocks() {
			continue
		}
		o := &out[i]
		var allows bool
		switch {
		case o.Kind == Evaluated:
			allows = o.Decision.Allowed
		case o.Kind == 0 && undecidedAllows:
			allows = true
		case r.Policy != nil && r.Policy.FailureMode() == FailOpen:
			continue
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
