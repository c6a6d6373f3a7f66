package helm_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/envoy-rls/envoy-rls/internal/binarytest"
	"github.com/envoy-rls/envoy-rls/internal/deploytest"
)

// ruleFile is alerts/envoy-rls.rules.yaml, the chart's alerts.
type ruleFile struct {
	Groups []struct {
		Name  string           `yaml:"name"`
		Rules []map[string]any `yaml:"rules"`
	} `yaml:"groups"`
}

// dashboard is the part of the Grafana dashboard model the tests read.
type dashboard struct {
	UID        string `json:"uid"`
	Title      string `json:"title"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		Type       string         `json:"type"`
		Title      string         `json:"title"`
		Datasource map[string]any `json:"datasource"`
		Targets    []struct {
			Expr  string `json:"expr"`
			RefID string `json:"refId"`
		} `json:"targets"`
	} `json:"panels"`
}

func loadRules(t *testing.T) ruleFile {
	t.Helper()
	var rf ruleFile
	dec := yaml.NewDecoder(strings.NewReader(string(chartFile(t, "alerts/envoy-rls.rules.yaml"))))
	dec.KnownFields(true)
	if err := dec.Decode(&rf); err != nil {
		t.Fatalf("alerts/envoy-rls.rules.yaml: %v", err)
	}
	if len(rf.Groups) == 0 || len(rf.Groups[0].Rules) == 0 {
		t.Fatal("alerts/envoy-rls.rules.yaml has no rules")
	}
	return rf
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	var d dashboard
	if err := json.Unmarshal(chartFile(t, "dashboards/envoy-rls.json"), &d); err != nil {
		t.Fatalf("dashboards/envoy-rls.json: %v", err)
	}
	return d
}

// defaultRunbook is values.yaml's prometheusRule.runbookBaseURL.
func defaultRunbook(t *testing.T) string {
	return deploytest.ChartValue[string](t, "prometheusRule", "runbookBaseURL")
}

var headingLine = regexp.MustCompile(`^#{1,6}\s+(.+?)\s*$`)

// docAnchors returns the GitHub anchors of the headings of a Markdown file.
func docAnchors(t *testing.T, rel string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(binarytest.ModuleRoot(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	fence := false
	for line := range strings.SplitSeq(string(b), "\n") {
		if strings.HasPrefix(line, "```") {
			fence = !fence
		}
		m := headingLine.FindStringSubmatch(line)
		if fence || m == nil {
			continue
		}
		var a strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case r == ' ':
				a.WriteRune('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
				a.WriteRune(r)
			}
		}
		anchors[a.String()] = true
	}
	return anchors
}

// runbookDoc holds a section per alert, the target of its runbook_url.
const runbookDoc = "docs/runbook.md"

// TestAlertRulesFile: every alert of the chart's rule file has an
// expression, a severity of critical or warning, a summary, and a
// runbook_url that is the default base followed by the anchor of a section
// of docs/runbook.md named after the alert.
func TestAlertRulesFile(t *testing.T) {
	rf := loadRules(t)
	anchors := docAnchors(t, runbookDoc)
	base := defaultRunbook(t)
	if !strings.HasSuffix(base, "/"+runbookDoc) {
		t.Errorf("prometheusRule.runbookBaseURL %q does not point at %s", base, runbookDoc)
	}
	seen := map[string]bool{}
	defer func() {
		// And no runbook section is left for an alert the file lost.
		for a := range anchors {
			if strings.HasPrefix(a, "envoyrls") && !seen[a] {
				t.Errorf("%s has a runbook section #%s for an alert the rule file does not have", runbookDoc, a)
			}
		}
	}()
	for _, r := range rf.Groups[0].Rules {
		name, _ := r["alert"].(string)
		if name == "" || seen[name] {
			t.Errorf("rule %v: no alert name, or a repeated one", r)
			continue
		}
		seen[name], seen[strings.ToLower(name)] = true, true
		if expr, _ := r["expr"].(string); strings.TrimSpace(expr) == "" {
			t.Errorf("%s: no expr", name)
		}
		labels, _ := r["labels"].(map[string]any)
		if sev := labels["severity"]; sev != "critical" && sev != "warning" {
			t.Errorf("%s: severity %v, want critical or warning", name, sev)
		}
		ann, _ := r["annotations"].(map[string]any)
		if s, _ := ann["summary"].(string); s == "" {
			t.Errorf("%s: no summary annotation", name)
		}
		anchor := strings.ToLower(name)
		if got, want := ann["runbook_url"], base+"#"+anchor; got != want {
			t.Errorf("%s: runbook_url %v, want %s", name, got, want)
		}
		if !anchors[anchor] {
			t.Errorf("%s: %s has no section #%s (its runbook)", name, runbookDoc, anchor)
		}
	}
}

// TestDashboardFile: the dashboard parses, has the datasource, namespace,
// job and domain variables, and every query reads the chosen data source
// and filters on namespace and job.
func TestDashboardFile(t *testing.T) {
	d := loadDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Errorf("dashboard uid %q title %q: both must be set", d.UID, d.Title)
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
	}
	want := map[string]string{"datasource": "datasource", "namespace": "query", "job": "query", "domain": "query"}
	if !reflect.DeepEqual(vars, want) {
		t.Errorf("variables %v, want %v", vars, want)
	}
	queries := 0
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		if p.Datasource["uid"] != "${datasource}" || len(p.Targets) == 0 {
			t.Errorf("panel %q: datasource %v, %d queries; want ${datasource} and a query", p.Title, p.Datasource, len(p.Targets))
		}
		for _, q := range p.Targets {
			queries++
			for _, m := range []string{`namespace=~"$namespace"`, `job=~"$job"`} {
				if strings.Count(q.Expr, m) != len(rlsMetricName.FindAllString(q.Expr, -1)) {
					t.Errorf("panel %q query %s: not every selector has %s", p.Title, q.RefID, m)
				}
			}
		}
	}
	if queries < 10 {
		t.Errorf("%d queries; the dashboard lost its panels", queries)
	}
}

