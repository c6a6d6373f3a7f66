package deploytest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/envoy-rls/envoy-rls/internal/binarytest"
)

// ChartDir returns the directory of the envoy-rls Helm chart.
func ChartDir(t testing.TB) string {
	t.Helper()
	return filepath.Join(binarytest.ModuleRoot(t), "deploy", "helm", "envoy-rls")
}

// readChartFile decodes the chart's file name into v.
func readChartFile(t testing.TB, name string, v any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(ChartDir(t), name))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// ChartValues returns the chart's values.yaml, decoded: nested maps are
// map[string]any, integers int.
func ChartValues(t testing.TB) map[string]any {
	t.Helper()
	var v map[string]any
	readChartFile(t, "values.yaml", &v)
	return v
}

// ChartValue returns the value at path in the chart's values.yaml
// ("image", "repository" for image.repository). It fails t when the value
// is missing, is not a T, or is T's zero value: the tests compare other
// files with these values, and an empty one would compare with nothing.
func ChartValue[T comparable](t testing.TB, path ...string) T {
	t.Helper()
	var v any = ChartValues(t)
	for _, key := range path {
		m, ok := v.(map[string]any)
		if !ok {
			v = nil
			break
		}
		v = m[key]
	}
	got, ok := v.(T)
	var zero T
	if !ok || got == zero {
		t.Fatalf("values.yaml %s is %v (%T), want a %T that is set", strings.Join(path, "."), v, v, zero)
	}
	return got
}

// ChartMeta is the part of the chart's Chart.yaml the tests read.
type ChartMeta struct {
	APIVersion string `yaml:"apiVersion"`
	Name       string `yaml:"name"`
	Version    string `yaml:"version"`
	// AppVersion is the image tag the chart deploys by default.
	AppVersion string `yaml:"appVersion"`
}

// Chart returns the chart's Chart.yaml, decoded.
func Chart(t testing.TB) ChartMeta {
	t.Helper()
	var m ChartMeta
	readChartFile(t, "Chart.yaml", &m)
	return m
}
