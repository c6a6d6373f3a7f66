package descriptors

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

const bucketRules = `domain: b
descriptors:
  - key: a
    colocate: a
    rate_limit: {unit: second, requests_per_unit: 1}
    descriptors:
      - key: b
        rate_limit: {unit: minute, requests_per_unit: 2}
        descriptors:
          - key: c
            colocate: a
            rate_limits:
              - {unit: second, requests_per_unit: 3}
              - {unit: hour, requests_per_unit: 30}
  - key: path
    value: /admin
    rate_limit: {unit: second, requests_per_unit: 4}
  - key: path
    value: /api/*
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 5}
  - key: path
    rate_limit: {unit: hour, requests_per_unit: 6}
  - key: shared
    value: team-*
    share_threshold: true
    rate_limit: {unit: second, requests_per_unit: 7}
  - key: x
    rate_limit: {unit: second, requests_per_unit: 8}
    descriptors:
      - key: y
        rate_limit: {unit: second, requests_per_unit: 9}
  - key: y
    value: only
    descriptors:
      - key: x
        rate_limit: {unit: second, requests_per_unit: 10}
  - key: exactonly
    value: v1
    rate_limit: {unit: second, requests_per_unit: 11}
  - key: placeholder
    descriptors:
      - key: inner
        rate_limit: {unit: second, requests_per_unit: 12}
  - key: free
    rate_limit: {unlimited: true}
`

// TestMatchBucket: a bucket (an unordered map) selects the rule, subject
// and tag of the RLS descriptor holding its entries in tree order, whatever
// order the map yields them in; a bucket whose order the tree cannot decide,
// or with a key no descriptor on the path names, is refused with a reason
// that names keys only, never values.
func TestMatchBucket(t *testing.T) {
	s := loadText(t, bucketRules)
	tooMany := map[string]string{}
	for i := range MaxDepth + 1 {
		tooMany[fmt.Sprintf("k%d", i)] = fmt.Sprintf("rawval-%d", i)
	}
	tests := []struct {
		name   string
		s      *Snapshot
		domain string
		bucket map[string]string
		tree   []string // the entries ("k=v") in tree order; nil: refused
		path   string   // Rule.Path of the match
		reason string   // in the refusal's reason
	}{
		{"exact value", s, "b", map[string]string{"path": "/admin"}, []string{"path=/admin"}, "b/path=/admin", ""},
		{"wildcard then nested key-only", s, "b", map[string]string{"user": "rawval-u", "path": "/api/rawval-p"},
			[]string{"path=/api/rawval-p", "user=rawval-u"}, "b/path=/api/*/user", ""},
		{"key-only when no value matches", s, "b", map[string]string{"path": "rawval-p"}, []string{"path=rawval-p"}, "b/path", ""},
		{"nested a then b", s, "b", map[string]string{"b": "rawval-b", "a": "rawval-a"}, []string{"a=rawval-a", "b=rawval-b"}, "b/a/b", ""},
		{"three levels, rate_limits, colocate", s, "b", map[string]string{"c": "rawval-c", "b": "rawval-b", "a": "rawval-a"},
			[]string{"a=rawval-a", "b=rawval-b", "c=rawval-c"}, "b/a/b/c", ""},
		{"share_threshold", s, "b", map[string]string{"shared": "team-rawval"}, []string{"shared=team-rawval"}, "b/shared=team-*", ""},
		{"unlimited", s, "b", map[string]string{"free": "rawval-f"}, []string{"free=rawval-f"}, "b/free", ""},
		{"a value no root descriptor matches leaves its key to a lower level", s, "b", map[string]string{"y": "rawval-y", "x": "rawval-x"},
			[]string{"x=rawval-x", "y=rawval-y"}, "b/x/y", ""},

		{"two keys named at one level", s, "b", map[string]string{"y": "only", "x": "rawval-x"}, nil, "",
			`keys "x" and "y" each name a descriptor at level 1`},
		{"leftover key", s, "b", map[string]string{"a": "rawval-a", "zz": "rawval-z"}, nil, "",
			`key "zz" names no descriptor on the matched path`},
		{"leftover keys: the first by name", s, "b", map[string]string{"a": "rawval-a", "zz": "rawval-z", "yy": "rawval-y"}, nil, "",
			`key "yy" names no descriptor on the matched path (and 1 more)`},
		{"key of a lower level only", s, "b", map[string]string{"b": "rawval-b"}, nil, "", `key "b" names no descriptor`},
		{"value no descriptor of its key matches", s, "b", map[string]string{"exactonly": "rawval-e"}, nil, "", `key "exactonly" names no descriptor`},
		{"no rule at the matched path", s, "b", map[string]string{"placeholder": "rawval-p"}, nil, "", "has no rate_limit"},
		{"empty bucket", s, "b", map[string]string{}, nil, "", "the bucket has no entries"},
		{"unknown domain", s, "nope", map[string]string{"a": "rawval-a"}, nil, "", "no rules for this domain"},
		{"nil snapshot", nil, "b", map[string]string{"a": "rawval-a"}, nil, "", "no rules for this domain"},
		{"more than MaxDepth entries", s, "b", tooMany, nil, "", fmt.Sprintf("more than %d entries", MaxDepth)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var first string
			// Map iteration order is random: every run sees another order.
			for run := range 20 {
				m, reason, ok := tt.s.MatchBucket(tt.domain, tt.bucket)
				if strings.Contains(reason, "rawval") {
					t.Fatalf("run %d: a request value in the reason %q", run, reason)
				}
				if run == 0 {
					first = reason
				} else if reason != first {
					t.Fatalf("run %d: reason %q, first run %q", run, reason, first)
				}
				if tt.tree == nil {
					if ok || m.Rule != nil || !strings.Contains(reason, tt.reason) {
						t.Fatalf("run %d: ok %v rule %v reason %q, want refused with %q", run, ok, m.Rule, reason, tt.reason)
					}
					continue
				}
				if !ok || reason != "" {
					t.Fatalf("run %d: refused: %q", run, reason)
				}
				if m.Rule.Path != tt.path {
					t.Fatalf("run %d: path %q, want %q", run, m.Rule.Path, tt.path)
				}
				want, wok := s.Match(tt.domain, e(tt.tree...))
				if !wok {
					t.Fatalf("Match(%v) does not match", tt.tree)
				}
				if m.Rule != want.Rule || m.Subject != want.Subject || m.Tag != want.Tag || !slices.Equal(m.Subjects, want.Subjects) {
					t.Fatalf("run %d: %+v, Match in tree order %+v", run, m, want)
				}
			}
		})
	}
}