// TestGrafanaDashboardRender: off by default; on, one ConfigMap carrying
// the dashboard file unchanged, with the sidecar's label (configurable),
// extra labels, annotations and namespace.
func TestGrafanaDashboardRender(t *testing.T) {
	dashboards := func(m map[string][]obj) []obj {
		var out []obj
		for _, cm := range m["ConfigMap"] {
			if _, ok := get(cm, "data", "envoy-rls.json").(string); ok {
				out = append(out, cm)
			}
		}
		return out
	}
	if got := dashboards(render(t)); len(got) != 0 {
		t.Errorf("default values render %d dashboard ConfigMaps, want 0", len(got))
	}
	file := string(chartFile(t, "dashboards/envoy-rls.json"))
	for _, tc := range []struct {
		name            string
		args            []string
		label, value    string
		namespace, annV string
	}{
		{"defaults", []string{"--set", "grafanaDashboard.enabled=true"}, "grafana_dashboard", "1", "", ""},
		{"custom", []string{"--set", "grafanaDashboard.enabled=true", "--set", "grafanaDashboard.label=dash",
			"--set", "grafanaDashboard.labelValue=envoy", "--set", "grafanaDashboard.namespace=monitoring",
			"--set", "grafanaDashboard.labels.team=edge", "--set", "grafanaDashboard.annotations.grafana_folder=Envoy"},
			"dash", "envoy", "monitoring", "Envoy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := render(t, tc.args...)
			got := dashboards(m)
			if tc.namespace == "" { // the release's
				tc.namespace = str(get(one(t, m, "Deployment"), "metadata", "namespace"))
			}
			if len(got) != 1 {
				t.Fatalf("%d dashboard ConfigMaps, want 1", len(got))
			}
			cm := got[0]
			if v := get(cm, "metadata", "labels", tc.label); v != tc.value {
				t.Errorf("label %s=%v, want %q", tc.label, v, tc.value)
			}
			if ns := get(cm, "metadata", "namespace"); ns != tc.namespace {
				t.Errorf("namespace %v, want %s", ns, tc.namespace)
			}
			if tc.annV != "" && (get(cm, "metadata", "annotations", "grafana_folder") != tc.annV || get(cm, "metadata", "labels", "team") != "edge") {
				t.Errorf("metadata %v: want the extra label and annotation", get(cm, "metadata"))
			}
			if data := get(cm, "data", "envoy-rls.json"); data != strings.TrimRight(file, "\n") {
				t.Error("the ConfigMap's envoy-rls.json differs from dashboards/envoy-rls.json")
			}
		})
	}
}

