package topk_test

import (
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/options"
	"github.com/envoy-rls/envoy-rls/pkg/topk"
)

// TestFlagsCheck: as a group of serve's options, every refused --top-*
// value gives its one-line error.
func TestFlagsCheck(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--top-counters", "4096", "--top-max-policies", "1", "--top-window", "1s", "--top-metric-series", "1000"}, nil, ""},
		{[]string{"--top-counters", "0"}, nil, `--top-counters="0": must be an integer from 1 to 4096`},
		{[]string{"--top-max-policies", "70000"}, nil, `--top-max-policies="70000": must be an integer from 1 to 65536`},
		{[]string{"--top-window", "500ms"}, nil, `--top-window="500ms": must be a duration of at least 1s, such as 1m`},
		{nil, map[string]string{"ENVOY_RLS_TOP_METRIC_SERIES": "-1"}, `ENVOY_RLS_TOP_METRIC_SERIES="-1": must be an integer from 0 to 1000`},
	} {
		var f topk.Flags
		_, _, err := options.Serve(append([]string{"--config", "rules"}, tc.args...), func(k string) string { return tc.env[k] }, nil, &f)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || err.Error() != tc.want) {
			t.Errorf("%v %v: err\n%v\nwant\n%s", tc.args, tc.env, err, tc.want)
		}
	}
}
