package options

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestServeReferenceMetricsChecks(t *testing.T) {
	c := []string{"--config", "rules.yaml"}
	checkServe(t, []serveCase{
		{"on", append(c, "--reference-metrics-addr", ":19001", "--reference-metrics-path", "/stats", "--reference-metrics-mapping", "/m.yaml"), nil, ""},
		{"any port", append(c, "--reference-metrics-addr", "127.0.0.1:0"), nil, ""},
		{"address", append(c, "--reference-metrics-addr", "19001"), nil,
			`--reference-metrics-addr="19001": must be [host]:port, or empty for no reference metrics listener`},
		{"path from the environment", c, map[string]string{"ENVOY_RLS_REFERENCE_METRICS_PATH": "metrics"},
			`ENVOY_RLS_REFERENCE_METRICS_PATH="metrics": must be an absolute URL path such as /metrics, at most 256 bytes`},
		{"path with a query", append(c, "--reference-metrics-path", "/m?x=1"), nil,
			`--reference-metrics-path="/m?x=1": must be an absolute URL path such as /metrics, at most 256 bytes`},
		{"mapping without a listener", append(c, "--reference-metrics-mapping", "/m.yaml"), nil,
			`--reference-metrics-mapping="/m.yaml": must be set only with --reference-metrics-addr`},
	})
}

// TestReferenceMapper: the default mapping without a file; a file that
// does not load is one error naming the flag and the problem.
func TestReferenceMapper(t *testing.T) {
	o, _, err := Serve([]string{"--config", "r.yaml", "--reference-metrics-addr", ":0"}, func(string) string { return "" }, nil)
	if err != nil {
		t.Fatal(err)
	}
	if m, err := o.ReferenceMapper(); err != nil || m == nil {
		t.Fatalf("default mapping: %v, %v", m, err)
	}
	bad := filepath.Join(t.TempDir(), "conf.yaml")
	if err := os.WriteFile(bad, []byte("defaults:\n  observer_type: histogram\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{
		bad:                                `--reference-metrics-mapping="` + bad + `": must be a statsd_exporter mapping file envoy-rls reads (docs/observe.md, Envoy Gateway's Prometheus metrics): line 1: unknown field "defaults" (the fields are mappings)`,
		filepath.Join(t.TempDir(), "none"): "no such file or directory",
	} {
		o, _, err := Serve([]string{"--config", "r.yaml", "--reference-metrics-addr", ":0", "--reference-metrics-mapping", file}, func(string) string { return "" }, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := o.ReferenceMapper(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error containing %q", file, err, want)
		}
	}
}
