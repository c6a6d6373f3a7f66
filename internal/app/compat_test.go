package app

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// referenceEnv is extra over the least environment that starts in
// compatibility mode (a Redis address: the reference's default backend).
func referenceEnv(extra map[string]string) func(string) string {
	return func(k string) string {
		if v, ok := extra[k]; ok || k != "REDIS_URL" {
			return v
		}
		return "127.0.0.1:6379"
	}
}

// The reference's xDS settings reach the xDS source's flags: honoured,
// refused with the reference's names, or accepted and ignored.
func TestCompatXDS(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		got  func(o serveOpts) []any // the options the environment sets
		want []any
	}{
		{"xds", map[string]string{"CONFIG_TYPE": "grpc_xds_sotw", "CONFIG_GRPC_XDS_SERVER_URL": "eg:18001", "CONFIG_GRPC_XDS_NODE_ID": "envoy-ratelimit",
			"CONFIG_GRPC_XDS_NODE_METADATA": "a:1,b=2", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": "x-a:1,x-b:2",
			"CONFIG_GRPC_XDS_SERVER_USE_TLS": "true", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT": "/c/tls.crt", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY": "/c/tls.key",
			"CONFIG_GRPC_XDS_SERVER_TLS_CACERT": "/c/ca.crt", "CONFIG_GRPC_XDS_SERVER_TLS_SAN": "eg", "FORCE_START_WITHOUT_INITIAL_CONFIG": "true",
			"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL": "5s", "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "1s", "XDS_CLIENT_BACKOFF_MAX_INTERVAL": "20s"}, func(o serveOpts) []any {
			x := o.xdsOptions
			return []any{x.ConfigSource, x.XDSServer, x.XDSNodeID, x.XDSNodeMetadata.String(), x.XDSHeaders.String(),
				x.XDSTLS, x.XDSTLSCert, x.XDSTLSKey, x.XDSTLSCA, x.XDSTLSSAN, x.ForceStart, x.XDSRetryInterval, x.XDSRetryMax}
		}, []any{SourceXDS, "eg:18001", "envoy-ratelimit", "a:1,b:2", "x-a:1,x-b:2",
			true, "/c/tls.crt", "/c/tls.key", "/c/ca.crt", "eg", true,
			// XDS_CLIENT_BACKOFF_INITIAL_INTERVAL, set after the connect
			// retry interval, is the first wait.
			time.Second, 20 * time.Second}},
		{"our xDS server over the reference's default", map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "ENVOY_RLS_XDS_SERVER": "xds.internal:18001"}, func(o serveOpts) []any { return []any{o.XDSServer} }, []any{"xds.internal:18001"}},
		{"the reference's xDS server default", map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW"}, func(o serveOpts) []any { return []any{o.XDSServer} }, []any{"localhost:18000"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := serveOptions([]string{"--env-compat"}, referenceEnv(tc.env), nil)
			if got := tc.got(o); err != nil || len(o.CompatWarnings) != 0 || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("error %v, warnings %q, mapping\n got %#v\nwant %#v", err, o.CompatWarnings, got, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": "nohost"}, `CONFIG_GRPC_XDS_SERVER_URL="nohost": must be host:port of the xDS server`},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_NODE_METADATA": "novalue"}, `CONFIG_GRPC_XDS_NODE_METADATA="novalue": must be key:value or key=value pairs`},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": "x-a"}, `CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS="x-a": must be`},
	} {
		_, err := serveOptions([]string{"--env-compat"}, referenceEnv(tc.env), nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%v:\n got %v\nwant one line with %q", tc.env, err, tc.want)
		}
	}
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "XDS_CLIENT_BACKOFF_JITTER": "false"}, `XDS_CLIENT_BACKOFF_JITTER="false": ignored`},
	} {
		o, err := serveOptions([]string{"--env-compat"}, referenceEnv(tc.env), nil)
		if err != nil || len(o.CompatWarnings) != 1 || !strings.Contains(o.CompatWarnings[0], tc.want) {
			t.Errorf("%v: warnings %q (%v), want exactly one containing %q", tc.env, o.CompatWarnings, err, tc.want)
		}
	}
}

func TestArgsAs(t *testing.T) {
	for _, tc := range []struct {
		argv0 string
		args  []string
		want  []string
	}{
		{"/bin/ratelimit", nil, []string{"serve", "--env-compat"}},
		{"ratelimit", []string{"--log-level", "debug"}, []string{"serve", "--env-compat", "--log-level", "debug"}},
		{"/usr/local/bin/envoy-rls", []string{"version"}, []string{"version"}},
	} {
		if got := argsAs(tc.argv0, tc.args); !slices.Equal(got, tc.want) {
			t.Errorf("argsAs(%q, %q) = %q, want %q", tc.argv0, tc.args, got, tc.want)
		}
	}
}
