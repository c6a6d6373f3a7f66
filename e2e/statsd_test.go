package e2e_test

import (
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/statsd/statsdtest"
)

// TestStatsd: the binary started with --statsd-addr sends
// envoyproxy/ratelimit's stat names and values for a scripted sequence of
// calls to a statsd server on loopback, over TCP (the default, as the
// reference) and UDP; no request value appears in a stat name.
func TestStatsd(t *testing.T) {
	rules := rulesDir(t, `domain: e2e
descriptors:
  - key: path
    value: /login
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: user
    detailed_metric: true
    rate_limit: {unit: hour, requests_per_unit: 2}
`)
	for _, proto := range []string{"tcp", "udp"} {
		t.Run(proto, func(t *testing.T) {
			srv := statsdtest.Start(t, proto)
			args := []string{"--statsd-addr", srv.Addr, "--statsd-flush-interval", "100ms", "--statsd-extra-tags", "env:test"}
			if proto == "udp" {
				args = append(args, "--statsd-protocol", "udp")
			}
			r := startReplica(t, "statsd-"+proto, replicaConfig{Rules: rules, Args: args})
			// path_/login, limit 5 (near threshold 4): 3, 1, 1 hits allowed
			// (the last one near), 2 denied.
			for i, st := range []struct {
				hits uint32
				ok   bool
			}{{3, true}, {1, true}, {1, true}, {2, false}} {
				res := r.call(callTimeout, st.hits, entry{"path", "/login"})
				if res.Err != nil || res.ok() != st.ok {
					t.Fatalf("path call %d: %v, want ok=%v", i, res, st.ok)
				}
			}
			// user (detailed_metric), limit 2 (near threshold 1): two users,
			// three calls each.
			for _, u := range []string{unique("SECRET-a"), unique("SECRET-b")} {
				for range 3 {
					r.mustCall(t, entry{"user", u})
				}
			}
			const tag = ".__env=test"
			want := map[string]int64{"ratelimit_server.ShouldRateLimit.total_requests" + tag: 10}
			statsdtest.AddRule(want, "e2e.path_/login", tag, statsdtest.RuleCounts{Total: 7, Within: 5, Near: 1, Over: 2})
			statsdtest.AddRule(want, "e2e.user", tag, statsdtest.RuleCounts{Total: 6, Within: 4, Near: 2, Over: 2})
			srv.WaitCounters(t, want, 10*time.Second)
			if err := r.stop(); err != nil {
				t.Fatal(err)
			}
			srv.CheckOnlyCounters(t, want)
			if n := srv.Timers()["ratelimit_server.ShouldRateLimit.response_time"+tag]; n != 10 {
				t.Errorf("response_time samples: %d, want 10", n)
			}
			srv.CheckNoLineContains(t, "SECRET")
		})
	}
}
