package descriptors

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

// want is one expected problem: line, column (0 = not checked) and a
// substring of the reason.
type want struct {
	line, col int
	reason    string
}

func TestInvalidFiles(t *testing.T) {
	tests := map[string][]want{
		"unknown_key.yaml":                {{4, 5, `unknown key "vaule" in a descriptor`}},
		"unknown_rate_limit_key.yaml":     {{6, 7, `unknown key "request_per_unit" in rate_limit`}},
		"unknown_top_key.yaml":            {{2, 1, `unknown key "descriptor" at the top level`}},
		"burst_without_token_bucket.yaml": {{7, 7, "burst is only valid with algorithm: token_bucket"}},
		"burst_zero_limit.yaml":           {{4, 79, "burst with requests_per_unit 0"}},
		"share_without_wildcard.yaml":     {{5, 5, "share_threshold needs a wildcard value"}},
		"unlimited_with_rpu.yaml":         {{6, 7, "requests_per_unit is not allowed with unlimited: true"}},
		"unlimited_with_unit.yaml":        {{5, 7, "unit is not allowed with unlimited: true"}},
		"replaces_unknown.yaml":           {{8, 11, `replaces names "nobody", but no rule in domain "d" has that name`}},
		"replaces_self.yaml":              {{9, 11, "replaces should not contain the name of the same descriptor"}},
		"replaces_empty.yaml":             {{8, 11, "should not have an empty replaces entry"}},
		"replaces_not_list.yaml":          {{7, 17, "replaces must be a list of {name: ...}, got a mapping"}},
		"unknown_policy.yaml":             {{6, 5, `unknown policy "apj"`}},
		"policy_and_rate_limit.yaml":      {{7, 5, "either rate_limit or policy, not both"}},
		"policy_with_name.yaml":           {{4, 5, "name is not allowed in a named policy"}},
		"missing_key.yaml":                {{3, 5, "descriptor has no key"}},
		"empty_key.yaml":                  {{3, 5, "descriptor key must not be empty"}},
		"bad_unit.yaml":                   {{4, 18, `invalid rate limit unit "fortnight"`}},
		"missing_unit.yaml":               {{5, 7, "unit is required"}},
		"duplicate_composite_key.yaml":    {{6, 5, `duplicate descriptor composite key "d/k=v" (first defined at line 3)`}},
		"duplicate_yaml_key.yaml":         {{4, 5, `key "key" is repeated (first at line 3)`}},
		"no_domain.yaml":                  {{1, 1, "the file has no domain"}},
		"empty_domain.yaml":               {{1, 1, "domain must not be empty"}},
		"empty_policy.yaml":               {{6, 5, "policy must name an entry of the top-level policies map"}},
		"empty.yaml":                      {{0, 0, "file is empty"}},
		"syntax.yaml":                     {{4, 4, "invalid YAML: did not find expected '-' indicator"}},
		"bad_rpu.yaml": {
			{4, 51, "requests_per_unit must be between 0 and 4294967295, got -1"},
			{6, 51, `requests_per_unit must be an integer, got "10"`},
			{8, 51, "requests_per_unit must be between 0 and 4294967295, got 4294967296"},
		},
		"bad_extensions.yaml": {
			{7, 24, "unit_multiplier must be between 1"},
			{8, 7, `algorithm "leaky" is not one of`},
			{9, 7, `failure_mode "maybe" is not one of closed, open, local`},
			{10, 7, `headers "some" is not one of full, retry_after, none`},
			{11, 17, "revision must be between 1"},
		},
		"window_too_long.yaml": {{4, 17, "the window (unit x unit_multiplier) is out of range"}},
		"two_documents.yaml":   {{2, 1, "one YAML document"}},
		"wrong_types.yaml":     {{3, 3, "descriptors must be a list, got a mapping"}},
		"bad_bool.yaml":        {{4, 18, `shadow_mode must be true or false, got "sometimes"`}},
		"bad_metadata.yaml":    {{4, 15, "metadata must be a mapping, got a list"}},
		"too_deep.yaml":        {{2, 14, "nested more than 64 levels"}},
		"gcra_bad.yaml": {
			{4, 17, "burst (or requests_per_unit) times the refill period"},
			{6, 17, "the window (unit x unit_multiplier) is out of range"},
			{8, 71, "burst with requests_per_unit 0"},
			{10, 78, "burst must be"},
		},
		"calendar_bad.yaml": {
			{4, 76, "calendar: true is only valid with algorithm: fixed_window (got token_bucket)"},
			{6, 54, "calendar: true needs unit minute, hour, day, week, month or year (got second)"},
			{8, 69, `time_zone "Europe/Nowhere" is not a known IANA time zone name`},
			{10, 53, "time_zone needs calendar: true"},
			{12, 29, "unit_multiplier must be 1 (got 2)"},
			{14, 67, `time_zone "Local" is not a known IANA time zone name`},
			{16, 35, "calendar is not allowed with unlimited: true"},
			{18, 61, "calendar must be true or false"},
		},
		"sliding_log_bad.yaml": {
			{4, 17, "requests_per_unit must be at most 1000 for sliding_log"},
			{6, 78, "burst is only valid with algorithm: token_bucket or gcra"},
			{8, 17, "the window (unit x unit_multiplier) is out of range"},
		},
	}
	ents, err := os.ReadDir("testdata/invalid")
	if err != nil {
		t.Fatal(err)
	}
	for _, ent := range ents {
		if _, ok := tests[ent.Name()]; !ok {
			t.Errorf("testdata/invalid/%s has no expectation", ent.Name())
		}
	}
	for name, wants := range tests {
		t.Run(name, func(t *testing.T) {
			file := "testdata/invalid/" + name
			checkProblems(t, file, wants)
		})
	}
}

