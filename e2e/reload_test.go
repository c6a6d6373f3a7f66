package e2e_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/polltest"
)

// reloadTimeout bounds waiting for the watcher to apply an edit (it
// debounces 150ms).
const reloadTimeout = 10 * time.Second

// reloadRules is the rule file with a `load` limit (high: the load never
// reaches it, each call uses a new subject) and a `probe` limit (checked by
// exhausting it).
func reloadRules(loadLimit, probeLimit int) string {
	return fmt.Sprintf(`domain: e2e
descriptors:
  - key: load
    rate_limit: {unit: hour, requests_per_unit: %d}
  - key: probe
    rate_limit: {unit: hour, requests_per_unit: %d}
`, loadLimit, probeLimit)
}

// brokenRules does not load: a negative limit (file:line:reason).
const brokenRules = `domain: e2e
descriptors:
  - key: load
    rate_limit: {unit: hour, requests_per_unit: -1}
`

// ruleEditor changes the rule directory of a replica.
type ruleEditor interface {
	// dir is the --config directory.
	dir() string
	// write replaces the rule file with data.
	write(t *testing.T, data string)
}

// plainEditor rewrites rules.yaml in place (truncate and write, as most
// tools do).
type plainEditor struct{ d string }

func (e *plainEditor) dir() string { return e.d }
func (e *plainEditor) write(t *testing.T, data string) {
	t.Helper()
	writeFile(t, e.d, "rules.yaml", data)
}

// configMapEditor lays the directory out as the kubelet mounts a ConfigMap:
// the data lives in a timestamped directory `..<n>`, `..data` links to it,
// and rules.yaml links to `..data/rules.yaml`. An update writes a new
// `..<n+1>`, points a new link at it and renames that link over `..data` (an
// atomic swap), then removes the old directory.
type configMapEditor struct {
	d string
	n int
}

func (e *configMapEditor) dir() string { return e.d }
func (e *configMapEditor) write(t *testing.T, data string) {
	t.Helper()
	e.n++
	ver := fmt.Sprintf("..2026_01_01_00_00_%02d.%d", e.n, e.n)
	if err := os.Mkdir(filepath.Join(e.d, ver), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(e.d, ver), "rules.yaml", data)
	old, _ := os.Readlink(filepath.Join(e.d, "..data"))
	tmp := filepath.Join(e.d, "..data_tmp")
	if err := os.Symlink(ver, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(e.d, "..data")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(e.d, "rules.yaml")); err != nil {
		if err := os.Symlink(filepath.Join("..data", "rules.yaml"), filepath.Join(e.d, "rules.yaml")); err != nil {
			t.Fatal(err)
		}
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(e.d, old)); err != nil {
			t.Fatal(err)
		}
	}
}

// configDoc is the part of /config the tests read.
type configDoc struct {
	LastReload struct {
		Trigger  string `json:"trigger"`
		OK       bool   `json:"ok"`
		Error    string `json:"error"`
		Problems []struct {
			File   string `json:"file"`
			Line   int    `json:"line"`
			Reason string `json:"reason"`
		} `json:"problems"`
		Fingerprint string `json:"fingerprint"`
	} `json:"last_reload"`
}

func readConfig(t *testing.T, r *replica) (configDoc, string) {
	t.Helper()
	code, body := r.mustAdmin("/config")
	var doc configDoc
	if code != 200 {
		t.Fatalf("/config: %d %s", code, body)
	}
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatalf("/config: %v\n%s", err, body)
	}
	return doc, body
}

