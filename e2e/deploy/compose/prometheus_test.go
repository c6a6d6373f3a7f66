package compose_test

import (
	"net"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/common/model"

	"github.com/envoy-rls/envoy-rls/e2e/deploy/internal/servetest"
	"github.com/envoy-rls/envoy-rls/internal/binarytest"
	"github.com/envoy-rls/envoy-rls/internal/deploytest"
)

// promConfig is the part of Prometheus' configuration file the demo uses,
// decoded strictly so that a misspelt key fails here as Prometheus itself
// would fail at start.
type promConfig struct {
	Global struct {
		ScrapeInterval     string `yaml:"scrape_interval"`
		EvaluationInterval string `yaml:"evaluation_interval"`
	} `yaml:"global"`
	RuleFiles     []string `yaml:"rule_files"`
	ScrapeConfigs []struct {
		JobName                string `yaml:"job_name"`
		MetricsPath            string `yaml:"metrics_path"`
		ScrapeInterval         string `yaml:"scrape_interval"`
		FallbackScrapeProtocol string `yaml:"fallback_scrape_protocol"`
		StaticConfigs          []struct {
			Targets []string `yaml:"targets"`
		} `yaml:"static_configs"`
	} `yaml:"scrape_configs"`
}

// scrapeProtocols are the values Prometheus 3 accepts for
// fallback_scrape_protocol.
var scrapeProtocols = []string{"PrometheusProto", "OpenMetricsText0.0.1", "OpenMetricsText1.0.0", "PrometheusText0.0.4", "PrometheusText1.0.0"}

// TestPrometheusConfig: prometheus.yml parses, its durations are
// Prometheus durations, and its two jobs scrape the envoy-rls admin port
// (--admin-addr in docker-compose.yaml) at /metrics and Envoy's admin port
// (envoy.yaml) at /stats/prometheus, by compose service name.
func TestPrometheusConfig(t *testing.T) {
	var pc promConfig
	decodeStrict(t, "prometheus.yml", &pc)
	durations := []string{pc.Global.ScrapeInterval, pc.Global.EvaluationInterval}
	targets := map[string][2]string{} // job -> {target, metrics path}
	for _, sc := range pc.ScrapeConfigs {
		if sc.ScrapeInterval != "" {
			durations = append(durations, sc.ScrapeInterval)
		}
		if p := sc.FallbackScrapeProtocol; p != "" && !slices.Contains(scrapeProtocols, p) {
			t.Errorf("job %s: fallback_scrape_protocol %q, want one of %v", sc.JobName, p, scrapeProtocols)
		}
		if _, dup := targets[sc.JobName]; dup || sc.JobName == "" {
			t.Errorf("job name %q is empty or repeated", sc.JobName)
		}
		if len(sc.StaticConfigs) != 1 || len(sc.StaticConfigs[0].Targets) != 1 {
			t.Errorf("job %s: want one static target", sc.JobName)
			continue
		}
		targets[sc.JobName] = [2]string{sc.StaticConfigs[0].Targets[0], sc.MetricsPath}
	}
	for _, d := range durations {
		if v, err := model.ParseDuration(d); err != nil || v <= 0 {
			t.Errorf("duration %q: %v", d, err)
		}
	}

	c := loadCompose(t)
	_, adminPort, err := net.SplitHostPort(flagValue(c.Services["envoy-rls"].Command, "admin-addr"))
	if err != nil {
		t.Fatalf("envoy-rls --admin-addr: %v", err)
	}
	envoyAdmin := strconv.Itoa(int(loadBootstrap(t).GetAdmin().GetAddress().GetSocketAddress().GetPortValue()))
	want := map[string][2]string{
		"envoy-rls": {net.JoinHostPort("envoy-rls", adminPort), "/metrics"},
		"envoy":     {net.JoinHostPort("envoy", envoyAdmin), "/stats/prometheus"},
	}
	for job, w := range want {
		if got, ok := targets[job]; !ok || got != w {
			t.Errorf("job %s scrapes %v, want %v", job, got, w)
		}
		host, _, _ := net.SplitHostPort(w[0])
		if _, ok := c.Services[host]; !ok {
			t.Errorf("job %s: no compose service %q", job, host)
		}
	}
	if len(targets) != len(want) {
		t.Errorf("jobs %v, want exactly %v", targets, want)
	}

	// The chart's alerts, mounted next to prometheus.yml (rule_files are
	// relative to the configuration file's directory).
	prom := c.Services["prometheus"]
	cfgDir := path.Dir(flagValue(prom.Command, "config.file"))
	if len(pc.RuleFiles) != 1 {
		t.Fatalf("rule_files %v: want the chart's alerts file", pc.RuleFiles)
	}
	mount := "../helm/envoy-rls/alerts/envoy-rls.rules.yaml:" + path.Join(cfgDir, pc.RuleFiles[0]) + ":ro"
	if !slices.Contains(prom.Volumes, mount) {
		t.Errorf("prometheus volumes %v: want %s", prom.Volumes, mount)
	}
}

