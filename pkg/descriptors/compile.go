package descriptors

import (
	"slices"
	"strings"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// compiler builds a Snapshot from parsed files.
type compiler struct {
	ps      *problems
	file    string
	domains map[string]*domain
	ids     map[string]string // policy ID -> rule source, across domains
	// defaultFailure is the failure mode of rules that set none
	// (Options.DefaultFailureMode).
	defaultFailure limiter.FailureMode
	// defaultCharge is the charge of rules that set none and have no
	// penalty box (Options.DefaultCharge).
	defaultCharge limiter.Charge
	// shadowAll puts every rule in shadow mode (Options.ShadowAll).
	shadowAll bool
}

// pendingRule is a limited rule waiting for its policy ID.
type pendingRule struct {
	rule   *Rule
	spec   limitSpec
	path   []pathSeg
	pos    pos
	file   string
	shadow bool
}

func (c *compiler) addFile(rf *rawFile) {
	c.file = rf.name
	if rf.domain == "" {
		return // already reported
	}
	if prev, dup := c.domains[rf.domain]; dup {
		c.ps.add(rf.name, rf.domainPos.line, rf.domainPos.col, "duplicate domain %q: it is already defined in %s (one domain per file)", truncate(rf.domain, 80), prev.file)
		return
	}
	d := &domain{name: rf.domain, file: rf.name, root: newLevel(), fields: c.ps.fields[rf.name]}
	named := map[string]limitSpec{}
	for _, name := range rf.policyOrder {
		if ls, ok := c.checkLimit(rf.policies[name], "policies."+name); ok {
			named[name] = ls
		}
	}
	d.policyNames = rf.policyOrder
	var pending []*pendingRule
	c.level(d, d.root, rf, named, rf.descriptors, nil, &pending)
	c.finishDomain(d, pending)
	c.domains[rf.domain] = d
}

func newLevel() *level { return &level{byKey: map[string]*keyGroup{}} }

func (c *compiler) level(d *domain, lv *level, rf *rawFile, named map[string]limitSpec, descs []*rawDesc, path []pathSeg, pending *[]*pendingRule) {
	for _, rd := range descs {
		if rd.key == "" {
			continue // reported by the parser
		}
		g := lv.byKey[rd.key]
		if g == nil {
			g = &keyGroup{exact: map[string]*node{}}
			lv.byKey[rd.key] = g
		}
		n := &node{src: rd.pos}
		seg := pathSeg{key: rd.key, value: rd.value}
		display := rd.key
		if rd.value != "" {
			display += "=" + rd.value
		}
		var first *node
		switch {
		case rd.value == "":
			first = g.keyOnly
			if first == nil {
				g.keyOnly = n
			}
		case strings.Contains(rd.value, "*"):
			for _, w := range g.wildcards {
				if w.pattern == rd.value {
					first = w
				}
			}
			if first == nil {
				n.pattern = rd.value
				n.parts = strings.Split(rd.value, "*")
				g.wildcards = append(g.wildcards, n)
			}
		default:
			first = g.exact[rd.value]
			if first == nil {
				g.exact[rd.value] = n
			}
		}
		if first != nil {
			c.ps.add(c.file, rd.pos.line, rd.pos.col, "duplicate descriptor composite key %q (first defined at %s)", truncate(joinPath(d.name, path)+"/"+display, 200), d.within(first.src))
			continue
		}
		if rd.share {
			if n.pattern == "" {
				c.ps.add(c.file, rd.sharePos.line, rd.sharePos.col, "share_threshold needs a wildcard value (a value containing '*')")
			} else {
				n.share = true
			}
		}
		childPath := append(path[:len(path):len(path)], seg)
		if rd.limit != nil || rd.policy != "" || rd.limitsPos.set() {
			c.rule(d, n, rd, named, childPath, pending)
		}
		if len(rd.children) > 0 {
			n.children = newLevel()
			c.level(d, n.children, rf, named, rd.children, childPath, pending)
		}
	}
}

func (c *compiler) rule(d *domain, n *node, rd *rawDesc, named map[string]limitSpec, path []pathSeg, pending *[]*pendingRule) {
	if rd.limitsPos.set() {
		c.ruleList(d, n, rd, path, pending)
		return
	}
	var ls limitSpec
	var rl *rawLimit
	switch {
	case rd.limit != nil && rd.policy != "":
		c.ps.add(c.file, rd.policyPos.line, rd.policyPos.col, "a descriptor takes either rate_limit or policy, not both")
		return
	case rd.policy != "":
		spec, known := named[rd.policy]
		if !known {
			if slices.Contains(d.policyNames, rd.policy) {
				return // the policy itself is invalid and was reported
			}
			c.ps.add(c.file, rd.policyPos.line, rd.policyPos.col, "unknown policy %q (not in the top-level policies map of this file)", truncate(rd.policy, 80))
			return
		}
		ls = spec
	default:
		rl = rd.limit
		spec, ok := c.checkLimit(rl, "rate_limit")
		if !ok {
			return
		}
		ls = spec
	}
	r := c.newRule(d, n, rd, ls, rl, path)
	c.colocate(r, rd, path)
	n.rule = r
	c.addRule(d, r, ls, rl, rd.pos, path, pending)
}

// newRule builds the rule of descriptor rd (a match at node n along path)
// that applies limit ls; rl is the rate_limit block ls came from (nil for a
// named policy).
func (c *compiler) newRule(d *domain, n *node, rd *rawDesc, ls limitSpec, rl *rawLimit, path []pathSeg) *Rule {
	r := &Rule{
		Domain:          d.name,
		Unit:            ls.unit,
		UnitMultiplier:  ls.mult,
		RequestsPerUnit: ls.rpu,
		Unlimited:       ls.unlimited,
		ShadowMode:      rd.shadow || c.shadowAll,
		QuotaMode:       rd.quota,
		DetailedMetric:  rd.detailed,
		ValueToMetric:   rd.valueToMetric,
		ShareThreshold:  n.share,
		Burst:           ls.burst,
		Headers:         ls.headers,
		PolicyName:      rd.policy,
		Metadata:        rd.metadata,
		Path:            joinPath(d.name, path),
		segs:            slices.Clone(path),
		Key:             lastKey(path),
		StatKey:         statKey(d.name, path),
		Source:          d.where(rd.pos),
	}
	if ls.unlimited {
		r.UnitMultiplier = 0
	}
	if rl != nil {
		r.Name = rl.name
		for _, ref := range rl.replaces {
			if ref.name == rl.name {
				c.ps.add(c.file, ref.pos.line, ref.pos.col, "replaces should not contain the name of the same descriptor (%q)", truncate(ref.name, 80))
				continue
			}
			r.Replaces = append(r.Replaces, ref.name)
		}
	}
	return r
}

// colocate sets r's Colocate from rd's colocate key, which must name an
// entry of path.
func (c *compiler) colocate(r *Rule, rd *rawDesc, path []pathSeg) {
	if rd.colocate == "" {
		return
	}
	for i, seg := range path {
		if seg.key == rd.colocate {
			r.Colocate, r.colocateAt = rd.colocate, i
			return
		}
	}
	c.ps.add(c.file, rd.colocatePos.line, rd.colocatePos.col, "colocate names %q, which is not the key of this descriptor or of an enclosing one", truncate(rd.colocate, 80))
}

// addRule records r in its domain and queues it for its policy ID; at is
// where a problem with the policy is reported.
func (c *compiler) addRule(d *domain, r *Rule, ls limitSpec, rl *rawLimit, at pos, path []pathSeg, pending *[]*pendingRule) {
	d.rules = append(d.rules, r)
	*pending = append(*pending, &pendingRule{rule: r, spec: ls, path: path, pos: at, file: c.file, shadow: r.ShadowMode})
	if rl != nil {
		d.replaceRefs = append(d.replaceRefs, rl.replaces...)
	}
}

// lastKey is Rule.Key: the key of the path's last level.
func lastKey(path []pathSeg) string {
	if len(path) == 0 {
		return ""
	}
	return path[len(path)-1].key
}

// joinPath is Rule.Path: the domain, then key or key=value per level,
// joined by '/'.
func joinPath(domain string, path []pathSeg) string {
	return joinSegs(domain, path, '/', '=')
}

// statKey is Rule.StatKey: the domain, then key or key_value per level,
// joined by '.'.
func statKey(domain string, path []pathSeg) string {
	return joinSegs(domain, path, '.', '_')
}

// joinSegs writes domain, then for each level sep and its key, followed by
// kv and its value when the level has one.
func joinSegs(domain string, path []pathSeg, sep, kv byte) string {
	var b strings.Builder
	b.WriteString(domain)
	for _, s := range path {
		b.WriteByte(sep)
		b.WriteString(s.key)
		if s.value != "" {
			b.WriteByte(kv)
			b.WriteString(s.value)
		}
	}
	return b.String()
}

// finishDomain checks replaces references and assigns policy IDs.
func (c *compiler) finishDomain(d *domain, pending []*pendingRule) {
	names := map[string]int{}
	for _, r := range d.rules {
		if r.Name != "" {
			names[r.Name]++
		}
	}
	for _, ref := range d.replaceRefs {
		if names[ref.name] == 0 {
			c.ps.add(c.file, ref.pos.line, ref.pos.col, "replaces names %q, but no rule in domain %q has that name", truncate(ref.name, 80), truncate(d.name, 80))
		}
	}
	d.replaceRefs = nil
	for _, pr := range pending {
		r := pr.rule
		if r.Unlimited {
			continue
		}
		var id string
		if r.Name != "" && names[r.Name] == 1 {
			id = nameID(d.name, r.Name)
		} else {
			id = limitPathID(d.name, pr.path, r.LimitIndex)
			r.idFromPath = true
		}
		if cal := pr.spec.calendar; cal != nil {
			id = calendarID(id, cal.Unit.String(), pr.spec.zone)
		}
		if other, dup := c.ids[id]; dup {
			c.ps.add(pr.file, pr.pos.line, pr.pos.col, "policy ID %q of rule %q collides with the rule at %s; rename one of them", id, truncate(r.Path, 200), other)
			continue
		}
		c.ids[id] = r.Source
		p, err := pr.spec.policy(id, pr.shadow)
		if err != nil {
			c.ps.add(pr.file, pr.pos.line, pr.pos.col, "rate_limit: %s", policyReason(err))
			continue
		}
		r.Policy = p
	}
}

// compile builds a snapshot from parsed files; problems go to ps.
func compile(files []*rawFile, ps *problems, opts Options) map[string]*domain {
	c := &compiler{ps: ps, domains: map[string]*domain{}, ids: map[string]string{}, defaultFailure: opts.DefaultFailureMode,
		defaultCharge: opts.DefaultCharge, shadowAll: opts.ShadowAll}
	for _, rf := range files {
		c.addFile(rf)
	}
	return c.domains
}
