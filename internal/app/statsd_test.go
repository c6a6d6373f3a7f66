package app

import (
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/internal/statsd/statsdtest"
)

// TestStatsdServe serves with --statsd-addr (and the tags and protocol
// from the environment), makes calls, stops, and checks that the statsd
// server received the reference's stat names and values, the last counts
// being sent at stop, and no descriptor value.
func TestStatsdServe(t *testing.T) {
	for _, proto := range []string{"tcp", "udp"} {
		t.Run(proto, func(t *testing.T) {
			srv := statsdtest.Start(t, proto)
			rules := writeRules(t, t.TempDir(), testRules)
			// An interval longer than the test: what arrives is sent at stop.
			r := startServe(t, []string{"--config", rules, "--statsd-addr", srv.Addr, "--statsd-flush-interval", "1h"},
				map[string]string{"ENVOY_RLS_STATSD_PROTOCOL": proto, "ENVOY_RLS_STATSD_EXTRA_TAGS": "cluster:eu-1", "ENVOY_RLS_NEAR_LIMIT_RATIO": "0.5"}, hooks{})
			for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
				if got := r.check(t, "zed-the-user").OverallCode; got != want {
					t.Fatalf("call %d: %v, want %v", i, got, want)
				}
			}
			if err := r.stop(t); err != nil {
				t.Fatal(err)
			}
			const tag = ".__cluster=eu-1"
			want := map[string]int64{"ratelimit_server.ShouldRateLimit.total_requests" + tag: 3}
			// limit 2, ratio 0.5: the second hit is near.
			statsdtest.AddRule(want, "app.user", tag, statsdtest.RuleCounts{Total: 3, Within: 2, Near: 1, Over: 1})
			srv.WaitCounters(t, want, 10*time.Second)
			srv.CheckNoLineContains(t, "zed")
			if !strings.Contains(r.logs.String(), "sending stats to statsd") {
				t.Fatalf("the statsd sink was not logged:\n%s", r.logs)
			}
		})
	}
}