func checkProblems(t *testing.T, path string, wants []want) {
	t.Helper()
	s, err := Load(path, Options{Secret: testSecret})
	if err == nil {
		t.Fatalf("Load succeeded with %d domains", len(s.Domains()))
	}
	var ce *ConfigError
	if !errors.As(err, &ce) || !errors.Is(err, errInvalidConfig) {
		t.Fatalf("error %T is not a *ConfigError: %v", err, err)
	}
	if len(ce.Problems) != len(wants) {
		t.Errorf("%d problems, want %d:\n%v", len(ce.Problems), len(wants), err)
	}
	for i, w := range wants {
		if i >= len(ce.Problems) {
			break
		}
		p := ce.Problems[i]
		if !strings.HasSuffix(p.File, strings.TrimPrefix(path, "testdata/")) && !strings.HasPrefix(path, p.File) {
			t.Errorf("problem %d: file %q, want %q", i, p.File, path)
		}
		if p.Line != w.line || (w.col != 0 && p.Column != w.col) || !strings.Contains(p.Reason, w.reason) {
			t.Errorf("problem %d: %d:%d %q, want %d:%d containing %q", i, p.Line, p.Column, p.Reason, w.line, w.col, w.reason)
		}
	}
	if line := strings.Split(err.Error(), "\n")[0]; !strings.HasPrefix(line, ce.Problems[0].File+":") {
		t.Errorf("Error() line %q does not start with file:", line)
	}
}

func TestDuplicateDomainAcrossFiles(t *testing.T) {
	s, err := Load("testdata/dupdomain", Options{Secret: testSecret})
	if err == nil {
		t.Fatalf("loaded %v", s.Domains())
	}
	var ce *ConfigError
	if !errors.As(err, &ce) || len(ce.Problems) != 1 {
		t.Fatalf("err = %v", err)
	}
	p := ce.Problems[0]
	if p.File != "testdata/dupdomain/b.yaml" || p.Line != 2 || p.Column != 1 || !strings.Contains(p.Reason, `duplicate domain "same": it is already defined in testdata/dupdomain/a.yaml`) {
		t.Errorf("problem = %+v", p)
	}
}

func TestProblemsFromSeveralFilesAreCollected(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir+"/a.yaml", "domain: a\ndescriptors:\n  - key: k\n    bogus: 1\n")
	writeFile(t, dir+"/b.yml", "domain: b\ndescriptors:\n  - key: k\n    rate_limit: {unit: eon}\n")
	writeFile(t, dir+"/.hidden.yaml", "this is not yaml: [")
	writeFile(t, dir+"/notes.txt", "ignored")
	_, err := Load(dir, Options{Secret: testSecret})
	var ce *ConfigError
	if !errors.As(err, &ce) || len(ce.Problems) != 2 {
		t.Fatalf("err = %v", err)
	}
	if ce.Problems[0].File != dir+"/a.yaml" || ce.Problems[1].File != dir+"/b.yml" {
		t.Errorf("problems = %+v", ce.Problems)
	}
	want := dir + "/a.yaml:4:5: unknown key \"bogus\""
	if !strings.HasPrefix(err.Error(), want) {
		t.Errorf("Error() = %q, want prefix %q", err.Error(), want)
	}
}

