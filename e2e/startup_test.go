package e2e_test

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestStartupReportsEveryProblem: a start the binary refuses reports every
// problem it can find in one run, one "envoy-rls:" line each — the option
// checks together (`serve --config config/examples --store redis`: the
// Redis address and the HMAC secret), every command-line value that does
// not parse, and a refused admin token file together with the rule files'
// problems.
func TestStartupReportsEveryProblem(t *testing.T) {
	dir := t.TempDir()
	badRules := rulesDir(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	for _, c := range []struct {
		name string
		args []string
		want []string
	}{
		{"options", []string{"serve", "--config", filepath.Join("..", "config", "examples"), "--store", "redis"}, []string{
			"envoy-rls: --redis-addr (or ENVOY_RLS_REDIS_ADDR) is not set",
			"envoy-rls: --store redis needs an HMAC secret",
		}},
		{"command line", []string{"serve", "--config", filepath.Join("..", "config", "examples"), "--redis-timeout", "5sec", "--drain-timeout=abc"}, []string{
			`envoy-rls: --redis-timeout="5sec": must be`,
			`envoy-rls: --drain-timeout="abc": must be`,
		}},
		{"token file and rules", []string{"serve", "--config", badRules, "--admin-token-file", filepath.Join(dir, "missing"),
			"--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"}, []string{
			"envoy-rls: --admin-token-file: ",
			"rules.yaml:4:",
			"1 problem(s) in the rules; nothing served",
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := runCommand(t, nil, c.args...)
			if res.code != 1 {
				t.Fatalf("exit %d, want 1\n%s", res.code, res.stderr)
			}
			lines := strings.Split(strings.TrimSpace(res.stderr), "\n")
			for _, w := range c.want {
				n := 0
				for _, l := range lines {
					if strings.HasPrefix(l, "{") {
						continue // a log line (the build line comes first)
					}
					if !strings.HasPrefix(l, "envoy-rls: ") {
						t.Fatalf("a line without the prefix (one line per problem): %q\n%s", l, res.stderr)
					}
					if strings.Contains(l, w) {
						n++
					}
				}
				if n != 1 {
					t.Errorf("%d lines with %q, want 1\n%s", n, w, res.stderr)
				}
			}
		})
	}
}
