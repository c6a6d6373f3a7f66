package tools_test

// The chart's alerts and dashboard, read by Prometheus' own rule-file
// loader and PromQL parser. This test lives in the tools module because
// github.com/prometheus/prometheus would otherwise raise the versions of
// modules the service binary links (golang.org/x/net, genproto); the
// chart tests of the e2e module (e2e/deploy/helm) check the same files
// against the metrics the real binary exports.

import (
	"encoding/json"
	"log/slog"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

const chartDir = "../deploy/helm/envoy-rls/"

// rlsName is how e2e/deploy/helm's tests find the metric names of a query; the
// parser's selectors must be exactly those.
var rlsName = regexp.MustCompile(`\benvoy_rls_[a-z_]+\b`)

// selectorNames returns the metric names of e's vector selectors.
func selectorNames(e parser.Expr) []string {
	var names []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			names = append(names, vs.Name)
		}
		return nil
	})
	slices.Sort(names)
	return slices.Compact(names)
}

// checkNames fails t when the selectors of e are not exactly the
// envoy_rls_* names the regexp finds in the query text, or name another
// exporter's metric.
func checkNames(t *testing.T, where, query string, e parser.Expr) {
	t.Helper()
	got := selectorNames(e)
	want := rlsName.FindAllString(query, -1)
	slices.Sort(want)
	want = slices.Compact(want)
	if !slices.Equal(got, want) || len(got) == 0 {
		t.Errorf("%s: selectors %v, want the envoy_rls_* names %v (and at least one)", where, got, want)
	}
}

// TestChartAlertRules: alerts/envoy-rls.rules.yaml loads with Prometheus'
// rule-file loader (as promtool check rules does: unknown fields, bad
// durations, label names and annotation templates are errors), every
// expression is an instant vector and queries only envoy_rls_* series.
func TestChartAlertRules(t *testing.T) {
	p := parser.NewParser(parser.Options{})
	rgs, errs := rulefmt.ParseFile(chartDir+"alerts/envoy-rls.rules.yaml", false, model.UTF8Validation, p, slog.New(slog.DiscardHandler))
	for _, err := range errs {
		t.Error(err)
	}
	if rgs == nil || len(rgs.Groups) == 0 {
		t.Fatal("no rule groups")
	}
	n := 0
	for _, g := range rgs.Groups {
		for _, r := range g.Rules {
			n++
			e, err := p.ParseExpr(r.Expr)
			if err != nil {
				t.Errorf("%s: %v", r.Alert, err)
				continue
			}
			if e.Type() != parser.ValueTypeVector {
				t.Errorf("%s: expression type %s, want vector", r.Alert, e.Type())
			}
			checkNames(t, "alert "+r.Alert, r.Expr, e)
		}
	}
	if n == 0 {
		t.Fatal("no rules")
	}
}

// grafanaVars stand in for the dashboard's variables so that its queries
// parse as Prometheus receives them.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$namespace", ".*", "$job", ".*", "$domain", ".*")

// labelValues matches a Grafana label_values(selector, label) query.
var labelValues = regexp.MustCompile(`^label_values\((.+),\s*([a-z_]+)\)$`)

// TestChartDashboardQueries: every query of dashboards/envoy-rls.json
// parses with the PromQL parser once Grafana's variables are put in, and
// every variable's label_values selector parses as a metric selector.
func TestChartDashboardQueries(t *testing.T) {
	b, err := os.ReadFile(chartDir + "dashboards/envoy-rls.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	p := parser.NewParser(parser.Options{})
	queries := map[string]string{}
	for _, pn := range d.Panels {
		for i, q := range pn.Targets {
			queries[pn.Title+" #"+string(rune('A'+i))] = q.Expr
		}
	}
	if len(queries) < 10 {
		t.Fatalf("%d queries; the dashboard lost its panels", len(queries))
	}
	for _, where := range slices.Sorted(maps.Keys(queries)) {
		q := grafanaVars.Replace(queries[where])
		e, err := p.ParseExpr(q)
		if err != nil {
			t.Errorf("%s: %q: %v", where, q, err)
			continue
		}
		checkNames(t, where, q, e)
	}
	vars := 0
	for _, v := range d.Templating.List {
		q, ok := v.Query.(map[string]any)
		if !ok {
			continue // the data source variable
		}
		vars++
		s, _ := q["query"].(string)
		m := labelValues.FindStringSubmatch(s)
		if m == nil {
			t.Errorf("variable %s: %q is not label_values(selector, label)", v.Name, s)
			continue
		}
		if _, err := p.ParseMetricSelector(grafanaVars.Replace(m[1])); err != nil {
			t.Errorf("variable %s: selector %q: %v", v.Name, m[1], err)
		}
	}
	if vars != 3 {
		t.Errorf("%d query variables, want namespace, job and domain", vars)
	}
}
