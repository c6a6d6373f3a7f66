package app

import (
	"bytes"
	"context"
	"errors"
	"io"
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

// TestStatsdFlagErrors: every refused statsd value gives its one-line
// start-up error naming the flag or variable, the value and what is
// accepted.
func TestStatsdFlagErrors(t *testing.T) {
	rules := writeRules(t, t.TempDir(), testRules)
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--statsd-addr", "statsd"}, nil, `--statsd-addr="statsd": must be host:port, or empty for no statsd`},
		{nil, map[string]string{"ENVOY_RLS_STATSD_ADDR": "statsd:99999"}, `ENVOY_RLS_STATSD_ADDR="statsd:99999": must be host:port, or empty for no statsd`},
		{[]string{"--statsd-protocol", "sctp"}, nil, `--statsd-protocol="sctp": must be tcp or udp`},
		{nil, map[string]string{"ENVOY_RLS_STATSD_EXTRA_TAGS": "a:1,b"}, `ENVOY_RLS_STATSD_EXTRA_TAGS="a:1,b": must be key:value pairs separated by commas`},
		{[]string{"--statsd-flush-interval", "0s"}, nil, `--statsd-flush-interval="0s": must be a positive duration such as 10s`},
		{[]string{"--statsd-flush-interval", "often"}, nil, `--statsd-flush-interval="often": must be a duration such as 500ms or 2s`},
		{[]string{"--near-limit-ratio", "1.5"}, nil, `--near-limit-ratio="1.5": must be a number greater than 0 and at most 1, such as 0.8`},
		{nil, map[string]string{"ENVOY_RLS_NEAR_LIMIT_RATIO": "most"}, `ENVOY_RLS_NEAR_LIMIT_RATIO="most": must be a number greater than 0 and at most 1, such as 0.8`},
	} {
		var errOut bytes.Buffer
		args := append([]string{"serve", "--config", rules}, tc.args...)
		err := Run(context.Background(), args, func(k string) string { return tc.env[k] }, io.Discard, &errOut)
		if err == nil || errors.Is(err, ErrFailed) || err.Error() != tc.want {
			t.Errorf("%v %v: err\n%v\nwant\n%s", tc.args, tc.env, err, tc.want)
		}
		if err := CheckServeArgs(args[1:], func(k string) string { return tc.env[k] }); err == nil || err.Error() != tc.want {
			t.Errorf("CheckServeArgs %v %v: %v", tc.args, tc.env, err)
		}
	}
}