// TestRuleReload edits the rules of a replica under load, in place and
// ConfigMap-style: the new limits apply, no call fails, and a broken edit
// keeps the previous rules and is reported on /config and in
// envoy_rls_config_reloads_total{result="failure"}.
func TestRuleReload(t *testing.T) {
	binary(t)
	for _, tc := range []struct {
		name string
		ed   ruleEditor
	}{
		{"file rewrite", &plainEditor{}},
		{"configmap symlink swap", &configMapEditor{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			switch e := tc.ed.(type) {
			case *plainEditor:
				e.d = t.TempDir()
			case *configMapEditor:
				e.d = t.TempDir()
			}
			tc.ed.write(t, reloadRules(1000, 5))
			r := startReplica(t, "replica", replicaConfig{Rules: tc.ed.dir(), Store: "memory"})
			testReloadUnderLoad(t, r, tc.ed)
		})
	}
}

func testReloadUnderLoad(t *testing.T, r *replica, ed ruleEditor) {
	// Load: every call a new subject, so every answer is OK whatever the
	// limit in force; the limit it reports shows which rules answered.
	ll, stopLoad := startLimitLoad(r, "load", 8, 100_000)
	defer stopLoad()

	probe := func(want int) {
		t.Helper()
		subject := entry{"probe", unique("p")}
		ok := 0
		for i := 0; i < want+3; i++ {
			if r.mustCall(t, subject).ok() {
				ok++
			}
		}
		if ok != want {
			t.Errorf("probe: %d admitted, want %d", ok, want)
		}
	}
	waitLimit := func(want uint32) {
		t.Helper()
		took := polltest.Eventually(t, reloadTimeout, 20*time.Millisecond, fmt.Sprintf("current_limit %d", want), func() error {
			if got := r.mustCall(t, entry{"load", unique("w")}).Limit; got != want {
				return fmt.Errorf("current_limit %d", got)
			}
			return nil
		})
		t.Logf("current_limit %d in force %v after the edit", want, took)
	}

	probe(5)
	ed.write(t, reloadRules(2000, 3))
	waitLimit(2000)
	probe(3)
	doc, _ := readConfig(t, r)
	if !doc.LastReload.OK || doc.LastReload.Trigger != "watch" {
		t.Errorf("/config last_reload after a good edit: %+v, want ok from the watcher", doc.LastReload)
	}
	good := doc.LastReload.Fingerprint

	failures := r.metric(`envoy_rls_config_reloads_total{result="failure"}`)
	ed.write(t, brokenRules)
	polltest.Eventually(t, reloadTimeout, 20*time.Millisecond, "/config reports the failed reload", func() error {
		if doc, body := readConfig(t, r); doc.LastReload.OK {
			return fmt.Errorf("last_reload still ok: %s", body)
		}
		return nil
	})
	doc, body := readConfig(t, r)
	if doc.LastReload.Error == "" || len(doc.LastReload.Problems) == 0 || doc.LastReload.Problems[0].Line != 4 ||
		doc.LastReload.Fingerprint != good {
		t.Errorf("/config after a broken edit: want the error, the problem at line 4 and the previous fingerprint %s:\n%s", good, body)
	}
	if got := r.metric(`envoy_rls_config_reloads_total{result="failure"}`); got <= failures {
		t.Errorf(`envoy_rls_config_reloads_total{result="failure"} %v, want more than %v`, got, failures)
	}
	// The previous rules still answer.
	if got := r.mustCall(t, entry{"load", unique("w")}).Limit; got != 2000 {
		t.Errorf("after a broken edit: current_limit %d, want the previous 2000", got)
	}
	probe(3)

	// Fixed again: the new rules apply.
	ed.write(t, reloadRules(4000, 2))
	waitLimit(4000)
	probe(2)
	stopLoad()

	all, limits := &ll.all, ll.byLimit()
	t.Logf("load: %v; answers by current_limit: %v", all, limits)
	if all.failed() != 0 || len(all.samples) != 0 || all.ok == 0 {
		t.Errorf("calls under load must all be answered OK: %v", all)
	}
	for l := range limits {
		if l != 1000 && l != 2000 && l != 4000 {
			t.Errorf("%d answers reported current_limit %d, which no rule file set", limits[l], l)
		}
	}
}
