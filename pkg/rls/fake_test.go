package rls

import (
	"crypto/sha256"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// fakeRules matches descriptors by their exact "k=v/k2=v2" string, or by
// "k=v/k2" for a per-value rule. It stands in for a descriptors.Snapshot in
// tests of the server's own logic.
type fakeRules struct {
	domain string
	rules  map[string]*descriptors.Rule
}

func (f *fakeRules) HasDomain(d string) bool { return d == f.domain }

func (f *fakeRules) Match(d string, entries []descriptors.Entry) (descriptors.Match, bool) {
	if d != f.domain {
		return descriptors.Match{}, false
	}
	var exact, perValue strings.Builder
	for i, e := range entries {
		if i > 0 {
			exact.WriteByte('/')
			perValue.WriteByte('/')
		}
		exact.WriteString(e.Key + "=" + e.Value)
		if i == len(entries)-1 {
			perValue.WriteString(e.Key)
		} else {
			perValue.WriteString(e.Key + "=" + e.Value)
		}
	}
	r := f.rules[exact.String()]
	if r == nil {
		r = f.rules[perValue.String()]
	}
	if r == nil {
		return descriptors.Match{}, false
	}
	return descriptors.Match{Rule: r, Subject: sha256.Sum256([]byte(exact.String()))}, true
}

func (f *fakeRules) Override(d string, entries []descriptors.Entry, rpu uint32, unit descriptors.Unit, _ uint32) (descriptors.Match, bool) {
	if d != f.domain {
		return descriptors.Match{}, false
	}
	r := fakeRule("override", rpu, unit)
	return descriptors.Match{Rule: r, Subject: sha256.Sum256([]byte("override"))}, true
}

func fakeRule(id string, rpu uint32, unit descriptors.Unit) *descriptors.Rule {
	p, err := limiter.NewPolicy(limiter.PolicySpec{
		ID: id, Algorithm: limiter.FixedWindow,
		Params: limiter.FixedWindowParams{Limit: int64(rpu), Window: unit.Duration()},
	})
	if err != nil {
		panic(err)
	}
	return &descriptors.Rule{Policy: p, Name: id, Unit: unit, RequestsPerUnit: rpu, Path: id}
}

func TestFakeRulesSanity(t *testing.T) {
	f := &fakeRules{domain: "d", rules: map[string]*descriptors.Rule{"k": fakeRule("p", 1, descriptors.UnitSecond)}}
	if _, ok := f.Match("d", []descriptors.Entry{{Key: "k", Value: "v"}}); !ok {
		t.Fatal("per-value rule did not match")
	}
}
