package descriptors

import (
	"strings"
)

// Match finds the rule that limits one descriptor of domain, with the
// reference's precedence: entry by entry, an exact value beats a wildcard
// value (the first matching one in file order), which beats the key-only
// rule; a nested list is entered only through the entry that matched, with
// no backtracking; and the rule must sit at the depth of the descriptor's
// last entry. ok is false when no rule with a rate_limit (or unlimited)
// matches: the descriptor then has no limit.
//
// The Subject digest is computed for limited rules (it is zero for an
// unlimited rule, which never reaches a store). For a descriptor with
// rate_limits, Rule is the first limit, Rule.Limits lists them all and
// Subjects holds the subject of each.
func (s *Snapshot) Match(domain string, entries []Entry) (Match, bool) {
	if s == nil || len(entries) == 0 || len(entries) > MaxDepth {
		return Match{}, false
	}
	d := s.domains[domain]
	if d == nil {
		return Match{}, false
	}
	var path [MaxDepth]*node
	lv := d.root
	for i, e := range entries {
		if lv == nil {
			return Match{}, false
		}
		n := lv.lookup(e.Key, e.Value)
		if n == nil {
			return Match{}, false
		}
		path[i] = n
		lv = n.children
	}
	r := path[len(entries)-1].rule
	if r == nil {
		return Match{}, false
	}
	m := Match{Rule: r}
	if r.Policy != nil {
		m.Subject = s.subject(r.Policy.ID(), entries, path[:len(entries)])
		if r.Colocate != "" {
			m.Tag = s.tag(entries[r.colocateAt], path[r.colocateAt])
		}
		if r.Limits != nil {
			s.limitSubjects(&m, entries, path[:len(entries)])
		}
	}
	return m, true
}

func (lv *level) lookup(key, value string) *node {
	g := lv.byKey[key]
	if g == nil {
		return nil
	}
	if n := g.exact[value]; n != nil {
		return n
	}
	for _, w := range g.wildcards {
		if globMatch(w.parts, value) {
			return w
		}
	}
	return g.keyOnly
}

// globMatch reports whether value matches the pattern split at '*' into
// parts (so len(parts) >= 2). Time is linear in len(value) per part.
func globMatch(parts []string, value string) bool {
	first, last := parts[0], parts[len(parts)-1]
	if len(value) < len(first)+len(last) || !strings.HasPrefix(value, first) || !strings.HasSuffix(value, last) {
		return false
	}
	mid := value[len(first) : len(value)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(mid, p)
		if i < 0 {
			return false
		}
		mid = mid[i+len(p):]
	}
	return true
}
