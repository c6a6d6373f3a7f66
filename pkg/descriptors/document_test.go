package descriptors

import (
	"errors"
	"testing"
)

// docRules is one Document: a limited path with a nested user limit, and
// a wildcard.
func docRules() Document {
	return Document{Name: "xds:edge", Domain: "edge", Descriptors: []DocDescriptor{
		{Key: "path", Value: "/api", Descriptors: []DocDescriptor{
			{Key: "user", RateLimit: &DocLimit{Unit: "minute", RequestsPerUnit: 5}},
		}},
		{Key: "path", Value: "/static/*", RateLimit: &DocLimit{Unit: "SECOND", RequestsPerUnit: 100}},
	}}
}

// The rules of a Document say where they come from by field, in the rule
// sources, the explanations and the problems.
func TestCompileNamesFields(t *testing.T) {
	s, err := Compile([]Document{docRules()}, Options{Secret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	ex := s.Explain("edge", []Entry{{Key: "path", Value: "/api"}, {Key: "user", Value: "u1"}})
	if !ex.Matched || len(ex.Steps) != 2 || ex.Steps[0].Source != "xds:edge:descriptors[0]" || ex.Steps[1].Source != "xds:edge:descriptors[0].descriptors[0]" {
		t.Fatalf("explanation %+v", ex)
	}
	if got := ex.Match.Rule.Source; got != "xds:edge:descriptors[0].descriptors[0]" {
		t.Errorf("rule source %q", got)
	}
	ex = s.Explain("edge", []Entry{{Key: "path", Value: "/other"}})
	if len(ex.Steps) != 1 || len(ex.Steps[0].Skipped) != 2 || ex.Steps[0].Skipped[1] != `wildcard "/static/*" at xds:edge:descriptors[1] does not match` {
		t.Errorf("explanation of a miss %+v", ex)
	}
	if files := s.Files(); len(files) != 1 || files[0] != "xds:edge" {
		t.Errorf("files %q", files)
	}

	bad := docRules()
	bad.Descriptors[1].RateLimit.Unit = "fortnight"
	_, err = Compile([]Document{bad}, Options{Secret: testSecret})
	var ce *ConfigError
	if !errors.As(err, &ce) || len(ce.Problems) != 1 {
		t.Fatalf("error %v", err)
	}
	want := Problem{File: "xds:edge", Field: "descriptors[1].rate_limit.unit", Reason: `rate_limit: invalid rate limit unit "fortnight" (expected second, minute, hour, day, week, month or year)`}
	if ce.Problems[0] != want || ce.Error() != "xds:edge:"+want.Field+": "+want.Reason {
		t.Errorf("problem %+v (%q), want %+v", ce.Problems[0], ce.Error(), want)
	}
}

func TestCompileDocumentLimits(t *testing.T) {
	docs := []Document{docRules(), {Name: "b", Domain: "b", Descriptors: []DocDescriptor{{Key: "k"}}}}
	// 4 descriptors, 1 of them in the second Document.
	if _, err := Compile(docs, Options{Secret: testSecret, Limits: Limits{MaxDescriptors: 4}}); err != nil {
		t.Fatalf("at the descriptor limit: %v", err)
	}
	_, err := Compile(docs, Options{Secret: testSecret, Limits: Limits{MaxDescriptors: 2}})
	if le := limitError(t, err); *le != (LimitError{Limit: LimitDescriptors, Max: 2, Total: 4, Files: 2}) {
		t.Errorf("%+v", *le)
	}
	// The strings: names, domains, keys, values and units.
	const size = 8 + 4 + 4 + 4 + 4 + 6 + 4 + 9 + 6 + 1 + 1 + 1
	if _, err := Compile(docs, Options{Secret: testSecret, Limits: Limits{MaxBytes: size}}); err != nil {
		t.Fatalf("at the byte limit: %v", err)
	}
	_, err = Compile(docs, Options{Secret: testSecret, Limits: Limits{MaxBytes: size - 1}})
	if le := limitError(t, err); *le != (LimitError{Limit: limitBytes, Max: size - 1, Total: size, Files: 2}) {
		t.Errorf("%+v", *le)
	}
	if _, err := Compile([]Document{{Name: "a", Domain: "a"}, {Name: "a", Domain: "b"}}, Options{Secret: testSecret}); err == nil {
		t.Error("two Documents of one name compiled")
	}
	if _, err := Compile(nil, Options{}); !errors.Is(err, ErrSecret) {
		t.Errorf("no secret: %v", err)
	}
}

// Equal Documents have equal fingerprints, whatever their order; any
// change of a field changes it, including moving bytes between fields.
func TestCompileDocumentFingerprint(t *testing.T) {
	fp := func(docs ...Document) string {
		t.Helper()
		s, err := Compile(docs, Options{Secret: testSecret})
		if err != nil {
			t.Fatal(err)
		}
		return s.Fingerprint()
	}
	other := Document{Name: "b", Domain: "b"}
	base := fp(docRules(), other)
	if fp(other, docRules()) != base {
		t.Error("the order of the Documents changed the fingerprint")
	}
	for name, change := range map[string]func(d *Document){
		"shadow":        func(d *Document) { d.Descriptors[0].ShadowMode = true },
		"detailed":      func(d *Document) { d.Descriptors[1].DetailedMetric = true },
		"limit":         func(d *Document) { d.Descriptors[1].RateLimit.RequestsPerUnit = 101 },
		"unlimited":     func(d *Document) { d.Descriptors[1].RateLimit = &DocLimit{Unlimited: true} },
		"value to key":  func(d *Document) { d.Descriptors[0].Key, d.Descriptors[0].Value = "path/api", "" },
		"nesting":       func(d *Document) { d.Descriptors[0].Descriptors[0].Descriptors = []DocDescriptor{{Key: "x"}} },
		"name":          func(d *Document) { d.Descriptors[1].RateLimit.Name = "static" },
		"no rate limit": func(d *Document) { d.Descriptors[1].RateLimit = nil },
	} {
		d := docRules()
		change(&d)
		if fp(d, other) == base {
			t.Errorf("%s: same fingerprint", name)
		}
	}
}

// A Document is bounded as a file is: one unit per field and its depth per
// descriptor; past the budget it is refused at the field where the budget
// ran out.
func TestCompileDocumentBudget(t *testing.T) {
	// docRules: domain, descriptors, [0] (depth 1), its descriptors, [0]
	// (depth 2) with rate_limit, unit, requests_per_unit, then [1] (depth
	// 1) with rate_limit, unit, requests_per_unit: 16 units.
	if _, err := compileBudget([]Document{docRules()}, Options{Secret: testSecret}, 16); err != nil {
		t.Fatalf("within the budget: %v", err)
	}
	_, err := compileBudget([]Document{docRules()}, Options{Secret: testSecret}, 15)
	var ce *ConfigError
	if !errors.As(err, &ce) || len(ce.Problems) != 1 ||
		ce.Problems[0].String() != "xds:edge:descriptors[1].rate_limit.requests_per_unit: document is too complex (more than 15 fields and nesting levels)" {
		t.Fatalf("over the budget: %v", err)
	}
}