// TestPrometheusRuleRender: off by default; on, a PrometheusRule holding
// the rule file's alerts with runbook_url under runbookBaseURL, the alert
// labels joined (severity kept), the extra rules appended and the extra
// labels on the object.
func TestPrometheusRuleRender(t *testing.T) {
	if got := len(render(t)["PrometheusRule"]); got != 0 {
		t.Errorf("default values render %d PrometheusRules, want 0", got)
	}
	rf := loadRules(t)
	base := "https://docs.example.com/ops.md"
	pr := one(t, render(t, "--set", "prometheusRule.enabled=true", "--set", "prometheusRule.labels.release=kps",
		"--set", "prometheusRule.alertLabels.team=edge", "--set", "prometheusRule.alertLabels.severity=info",
		"--set", "prometheusRule.runbookBaseURL="+base,
		"--set-json", `prometheusRule.extraRules=[{"record":"envoy_rls:decisions:rate5m","expr":"sum(rate(envoy_rls_decisions_total[5m]))"}]`),
		"PrometheusRule")
	if pr["apiVersion"] != "monitoring.coreos.com/v1" || get(pr, "metadata", "labels", "release") != "kps" {
		t.Errorf("PrometheusRule %v: want monitoring.coreos.com/v1 with label release=kps", pr["metadata"])
	}
	groups := list(get(pr, "spec", "groups"))
	if len(groups) != len(rf.Groups) {
		t.Fatalf("%d groups, want %d", len(groups), len(rf.Groups))
	}
	rules := list(get(groups[0], "rules"))
	want := rf.Groups[0].Rules
	if len(rules) != len(want)+1 {
		t.Fatalf("%d rules, want the file's %d and the extra rule", len(rules), len(want))
	}
	for i, w := range want {
		r := rules[i]
		name := str(w["alert"])
		if get(r, "alert") != name || get(r, "expr") != w["expr"] || get(r, "for") != w["for"] {
			t.Errorf("rule %d: %v, want the file's %s", i, r, name)
		}
		if got := get(r, "annotations", "runbook_url"); got != base+"#"+strings.ToLower(name) {
			t.Errorf("%s: runbook_url %v, want under %s", name, got, base)
		}
		wantSev := get(w, "labels", "severity")
		if get(r, "labels", "severity") != wantSev || get(r, "labels", "team") != "edge" {
			t.Errorf("%s: labels %v, want severity %v (the alert's own) and team edge", name, get(r, "labels"), wantSev)
		}
		if get(r, "annotations", "summary") != get(w, "annotations", "summary") {
			t.Errorf("%s: summary changed in rendering", name)
		}
	}
	if last := rules[len(rules)-1]; get(last, "record") != "envoy_rls:decisions:rate5m" {
		t.Errorf("last rule %v, want the extra rule", last)
	}
	// Without overrides the rendered annotations are the file's.
	pr = one(t, render(t, "--set", "prometheusRule.enabled=true"), "PrometheusRule")
	for i, r := range list(get(list(get(pr, "spec", "groups"))[0], "rules")) {
		if !reflect.DeepEqual(get(r, "annotations"), want[i]["annotations"]) || !reflect.DeepEqual(get(r, "labels"), want[i]["labels"]) {
			t.Errorf("rule %d: annotations/labels %v %v, want the file's", i, get(r, "annotations"), get(r, "labels"))
		}
	}
}

// monitoringQueries are every PromQL expression the chart ships: the
// dashboard's queries and variable queries, and the alerts' expressions.
func monitoringQueries(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	d := loadDashboard(t)
	for _, p := range d.Panels {
		for _, q := range p.Targets {
			out["dashboard "+p.Title+" "+q.RefID] = q.Expr
		}
	}
	for _, v := range d.Templating.List {
		if q, ok := v.Query.(map[string]any); ok {
			out["dashboard variable "+v.Name] = str(q["query"])
		}
	}
	for _, r := range loadRules(t).Groups[0].Rules {
		out["alert "+str(r["alert"])] = str(r["expr"])
	}
	return out
}

// TestMonitoringMetricsExported: every envoy_rls_* metric the dashboard
// and the alerts query is one the real binary exports (histograms by
// their _bucket, _sum and _count series).
func TestMonitoringMetricsExported(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the binary")
	}
	exported := exportedMetrics(t)
	used := 0
	for where, q := range monitoringQueries(t) {
		names := rlsMetricName.FindAllString(q, -1)
		if len(names) == 0 {
			t.Errorf("%s: %q queries no envoy_rls_* metric", where, q)
		}
		for _, n := range names {
			used++
			if !exported[n] {
				t.Errorf("%s: %s is not exported by envoy-rls (exported: %v)", where, n, slices.Sorted(mapKeys(exported)))
			}
		}
	}
	if used == 0 {
		t.Fatal("no metric checked")
	}
}

var rlsMetricName = regexp.MustCompile(`\benvoy_rls_[a-z_]+\b`)

func mapKeys(m map[string]bool) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
