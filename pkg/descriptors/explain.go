package descriptors

import (
	"fmt"
)

// How a descriptor entry found its rule node (Step.How).
const (
	howExact    = "exact"    // a descriptor names the request's value
	howWildcard = "wildcard" // a descriptor's `*` pattern matches it
	howKeyOnly  = "key_only" // a descriptor with the key and no value
	howNone     = "none"     // nothing at this level matches
)

// Step is how one entry of a descriptor was matched, level by level. It
// holds configured strings only, never the request's value.
type Step struct {
	Key string `json:"key"`
	// How is HowExact, HowWildcard, HowKeyOnly or HowNone.
	How string `json:"how"`
	// Pattern is the configured pattern of a wildcard match.
	Pattern string `json:"pattern,omitempty"`
	// Source is "file:line" of the descriptor the entry matched ("name:field"
	// in a Document).
	Source string `json:"source,omitempty"`
	// Skipped says which descriptors of the level a more general match
	// passed over, and why (precedence: exact, then wildcards in file
	// order, then key-only).
	Skipped []string `json:"skipped,omitempty"`
}

// explanation is the matcher's account of one descriptor: every level
// walked and, when no rule applies, why. Match and Matched are what Match
// returns.
type explanation struct {
	Steps   []Step
	Match   Match
	Matched bool
	// Reason says why nothing matched ("" when Matched).
	Reason string
}

// Explain matches entries as Match does and says how each level was
// decided. It never puts a request value in its answer.
func (s *Snapshot) Explain(domain string, entries []Entry) explanation {
	var ex explanation
	ex.Match, ex.Matched = s.Match(domain, entries)
	switch {
	case s == nil || s.domains[domain] == nil:
		ex.Reason = "no rules for this domain"
		return ex
	case len(entries) == 0:
		ex.Reason = "the descriptor has no entries"
		return ex
	case len(entries) > MaxDepth:
		ex.Reason = fmt.Sprintf("more than %d entries", MaxDepth)
		return ex
	}
	d := s.domains[domain]
	lv := d.root
	var last *node
	for i, e := range entries {
		if lv == nil {
			ex.Reason = fmt.Sprintf("the rule matched by entry %d (%q) has no nested descriptors: the request has more entries than the rules", i, entries[i-1].Key)
			return ex
		}
		st, n := lv.explain(d, e)
		ex.Steps = append(ex.Steps, st)
		if n == nil {
			ex.Reason = fmt.Sprintf("entry %d: no descriptor with key %q matches at this level", i+1, e.Key)
			return ex
		}
		last, lv = n, n.children
	}
	if !ex.Matched {
		switch {
		case last.rule == nil:
			ex.Reason = "the descriptor matched by the last entry has no rate_limit: a rule must sit at the depth of the last entry"
		default:
			ex.Reason = "no rule applies"
		}
	}
	return ex
}

// explain is lookup with its reasons.
func (lv *level) explain(d *domain, e Entry) (Step, *node) {
	st := Step{Key: e.Key, How: howNone}
	g := lv.byKey[e.Key]
	if g == nil {
		st.Skipped = append(st.Skipped, "no descriptor has this key at this level")
		return st, nil
	}
	at := func(n *node) string { return d.where(n.src) }
	if n := g.exact[e.Value]; n != nil {
		st.How, st.Source = howExact, at(n)
		if len(g.wildcards) > 0 || g.keyOnly != nil {
			st.Skipped = append(st.Skipped, "wildcard and key-only descriptors: an exact value wins")
		}
		return st, n
	}
	if len(g.exact) > 0 {
		st.Skipped = append(st.Skipped, fmt.Sprintf("%d descriptor(s) with an exact value: none equals the request's", len(g.exact)))
	}
	for _, w := range g.wildcards {
		if globMatch(w.parts, e.Value) {
			st.How, st.Pattern, st.Source = howWildcard, w.pattern, at(w)
			if g.keyOnly != nil {
				st.Skipped = append(st.Skipped, "the key-only descriptor: a matching wildcard wins")
			}
			return st, w
		}
		st.Skipped = append(st.Skipped, fmt.Sprintf("wildcard %q at %s does not match", w.pattern, at(w)))
	}
	if g.keyOnly != nil {
		st.How, st.Source = howKeyOnly, at(g.keyOnly)
		return st, g.keyOnly
	}
	return st, nil
}
