package descriptors

import (
	"fmt"
	"strings"
	"testing"
)

func TestReferenceYAMLForms(t *testing.T) {
	s := mustLoad(t, "testdata/compat")
	m, ok := s.Match("compat", e("code=500"))
	if !ok || m.Rule.RequestsPerUnit != 7 || m.Rule.Unit != UnitSecond {
		t.Errorf("numeric value: %v %+v", ok, m.Rule)
	}
	m, ok = s.Match("compat", e("flag=true"))
	if !ok || !m.Rule.ShadowMode || m.Rule.RequestsPerUnit != 7 {
		t.Errorf("bool value, yes, alias: %v %+v", ok, m.Rule)
	}
	m, ok = s.Match("compat", e("nothing=x"))
	if !ok || m.Rule.RequestsPerUnit != 0 || m.Rule.Policy.Limit() != 0 {
		t.Errorf("absent requests_per_unit: %v %+v", ok, m.Rule)
	}
	if _, ok := s.Match("compat", e("null_limit=x")); ok {
		t.Errorf("rate_limit: null is a limit")
	}
	if dump := fmt.Sprintf("%+v", s); strings.Contains(dump, string(testSecret)) {
		t.Errorf("printing a snapshot shows the secret")
	}
	if _, ok := s.Match("compat", e("empty=x")); ok {
		t.Errorf("placeholder matched")
	}
	if !s.HasDomain("compat") || s.HasDomain("other") {
		t.Errorf("HasDomain wrong")
	}
	var nilSnap *Snapshot
	if _, ok := nilSnap.Match("compat", e("code=500")); ok || nilSnap.HasDomain("compat") {
		t.Errorf("nil snapshot matched")
	}
}
