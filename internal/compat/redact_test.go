package compat

import (
	"strings"
	"testing"
)

// secretWord is the credential every case of TestStartErrorsRedacted puts
// somewhere; it must appear in no error and no warning.
const secretWord = "S3CRETw0rd"

// TestStartErrorsRedacted: every start-up refusal of a value that carries
// a credential — the reference's variables, serve's flags and their
// ENVOY_RLS_* variables, the tracing variables — names the setting and
// quotes its value without the credential.
func TestStartErrorsRedacted(t *testing.T) {
	const s = secretWord
	xds := []string{"--config-source", "xds", "--xds-server", "127.0.0.1:18000"}
	for _, c := range []struct {
		name string
		env  map[string]string // nil: not in compatibility mode
		args []string
		want string // in the error
	}{
		{"REDIS_URL with a password", compatBase(map[string]string{"REDIS_URL": "redis://u:" + s + "@127.0.0.1:6379"}), nil,
			`REDIS_URL="redis://u:xxxxx@127.0.0.1:6379": must be host:port`},
		{"REDIS_URL list with passwords", compatBase(map[string]string{"REDIS_TYPE": "cluster", "REDIS_URL": "redis://:" + s + "@h1:1,redis://:" + s + "@h2:2"}), nil,
			`REDIS_URL="redis://:xxxxx@h1:1,redis://:xxxxx@h2:2"`},
		{"REDIS_URL sentinel", compatBase(map[string]string{"REDIS_TYPE": "sentinel", "REDIS_URL": "u:" + s + "@h:1"}), nil,
			`REDIS_URL="u:xxxxx@h:1": REDIS_TYPE=SENTINEL takes`},
		{"REDIS_URL unix", compatBase(map[string]string{"REDIS_SOCKET_TYPE": "unix", "REDIS_URL": "redis://u:" + s + "@h:1"}), nil,
			`REDIS_URL="redis://u:xxxxx@h:1": REDIS_SOCKET_TYPE=unix`},
		{"REDIS_AUTH beside a refusal", compatBase(map[string]string{"REDIS_AUTH": "user:" + s, "LOG_LEVEL": "loud"}), nil,
			`LOG_LEVEL="loud"`},
		{"xDS header name refused", compatBase(map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": "Authorization:Bearer " + s}), nil,
			`CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS="Authorization:xxxxx": header name "Authorization" must be lower-case`},
		{"xDS header without a separator", compatBase(map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": "authorization Bearer " + s}), nil,
			`CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS="xxxxx": must be key:value pairs`},
		{"xDS server URL", compatBase(map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": "http://u:" + s + "@h:18000"}), nil,
			`CONFIG_GRPC_XDS_SERVER_URL="http://u:xxxxx@h:18000": must be host:port`},
		{"--xds-header name refused", nil, append(xds, "--xds-header", "Authorization:Bearer "+s),
			`--xds-header="Authorization:xxxxx": header name "Authorization"`},
		{"--xds-header value cut at a comma", nil, append(xds, "--xds-header", "authorization:Bearer "+s+",tail"),
			`--xds-header="authorization:xxxxx,xxxxx": must be key:value pairs`},
		{"ENVOY_RLS_XDS_HEADER without a separator", map[string]string{"ENVOY_RLS_XDS_HEADER": "x-api-key " + s}, xds,
			`ENVOY_RLS_XDS_HEADER="xxxxx": must be key:value pairs`},
		{"--xds-node-metadata", nil, append(xds, "--xds-node-metadata", "session-id "+s),
			`--xds-node-metadata="xxxxx"`},
		{"a header value cut at a space", nil, append(xds, "--xds-header", "authorization:Bearer", s),
			"serve takes no arguments (got 1, not shown: --xds-header is set on the command line"},
		{"--redis-addr URL", nil, []string{"--store", "redis", "--redis-addr", "redis://u:" + s + "@127.0.0.1:6379"},
			`--redis-addr="redis://u:xxxxx@127.0.0.1:6379": must be`},
		{"ENVOY_RLS_REDIS_ADDR URL", map[string]string{"ENVOY_RLS_REDIS_ADDR": "rediss://:" + s + "@127.0.0.1:6379"}, []string{"--store", "redis"},
			`ENVOY_RLS_REDIS_ADDR="rediss://:xxxxx@127.0.0.1:6379": must be`},
		{"--statsd-addr with user information", nil, []string{"--statsd-addr", "u:" + s + "@127.0.0.1:8125"},
			`--statsd-addr="u:xxxxx@127.0.0.1:8125": must be host:port`},
		{"OTLP headers with ':'", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "https://collector:4318", "OTEL_EXPORTER_OTLP_HEADERS": "authorization:Bearer " + s}, nil,
			`OTEL_EXPORTER_OTLP_HEADERS="authorization:xxxxx": must be name=value pairs`},
		{"OTLP traces headers badly escaped", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "https://collector:4318", "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "x-api-key=" + s + "%zz"}, nil,
			`OTEL_EXPORTER_OTLP_TRACES_HEADERS="x-api-key=xxxxx": must be name=value pairs`},
		{"OTLP endpoint that does not parse", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://u:" + s + "@collector:4318/%zz"}, []string{"--tracing"},
			`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT="http://u:xxxxx@collector:4318/%zz": must be a URL`},
		{"HMAC secret too short", map[string]string{"ENVOY_RLS_HMAC_SECRET": s}, nil,
			"ENVOY_RLS_HMAC_SECRET: must be at least 16 bytes (it holds 10)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"--config", "rules"}, c.args...)
			env := c.env
			if env == nil {
				env = map[string]string{}
			}
			if _, compat := env["REDIS_URL"]; compat {
				args = append([]string{"--env-compat"}, args...)
			}
			o, err := serveOptions(args, envOf(env))
			if err == nil {
				t.Fatalf("no error, want one with %q", c.want)
			}
			if strings.Contains(err.Error(), secretWord) {
				t.Errorf("the error shows the secret:\n%v", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error\n%v\nwant it to hold\n%s", err, c.want)
			}
			for _, w := range o.CompatWarnings {
				if strings.Contains(w, secretWord) {
					t.Errorf("the warning shows the secret: %s", w)
				}
			}
		})
	}
}
