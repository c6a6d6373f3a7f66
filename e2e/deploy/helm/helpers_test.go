package helm_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/binarytest"
	"github.com/envoy-rls/envoy-rls/internal/deploytest"
)

// TestMain builds the binary the tests check the chart against once, and
// removes it when they end.
func TestMain(m *testing.M) { binarytest.Main(m) }

// valueDefault is one chart value's default next to the binary's default
// for the flag it sets.
type valueDefault struct {
	value     string
	got, want any
}

// checkDefaults reports each value whose default in values.yaml is not the
// binary's; prefix is the values path the names stand under ("statsd.").
func checkDefaults(t *testing.T, prefix string, defaults []valueDefault) {
	t.Helper()
	for _, c := range defaults {
		if fmt.Sprint(c.got) != fmt.Sprint(c.want) {
			t.Errorf("values.yaml %s%s defaults to %v; the binary's default is %v", prefix, c.value, c.got, c.want)
		}
	}
}

// containerArgs are the args of the rendered Deployment's containers that
// keep accepts, in order.
func containerArgs(t *testing.T, keep func(arg string) bool, args ...string) []string {
	t.Helper()
	var out []string
	for _, c := range list(get(one(t, render(t, args...), "Deployment"), "spec", "template", "spec", "containers")) {
		for _, a := range toStrings(list(get(c, "args"))) {
			if keep(a) {
				out = append(out, a)
			}
		}
	}
	return out
}

// schemaRefusal is a --set the schema refuses and the key helm's error
// must name.
type schemaRefusal struct{ set, key string }

// checkSchemaRefuses renders the chart with each --set and expects helm to
// fail naming the key.
func checkSchemaRefuses(t *testing.T, cases []schemaRefusal) {
	t.Helper()
	for _, tc := range cases {
		out, err := runHelm(t, "template", "rls", deploytest.ChartDir(t), "--set", tc.set)
		if err == nil {
			t.Errorf("--set %s rendered; want a schema error", tc.set)
			continue
		}
		if !strings.Contains(out, tc.key) {
			t.Errorf("--set %s: the error does not name %s:\n%s", tc.set, tc.key, out)
		}
	}
}
