package audit

import (
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/options"
	"github.com/envoy-rls/envoy-rls/internal/store"
)

// TestFlagsCheck: as a group of serve's options, every refused audit value
// gives its one-line error, naming the flag as the user set it.
func TestFlagsCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"file", []string{"--audit-sink", "file", "--audit-file", "/tmp/audit.jsonl", "--audit-sample", "0.5", "--audit-sample-policy", "a=0.1"}, ""},
		{"redis", []string{"--audit-sink", "redis", "--redis-addr", "127.0.0.1:6379"}, ""},
		{"sink", []string{"--audit-sink", "kafka"}, `--audit-sink="kafka": must be redis, file, stdout, or empty for no audit sink`},
		{"file without path", []string{"--audit-sink", "file"}, `--audit-file (or ENVOY_RLS_AUDIT_FILE) is not set: must be the file to append to (required with --audit-sink file)`},
		{"redis without address", []string{"--audit-sink", "redis"}, `--audit-sink="redis": the redis audit sink needs --redis-addr`},
		{"sample", []string{"--audit-sample", "0"}, `--audit-sample="0": must be a number greater than 0 and at most 1, such as 0.1`},
		{"policy sample", []string{"--audit-sample-policy", "edge/user=2"}, `--audit-sample-policy="edge/user=2": must be at most 1000 policy_id=share pairs separated by commas, each share greater than 0 and at most 1`},
		{"maxlen", []string{"--audit-redis-maxlen", "0"}, `--audit-redis-maxlen="0": must be an integer between 1 and 100000000`},
		{"queue", []string{"--audit-queue-size", "0"}, `--audit-queue-size="0": must be an integer between 1 and 1000000`},
		{"usage interval", []string{"--audit-usage-interval", "10ms"}, `--audit-usage-interval="10ms": must be 0 (no usage records) or a duration from 100ms to 24h0m0s, such as 5m`},
	} {
		// The store's flags hold --redis-addr, which the redis sink needs.
		var f Flags
		_, _, err := options.Serve(append([]string{"--config", "rules"}, tc.args...), func(string) string { return "" }, nil, &f, &store.Flags{})
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || err.Error() != tc.want) {
			t.Errorf("%s: err\n%v\nwant\n%s", tc.name, err, tc.want)
		}
	}
}

func TestParsePolicySamples(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want map[string]float64
		ok   bool
	}{
		{"", nil, true},
		{"edge/user=0.1, edge/ip=1", map[string]float64{"edge/user": 0.1, "edge/ip": 1}, true},
		{"edge/user", nil, false},
		{"=0.5", nil, false},
		{"a=0", nil, false},
		{"a=x", nil, false},
	} {
		got, ok := parsePolicySamples(tc.in)
		if ok != tc.ok || len(got) != len(tc.want) {
			t.Errorf("%q: %v %v, want %v %v", tc.in, got, ok, tc.want, tc.ok)
			continue
		}
		for k, v := range tc.want {
			if got[k] != v {
				t.Errorf("%q: %s=%v, want %v", tc.in, k, got[k], v)
			}
		}
	}
}
