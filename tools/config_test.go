package tools_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/rlqs"
)

// TestBenchRulesLoad checks that every rule file the bench scripts pass to
// envoy-rls compiles with the service's loader and holds what the scripts
// assume: domain "bench", one limit of 1000/s per remote_address, with the
// algorithm its file name says (the reference's file: the default;
// penalty.yaml: a fixed window with a penalty box).
func TestBenchRulesLoad(t *testing.T) {
	files := map[string]string{
		"config/bench/fixed-window.yaml":    "fixed_window",
		"config/bench/sliding-window.yaml":  "sliding_window",
		"config/bench/token-bucket.yaml":    "token_bucket",
		"config/bench/gcra.yaml":            "gcra",
		"config/bench/sliding-log.yaml":     "sliding_log",
		"config/bench/penalty.yaml":         "fixed_window",
		"config/bench/reference/bench.yaml": "fixed_window",
	}
	matches, err := filepath.Glob("config/bench/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// rlqs.yaml is the RLQS runs' (TestBenchRLQSRulesLoad).
	matches = slices.DeleteFunc(matches, func(m string) bool { return m == "config/bench/rlqs.yaml" })
	if len(matches) != len(files)-1 {
		t.Errorf("config/bench holds %v; this test knows %d files there: teach it the new ones", matches, len(files)-1)
	}
	for path, alg := range files {
		snap, err := descriptors.Load(path, descriptors.Options{Secret: []byte(strings.Repeat("s", descriptors.MinSecretLength))})
		if err != nil {
			t.Errorf("%s: %v", path, err)
			continue
		}
		doms := snap.Domains()
		if len(doms) != 1 || doms[0].Domain != "bench" || len(doms[0].Rules) != 1 {
			t.Errorf("%s: domains %+v, want one domain bench with one rule", path, doms)
			continue
		}
		r := doms[0].Rules[0]
		if r.Algorithm != alg || r.RequestsPerUnit != 1000 || r.Unit != "second" || !strings.Contains(r.Path, "remote_address") {
			t.Errorf("%s: rule %+v, want %s 1000/second on remote_address", path, r, alg)
		}
	}
}

// TestBenchRLQSRulesLoad checks the rules of bench.sh --mode rlqs: domain
// "bench", one limit of 1,000,000 a minute per tenant, a rule RLQS
// assigns quotas for.
func TestBenchRLQSRulesLoad(t *testing.T) {
	snap, err := descriptors.Load("config/bench/rlqs.yaml", descriptors.Options{Secret: []byte(strings.Repeat("s", descriptors.MinSecretLength))})
	if err != nil {
		t.Fatal(err)
	}
	doms := snap.Domains()
	if len(doms) != 1 || doms[0].Domain != "bench" || len(doms[0].Rules) != 1 {
		t.Fatalf("domains %+v, want one domain bench with one rule", doms)
	}
	r := doms[0].Rules[0]
	if r.RequestsPerUnit != 1_000_000 || r.Unit != "minute" || !strings.Contains(r.Path, "tenant") {
		t.Errorf("rule %+v, want 1,000,000/minute on tenant", r)
	}
	m, reason, ok := snap.MatchBucket("bench", map[string]string{"tenant": "t7"})
	if !ok || m.Rule == nil || rlqs.Refusal(m.Rule) != "" {
		t.Errorf("bucket {tenant: t7}: matched %v (%s), refusal %q", ok, reason, rlqs.Refusal(m.Rule))
	}
}