// TestMatchBucketSharesLimits: what a bucket gets from a rule with several
// limits and colocate is what Match gives the descriptor in tree order,
// limit by limit; other values give other subjects, the colocated entry's
// value alone sets the tag.
func TestMatchBucketSharesLimits(t *testing.T) {
	s := loadText(t, bucketRules)
	m, _, ok := s.MatchBucket("b", map[string]string{"c": "rawval-c", "a": "rawval-a", "b": "rawval-b"})
	if !ok || len(m.Rule.Limits) != 2 || len(m.Subjects) != 2 || m.Subjects[0] == m.Subjects[1] {
		t.Fatalf("ok %v match %+v: want two limits with their own subjects", ok, m)
	}
	top, _, ok := s.MatchBucket("b", map[string]string{"a": "rawval-a"})
	if !ok || top.Tag == (limiter.Tag{}) || top.Tag != m.Tag {
		t.Fatalf("the colocated limits do not share the tag of a: %x %x", top.Tag, m.Tag)
	}
	other, _, _ := s.MatchBucket("b", map[string]string{"c": "rawval-c2", "a": "rawval-a", "b": "rawval-b"})
	if other.Subject == m.Subject || other.Subjects[1] == m.Subjects[1] || other.Tag != m.Tag {
		t.Fatalf("another value of c: subjects %x, tag %x; first %x, tag %x", other.Subjects, other.Tag, m.Subjects, m.Tag)
	}
}

// TestExplainBucket: the explanation of a bucket walks its entries in tree
// order and says why a bucket is refused, without a request value.
func TestExplainBucket(t *testing.T) {
	s := loadText(t, bucketRules)
	for _, tc := range []struct {
		bucket map[string]string
		keys   []string // the steps' keys
		how    []string
		reason string // "" = matched
	}{
		{map[string]string{"user": "rawval-u", "path": "/api/rawval-p"}, []string{"path", "user"}, []string{howWildcard, howKeyOnly}, ""},
		{map[string]string{"c": "rawval-c", "b": "rawval-b", "a": "rawval-a"}, []string{"a", "b", "c"}, []string{howKeyOnly, howKeyOnly, howKeyOnly}, ""},
		{map[string]string{"a": "rawval-a", "zz": "rawval-z"}, []string{"a"}, []string{howKeyOnly}, `key "zz" names no descriptor`},
		{map[string]string{"a": "rawval-a", "b": "rawval-b", "c": "rawval-c", "y": "only", "x": "rawval-x"}, nil, nil, `keys "a", "x" and "y" each name a descriptor at level 1`},
		{map[string]string{"placeholder": "rawval-p"}, []string{"placeholder"}, []string{howKeyOnly}, "has no rate_limit"},
	} {
		for run := range 10 {
			ex := s.ExplainBucket("b", tc.bucket)
			m, reason, ok := s.MatchBucket("b", tc.bucket)
			var keys, how []string
			text := ex.Reason
			for _, st := range ex.Steps {
				keys, how = append(keys, st.Key), append(how, st.How)
				text += strings.Join(st.Skipped, ";") + st.Pattern + st.Key + st.Source
			}
			if !slices.Equal(keys, tc.keys) || !slices.Equal(how, tc.how) {
				t.Fatalf("%v run %d: steps %v %v, want %v %v", tc.keys, run, keys, how, tc.keys, tc.how)
			}
			if ex.Matched != ok || ex.Matched != (tc.reason == "") || ex.Match.Rule != m.Rule || ex.Match.Subject != m.Subject {
				t.Fatalf("%v run %d: explained %+v, MatchBucket %+v %v %q", tc.keys, run, ex, m, ok, reason)
			}
			if !strings.Contains(ex.Reason, tc.reason) || (tc.reason == "") != (ex.Reason == "") {
				t.Fatalf("%v run %d: reason %q, want %q", tc.keys, run, ex.Reason, tc.reason)
			}
			if strings.Contains(text, "rawval") {
				t.Fatalf("a request value in the explanation %q", text)
			}
		}
	}
	if ex := s.ExplainBucket("nope", map[string]string{"a": "rawval-a"}); ex.Matched || ex.Reason != "no rules for this domain" {
		t.Fatalf("unknown domain: %+v", ex)
	}
}
