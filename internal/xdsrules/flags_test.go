package xdsrules

import (
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/options"
)

// serve parses serve's options with the xDS flags.
func serve(args []string, env map[string]string) error {
	var f Flags
	_, _, err := options.Serve(args, func(k string) string { return env[k] }, nil, &f)
	return err
}

func TestXDSFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--config-source", "consul"}, `--config-source="consul": must be file or xds`},
		{[]string{"--config-source", "xds"}, `--xds-server (or ENVOY_RLS_XDS_SERVER) is not set: must be host:port`},
		{[]string{"--config-source", "xds", "--xds-server", "a:1", "--xds-tls-cert", "c"}, `--xds-tls-key (or ENVOY_RLS_XDS_TLS_KEY) is not set: must be set together with --xds-tls-cert`},
		{[]string{"--config-source", "xds", "--xds-server", "a:1", "--xds-header", "novalue"}, `--xds-header="novalue": must be key:value pairs`},
		{[]string{"--config-source", "xds", "--xds-server", "a:1", "--xds-header", "X-Tenant:blue"}, `--xds-header="X-Tenant:blue": header name "X-Tenant" must be lower-case`},
		{[]string{"--config-source", "xds", "--xds-server", "a:1", "--xds-header", ":authority:x"}, `--xds-header=":authority:x": must be key:value pairs`},
		{[]string{"--config-source", "xds", "--xds-server", "a:1", "--xds-retry-interval", "0s"}, `--xds-retry-interval="0s": must be a positive duration`},
	} {
		err := serve(tc.args, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
	for name, env := range map[string]map[string]string{
		"xds without --config":                     {"ENVOY_RLS_CONFIG_SOURCE": "xds", "ENVOY_RLS_XDS_SERVER": "a:1"},
		"from the environment":                     {"ENVOY_RLS_CONFIG_SOURCE": "xds", "ENVOY_RLS_XDS_SERVER": "a:1", "ENVOY_RLS_XDS_HEADER": "a:b,c=d"},
		"xds flags unchecked with the file source": {"ENVOY_RLS_CONFIG": "rules", "ENVOY_RLS_XDS_RETRY_INTERVAL": "0s"},
	} {
		if err := serve(nil, env); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestPairList(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want string
		bad  bool
	}{
		{in: []string{"a:1,b=2"}, want: "a:1,b:2"},
		{in: []string{"url:http://x:1"}, want: "url:http://x:1"},
		{in: []string{"a=b:c"}, want: "a:b:c"},
		{in: []string{"a:1", "b:2"}, want: "a:1,b:2"},
		{in: []string{" k : v "}, want: "k:v"},
		{in: []string{"novalue"}, bad: true},
		{in: []string{":x"}, bad: true},
	} {
		var p PairList
		var err error
		for _, s := range tc.in {
			if err = p.Set(s); err != nil {
				break
			}
		}
		if (err != nil) != tc.bad || (!tc.bad && p.String() != tc.want) {
			t.Errorf("%q: %q, %v; want %q (error: %v)", tc.in, p.String(), err, tc.want, tc.bad)
		}
	}
}
