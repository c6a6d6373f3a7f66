package refmetrics_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/envoy-rls/envoy-rls/internal/options"
	"github.com/envoy-rls/envoy-rls/internal/refmetrics"
)

// serve parses serve's options with the reference metrics' flags.
func serve(args []string, env map[string]string) (*options.Options, *refmetrics.Flags, error) {
	var f refmetrics.Flags
	o, _, err := options.Serve(append([]string{"--config", "rules.yaml"}, args...), func(k string) string { return env[k] }, nil, &f)
	return o, &f, err
}

func TestFlagsCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"on", []string{"--reference-metrics-addr", ":19001", "--reference-metrics-path", "/stats", "--reference-metrics-mapping", "/m.yaml"}, nil, ""},
		{"any port", []string{"--reference-metrics-addr", "127.0.0.1:0"}, nil, ""},
		{"address", []string{"--reference-metrics-addr", "19001"}, nil,
			`--reference-metrics-addr="19001": must be [host]:port, or empty for no reference metrics listener`},
		{"path from the environment", nil, map[string]string{"ENVOY_RLS_REFERENCE_METRICS_PATH": "metrics"},
			`ENVOY_RLS_REFERENCE_METRICS_PATH="metrics": must be an absolute URL path such as /metrics, at most 256 bytes`},
		{"path with a query", []string{"--reference-metrics-path", "/m?x=1"}, nil,
			`--reference-metrics-path="/m?x=1": must be an absolute URL path such as /metrics, at most 256 bytes`},
		{"mapping without a listener", []string{"--reference-metrics-mapping", "/m.yaml"}, nil,
			`--reference-metrics-mapping="/m.yaml": must be set only with --reference-metrics-addr`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := serve(tc.args, tc.env)
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || err.Error() != tc.want) {
				t.Fatalf("%v, want %q", err, tc.want)
			}
		})
	}
}

// TestStartMapping: the default mapping without a file; a file that does
// not load stops the start with one error naming the flag and the problem.
func TestStartMapping(t *testing.T) {
	o, f, err := serve([]string{"--reference-metrics-addr", ":0"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s, err := refmetrics.Start(f, 0.8, prometheus.NewRegistry(), o.Label); err != nil || s == nil {
		t.Fatalf("default mapping: %v, %v", s, err)
	}
	bad := filepath.Join(t.TempDir(), "conf.yaml")
	if err := os.WriteFile(bad, []byte("defaults:\n  observer_type: histogram\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{
		bad:                                `--reference-metrics-mapping="` + bad + `": must be a statsd_exporter mapping file envoy-rls reads (docs/observe.md, Envoy Gateway's Prometheus metrics): line 1: unknown field "defaults" (the fields are mappings)`,
		filepath.Join(t.TempDir(), "none"): "no such file or directory",
	} {
		o, f, err := serve([]string{"--reference-metrics-addr", ":0", "--reference-metrics-mapping", file}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := refmetrics.Start(f, 0.8, prometheus.NewRegistry(), o.Label); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error containing %q", file, err, want)
		}
	}
}