// TestUnknownKeyListsTheValidKeys: an unknown key is reported at its
// position with every key the mapping takes, in the table's order.
func TestUnknownKeyListsTheValidKeys(t *testing.T) {
	limitKeys := "unit, requests_per_unit, unlimited, name, replaces, unit_multiplier, algorithm, burst, failure_mode, revision, headers, calendar, time_zone, penalty, concurrency, lease_ttl, charge, reserve"
	for name, tc := range map[string]struct{ file, want string }{
		"top level": {"domain: d\ndescriptor: []\n",
			`2:1: unknown key "descriptor" at the top level (expected domain, descriptors, policies)`},
		"descriptor": {"domain: d\ndescriptors:\n  - key: k\n    vaule: v\n",
			`4:5: unknown key "vaule" in a descriptor (expected key, value, rate_limit, rate_limits, policy, descriptors, shadow_mode, quota_mode, share_threshold, detailed_metric, value_to_metric, metadata, colocate)`},
		"rate_limit": {"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, request_per_unit: 1}\n",
			`4:32: unknown key "request_per_unit" in rate_limit (expected ` + limitKeys + `)`},
		"named policy": {"domain: d\npolicies:\n  p: {unit: second, burts: 1}\n",
			`3:21: unknown key "burts" in policies.p (expected ` + limitKeys + `)`},
		"penalty": {"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, penalty: {duration: 1s, lenght: 2s}}\n",
			`4:78: unknown key "lenght" in penalty (expected duration, max_duration, decay)`},
		"replaces entry": {"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{nmae: x}]}\n",
			`4:66: unknown key "nmae" in a replaces entry (expected name)`},
	} {
		t.Run(name, func(t *testing.T) {
			f := ruleFile(t, tc.file)
			_, err := Load(f, Options{Secret: testSecret})
			if err == nil || !strings.Contains(err.Error(), f+":"+tc.want) {
				t.Errorf("Load: %v\nwant a problem %s:%s", err, f, tc.want)
			}
		})
	}
}

func TestLoadPathErrors(t *testing.T) {
	dir := t.TempDir()
	_, err := Load(dir, Options{Secret: testSecret})
	if err == nil || !strings.Contains(err.Error(), "no *.yaml or *.yml rule files") {
		t.Errorf("empty dir: %v", err)
	}
	_, err = Load(dir+"/missing.yaml", Options{Secret: testSecret})
	if err == nil || !strings.Contains(err.Error(), "cannot read the configuration") {
		t.Errorf("missing file: %v", err)
	}
	if _, err := Load(dir, Options{}); !errors.Is(err, ErrSecret) {
		t.Errorf("no secret: %v", err)
	}
	writeFile(t, dir+"/big.yaml", "domain: d\n"+strings.Repeat("#", maxFileSize))
	if _, err := Load(dir, Options{Secret: testSecret}); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("big file: %v", err)
	}
}

// TestTooComplexFileIsRejectedQuickly: aliases that expand into an enormous
// tree stop at the work budget instead of costing unbounded time.
func TestTooComplexFileIsRejectedQuickly(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir+"/bomb.yaml", "domain: d\npolicies:\n  p: {unit: second, requests_per_unit: 1}\ndescriptors: &a\n  - {key: a, policy: p, descriptors: *a}\n  - {key: b, policy: p, descriptors: *a}\n")
	writeFile(t, dir+"/meta.yaml", "domain: m\ndescriptors:\n  - key: k\n    metadata:\n      a: &a [x,x,x,x,x,x,x,x,x,x]\n      b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\n      c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\n      d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\n      e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\n      f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]\n      g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f,*f]\n")
	start := time.Now()
	_, err := Load(dir, Options{Secret: testSecret})
	if err == nil || !strings.Contains(err.Error(), "bomb.yaml") || !strings.Contains(err.Error(), "meta.yaml") || !strings.Contains(err.Error(), "too complex") {
		t.Errorf("err = %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %v", d)
	}
}
