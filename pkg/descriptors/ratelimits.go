package descriptors

import (
	"strconv"

	"gopkg.in/yaml.v3"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// Several limits on one descriptor: `rate_limits:`, a list of rate_limit
// blocks, in place of `rate_limit:`. Each limit compiles to a Rule of its own
// (its own policy, policy ID, subject digest and state) that shares the
// descriptor's fields; the descriptor's node holds the first, and every one
// lists all of them in Rule.Limits. A match returns every limit, and pkg/rls
// evaluates them all in the call's one all-or-nothing batch.

// maxLimitsPerDescriptor bounds the rate_limits list of one descriptor.
const maxLimitsPerDescriptor = 16

// rateLimitList parses a descriptor's rate_limits: a non-empty list of at
// most MaxLimitsPerDescriptor rate_limit mappings. It returns nil when the
// list or any of its entries is unusable (the problems are reported).
func (p *parser) rateLimitList(n *yaml.Node) []*rawLimit {
	r := p.resolve(n)
	if r == nil {
		return nil
	}
	if r.Kind != yaml.SequenceNode {
		p.errorf(r, "rate_limits must be a list of rate_limit mappings, got %s", describe(r))
		return nil
	}
	if len(r.Content) == 0 {
		p.errorf(r, "rate_limits must not be empty: list at least one limit")
		return nil
	}
	if len(r.Content) > maxLimitsPerDescriptor {
		p.errorf(r, "rate_limits lists %d limits; a descriptor takes at most %d", len(r.Content), maxLimitsPerDescriptor)
		return nil
	}
	out := make([]*rawLimit, 0, len(r.Content))
	ok := true
	for i, c := range r.Content {
		// rateLimit refuses what is not a mapping, null included.
		rl := p.rateLimit(c, "rate_limits["+strconv.Itoa(i)+"]")
		if rl == nil {
			ok = false
			continue
		}
		out = append(out, rl)
	}
	if !ok {
		return nil
	}
	return out
}

// ruleList compiles the rate_limits of descriptor rd (matched at node n
// along path): one Rule per limit, all in Rule.Limits, the first at n.
func (c *compiler) ruleList(d *domain, n *node, rd *rawDesc, path []pathSeg, pending *[]*pendingRule) {
	at := rd.limitsPos
	ok := rd.limits != nil // nil: the problems are reported
	if rd.limitPos.set() {
		c.ps.add(c.file, at.line, at.col, "a descriptor takes either rate_limit or rate_limits, not both")
		ok = false
	}
	if rd.policyPos.set() {
		c.ps.add(c.file, at.line, at.col, "a descriptor takes either policy or rate_limits, not both")
		ok = false
	}
	if rd.quota {
		c.ps.add(c.file, at.line, at.col, "quota_mode is not supported with rate_limits: a quota-mode descriptor is one quota, so give it one rate_limit")
		ok = false
	}
	specs := make([]limitSpec, len(rd.limits))
	for i, rl := range rd.limits {
		what := "rate_limits[" + strconv.Itoa(i) + "]"
		if rl.unlimitedPos.set() {
			c.ps.add(c.file, rl.unlimitedPos.line, rl.unlimitedPos.col, "%s: unlimited is not allowed in rate_limits (a descriptor that is never limited takes rate_limit: {unlimited: true})", what)
			ok = false
			continue
		}
		spec, valid := c.checkLimit(rl, what)
		specs[i] = spec
		ok = ok && valid
	}
	if !ok {
		return
	}
	rules := make([]*Rule, len(rd.limits))
	for i, rl := range rd.limits {
		r := c.newRule(d, n, rd, specs[i], rl, path)
		r.LimitIndex = i
		if i > 0 {
			// The reference's stat key names the descriptor; the second
			// and later limits need stat names of their own.
			r.StatKey += ".rate_limits_" + strconv.Itoa(i)
		}
		rules[i] = r
	}
	c.colocate(rules[0], rd, path)
	for i, r := range rules {
		r.Limits = rules
		r.Colocate, r.colocateAt = rules[0].Colocate, rules[0].colocateAt
		c.addRule(d, r, specs[i], rd.limits[i], rd.limits[i].pos, path, pending)
	}
	n.rule = rules[0]
}

// limitSubjects completes m, the match of a rule with Limits, with the
// subject of every limit. The limits of one descriptor share one placement
// Tag, so that a sharded store evaluates them in one atomic program: the
// colocate Tag when the rule sets one, else the Tag a zero Tag stands for
// with the first limit's subject (its first 8 bytes), which keeps that
// limit's state where a single rate_limit on the descriptor has it.
func (s *Snapshot) limitSubjects(m *Match, entries []Entry, path []*node) {
	limits := m.Rule.Limits
	m.Subjects = make([]limiter.SubjectDigest, len(limits))
	m.Subjects[0] = m.Subject
	for i := 1; i < len(limits); i++ {
		m.Subjects[i] = s.subject(limits[i].Policy.ID(), entries, path)
	}
	if m.Tag == (limiter.Tag{}) {
		copy(m.Tag[:], m.Subject[:len(m.Tag)])
	}
}