var (
	rlsMetricName = regexp.MustCompile(`\benvoy_rls_[a-z_]+\b`)
	labelMatcher  = regexp.MustCompile(`([a-z_]+)\s*=~?\s*"([^"]*)"`)
	byClause      = regexp.MustCompile(`\bby\s*\(([^)]*)\)`)
)

// docQueries returns the lines of the ```promql blocks in docs/demo.md,
// blank and comment lines left out.
func docQueries(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, b := range deploytest.MarkdownBlocks(t, filepath.Join(binarytest.ModuleRoot(t), "docs", "demo.md"), "promql") {
		for _, line := range b.Lines {
			if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
				out = append(out, line)
			}
		}
	}
	return out
}

// checkDocQueries scrapes srv's /metrics and fails t for every
// envoy_rls_* metric, label or label value used by the PromQL in
// docs/demo.md that the scrape does not have. Label values are checked
// against the samples present, so the caller must have made calls that
// produce them first.
func checkDocQueries(t *testing.T, srv *servetest.Server) {
	t.Helper()
	queries := docQueries(t)
	if len(queries) == 0 {
		t.Fatal("docs/demo.md has no ```promql block")
	}
	families := srv.Metrics(t)
	checked := 0
	for _, q := range queries {
		names := rlsMetricName.FindAllString(q, -1)
		slices.Sort(names)
		names = slices.Compact(names)
		if len(names) == 0 {
			continue // another exporter's metric (Envoy's)
		}
		var labels []string
		values := map[string]string{}
		for _, m := range labelMatcher.FindAllStringSubmatch(q, -1) {
			labels = append(labels, m[1])
			values[m[1]] = m[2]
		}
		for _, m := range byClause.FindAllStringSubmatch(q, -1) {
			for l := range strings.SplitSeq(m[1], ",") {
				labels = append(labels, strings.TrimSpace(l))
			}
		}
		for _, name := range names {
			fam, ok := families[name]
			histogram := false
			if !ok {
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if base, cut := strings.CutSuffix(name, suffix); cut && families[base] != nil {
						fam, ok, histogram = families[base], true, true
					}
				}
			}
			if !ok {
				t.Errorf("docs/demo.md query %q: envoy-rls exposes no %s", q, name)
				continue
			}
			checked++
			for _, l := range labels {
				if histogram && l == "le" {
					continue
				}
				found, valueSeen := false, values[l] == ""
				for _, m := range fam.GetMetric() {
					for _, lp := range m.GetLabel() {
						if lp.GetName() == l {
							found = true
							valueSeen = valueSeen || lp.GetValue() == values[l]
						}
					}
				}
				if !found || !valueSeen {
					t.Errorf("docs/demo.md query %q: %s has no label %s=%q", q, name, l, values[l])
				}
			}
		}
	}
	if checked == 0 {
		t.Error("docs/demo.md's PromQL uses no envoy_rls_* metric")
	}
}
