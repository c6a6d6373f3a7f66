package statsd_test

import (
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/options"
	"github.com/envoy-rls/envoy-rls/internal/statsd"
)

// TestFlagsCheck: as a group of serve's options, every refused value gives
// its one-line error, naming the flag or variable as the user set it.
func TestFlagsCheck(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--statsd-addr", "statsd:8125", "--statsd-protocol", "udp", "--statsd-extra-tags", "a:1,b:2", "--near-limit-ratio", "1"}, nil, ""},
		{[]string{"--statsd-addr", "statsd"}, nil, `--statsd-addr="statsd": must be host:port, or empty for no statsd`},
		{nil, map[string]string{"ENVOY_RLS_STATSD_ADDR": "statsd:99999"}, `ENVOY_RLS_STATSD_ADDR="statsd:99999": must be host:port, or empty for no statsd`},
		{[]string{"--statsd-protocol", "sctp"}, nil, `--statsd-protocol="sctp": must be tcp or udp`},
		{nil, map[string]string{"ENVOY_RLS_STATSD_EXTRA_TAGS": "a:1,b"}, `ENVOY_RLS_STATSD_EXTRA_TAGS="a:1,b": must be key:value pairs separated by commas`},
		{[]string{"--statsd-flush-interval", "0s"}, nil, `--statsd-flush-interval="0s": must be a positive duration such as 10s`},
		{[]string{"--statsd-flush-interval", "often"}, nil, `--statsd-flush-interval="often": must be a duration such as 500ms or 2s`},
		{[]string{"--near-limit-ratio", "1.5"}, nil, `--near-limit-ratio="1.5": must be a number greater than 0 and at most 1, such as 0.8`},
		{nil, map[string]string{"ENVOY_RLS_NEAR_LIMIT_RATIO": "most"}, `ENVOY_RLS_NEAR_LIMIT_RATIO="most": must be a number greater than 0 and at most 1, such as 0.8`},
	} {
		var f statsd.Flags
		_, _, err := options.Serve(append([]string{"--config", "rules"}, tc.args...), func(k string) string { return tc.env[k] }, nil, &f)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || err.Error() != tc.want) {
			t.Errorf("%v %v: err\n%v\nwant\n%s", tc.args, tc.env, err, tc.want)
		}
	}
}
