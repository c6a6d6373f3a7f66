package descriptors

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// MatchBucket matches an RLQS bucket of domain (a BucketId's map, which
// has no order): it returns the Match that Match gives the descriptor
// holding the bucket's entries in the order the domain's tree names them,
// so a bucket and that descriptor share rule, subjects and tag. From the
// root, each level takes the one unused key whose value one of its
// descriptors matches (Match's precedence: exact, wildcard, key-only) and
// descends into that descriptor. The bucket is refused (ok false) when two
// keys are named at one level (a map cannot say which comes first), when a
// key is left over, when the path ends on a descriptor without a rule, for
// an unknown domain, and beyond MaxDepth entries. A path of the tree that
// uses one key at two depths is out of a bucket's reach: a map holds a key
// once. The reason names keys, never values.
func (s *Snapshot) MatchBucket(domain string, bucket map[string]string) (m Match, reason string, ok bool) {
	entries, reason := s.bucketEntries(domain, bucket)
	if reason != "" {
		return Match{}, reason, false
	}
	if m, ok = s.Match(domain, entries); !ok {
		return Match{}, fmt.Sprintf("no rule at the matched path: the descriptor of its last key %q has no rate_limit", entries[len(entries)-1].Key), false
	}
	return m, "", true
}

// ExplainBucket is Explain of the bucket's entries in the order
// MatchBucket finds them, with MatchBucket's reason when it cannot order
// them.
func (s *Snapshot) ExplainBucket(domain string, bucket map[string]string) explanation {
	entries, reason := s.bucketEntries(domain, bucket)
	if reason == "" {
		return s.Explain(domain, entries)
	}
	ex := explanation{Reason: reason}
	if len(entries) > 0 {
		ex.Steps = s.Explain(domain, entries).Steps
	}
	return ex
}

// bucketEntries orders the entries of bucket as the tree of domain names
// them (see MatchBucket). When it cannot place every entry it returns the
// ones it placed, in order, and why.
func (s *Snapshot) bucketEntries(domain string, bucket map[string]string) ([]Entry, string) {
	switch {
	case !s.HasDomain(domain):
		return nil, "no rules for this domain"
	case len(bucket) > MaxDepth:
		return nil, fmt.Sprintf("more than %d entries", MaxDepth)
	case len(bucket) == 0:
		return nil, "the bucket has no entries"
	}
	// entries[:depth] are placed in tree order; entries[depth:] are left.
	entries := make([]Entry, 0, len(bucket))
	for k, v := range bucket {
		entries = append(entries, Entry{Key: k, Value: v})
	}
	depth := 0
	for lv := s.domains[domain].root; lv != nil && depth < len(entries); depth++ {
		at, named := -1, 0
		var next *node
		for i, e := range entries[depth:] {
			if n := lv.lookup(e.Key, e.Value); n != nil {
				at, next, named = depth+i, n, named+1
			}
		}
		if named == 0 {
			break
		}
		if named > 1 {
			return entries[:depth], ambiguous(lv, entries[depth:], depth+1)
		}
		entries[depth], entries[at] = entries[at], entries[depth]
		lv = next.children
	}
	if left := entries[depth:]; len(left) > 0 {
		k := slices.MinFunc(left, func(a, b Entry) int { return strings.Compare(a.Key, b.Key) }).Key
		reason := fmt.Sprintf("key %q names no descriptor on the matched path", k)
		if len(left) > 1 {
			reason += fmt.Sprintf(" (and %d more)", len(left)-1)
		}
		return entries[:depth], reason
	}
	return entries, ""
}

// ambiguous says which keys of left lv names at level (from 1).
func ambiguous(lv *level, left []Entry, level int) string {
	var keys []string
	for _, e := range left {
		if lv.lookup(e.Key, e.Value) != nil {
			keys = append(keys, e.Key)
		}
	}
	slices.Sort(keys)
	for i, k := range keys {
		keys[i] = strconv.Quote(k)
	}
	last := len(keys) - 1
	return fmt.Sprintf("keys %s and %s each name a descriptor at level %d: a bucket cannot order them", strings.Join(keys[:last], ", "), keys[last], level)
}
