package tracing

import (
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"

	"github.com/envoy-rls/envoy-rls/internal/options"
)

func TestReadTracing(t *testing.T) {
	for _, tc := range []struct {
		name     string
		flag     Flags // its On and given, with label
		label    string
		env      map[string]string
		on       bool
		protocol string
		sampler  string
		service  string
		wantErr  string
	}{
		{name: "off by default", protocol: protocolHTTPProtobuf, sampler: "parentbased_always_on"},
		{name: "endpoint turns it on", env: map[string]string{envEndpoint: "http://127.0.0.1:4318"}, on: true},
		{name: "traces endpoint turns it on", env: map[string]string{envTracesEndpoint: "http://127.0.0.1:4318/v1/traces"}, on: true},
		{name: "exporter otlp", env: map[string]string{envTracesExporter: "otlp"}, on: true},
		{name: "exporter none wins over the endpoint", env: map[string]string{envTracesExporter: "none", envEndpoint: "http://x:4318"}},
		{name: "flag", flag: Flags{On: true, given: true}, label: `--tracing="true"`, on: true},
		{name: "flag false wins over the endpoint", flag: Flags{given: true}, label: `--tracing="false"`, env: map[string]string{envEndpoint: "http://x:4318"}},
		{name: "sdk disabled wins over everything", flag: Flags{On: true, given: true}, env: map[string]string{envSDKDisabled: "true", envRefEnabled: "true"}},
		{name: "reference alias", env: map[string]string{envRefEnabled: "true", envRefProtocol: "grpc", envRefServiceName: "RateLimit", envRefSamplingRate: "0.25"},
			on: true, protocol: protocolGRPC, sampler: "parentbased_traceidratio(0.25)", service: "RateLimit"},
		{name: "reference alias off wins over the endpoint", env: map[string]string{envRefEnabled: "false", envEndpoint: "http://x:4318"}},
		{name: "reference http protocol", env: map[string]string{envRefEnabled: "1", envRefProtocol: "http"}, on: true, protocol: protocolHTTPProtobuf},
		{name: "OTEL protocol wins over the alias", env: map[string]string{envRefEnabled: "1", envRefProtocol: "http", envProtocol: "grpc"}, on: true, protocol: protocolGRPC},
		{name: "traces protocol wins", env: map[string]string{envTracesProtocol: "http/protobuf", envProtocol: "grpc"}, protocol: protocolHTTPProtobuf},
		{name: "OTEL sampler wins over the alias", env: map[string]string{envSampler: "traceidratio", envSamplerArg: "0.5", envRefSamplingRate: "0.1"}, sampler: "traceidratio(0.5)"},
		{name: "service name default", env: map[string]string{envRefEnabled: "true"}, on: true, service: defaultServiceName},
		{name: "bad exporter", env: map[string]string{envTracesExporter: "zipkin"}, wantErr: `OTEL_TRACES_EXPORTER="zipkin": must be otlp or none`},
		{name: "bad protocol", env: map[string]string{envProtocol: "http/json"}, wantErr: `OTEL_EXPORTER_OTLP_PROTOCOL="http/json": must be grpc or http/protobuf`},
		{name: "bad alias protocol", env: map[string]string{envRefProtocol: "thrift"}, wantErr: `TRACING_EXPORTER_PROTOCOL="thrift": must be http or grpc`},
		{name: "bad enabled", env: map[string]string{envRefEnabled: "yes please"}, wantErr: `TRACING_ENABLED="yes please": must be true or false`},
		{name: "bad rate", env: map[string]string{envRefSamplingRate: "2"}, wantErr: `TRACING_SAMPLING_RATE="2": must be a number between 0 and 1`},
		{name: "bad sampler", env: map[string]string{envSampler: "sometimes"}, wantErr: `OTEL_TRACES_SAMPLER="sometimes": must be always_on`},
		{name: "bad sampler arg", env: map[string]string{envSampler: "parentbased_traceidratio", envSamplerArg: "half"}, wantErr: `OTEL_TRACES_SAMPLER_ARG="half": must be a number between 0 and 1`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			getenv := func(k string) string { return tc.env[k] }
			f := tc.flag
			f.Getenv = getenv
			ts, err := f.read(tc.label)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("read error %v, want %q", err, tc.wantErr)
				}
				var refused string
				f.Check(func(_ string, ok bool, reason string) {
					if !ok {
						refused = reason
					}
				}, nil)
				if refused != err.Error() {
					t.Fatalf("Check refused %q, want %v", refused, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.flag.given && ts.on && ts.why != tc.label {
				t.Errorf("why = %q, want the flag as given, %q", ts.why, tc.label)
			}
			if ts.on != tc.on {
				t.Errorf("on = %v (because %s), want %v", ts.on, ts.why, tc.on)
			}
			if tc.protocol != "" && ts.protocol != tc.protocol {
				t.Errorf("protocol = %q, want %q", ts.protocol, tc.protocol)
			}
			if tc.sampler != "" && ts.samplerName != tc.sampler {
				t.Errorf("sampler = %q, want %q", ts.samplerName, tc.sampler)
			}
			if tc.service != "" && !slices.Contains(ts.attrs, attribute.String("service.name", tc.service)) {
				t.Errorf("resource attributes %v: want service.name %q", ts.attrs, tc.service)
			}
		})
	}
}

// TestFlagsWithServe: as a group of serve's options, --tracing is given on
// the command line or by its variable, and every refused variable is one
// line of serve's check.
func TestFlagsWithServe(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		env     map[string]string
		on      bool
		why     string
		wantErr string
	}{
		{name: "not given", env: map[string]string{envEndpoint: "http://127.0.0.1:4318"}, on: true, why: envEndpoint + " is set"},
		{name: "command line", args: []string{"--tracing=false"}, env: map[string]string{envEndpoint: "http://127.0.0.1:4318"}, why: `--tracing="false"`},
		{name: "variable", env: map[string]string{"ENVOY_RLS_TRACING": "true"}, on: true, why: `ENVOY_RLS_TRACING="true"`},
		{name: "bare flag", args: []string{"--tracing"}, on: true, why: `--tracing="true"`},
		{name: "variable not a boolean", env: map[string]string{"ENVOY_RLS_TRACING": "yes"}, wantErr: `ENVOY_RLS_TRACING="yes": must be true or false`},
		{name: "refused variable", env: map[string]string{envTracesExporter: "zipkin"}, wantErr: `OTEL_TRACES_EXPORTER="zipkin": must be otlp or none (this binary exports traces by OTLP only)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			getenv := func(k string) string { return tc.env[k] }
			f := Flags{Getenv: getenv}
			o, _, err := options.Serve(append([]string{"--config", "rules"}, tc.args...), getenv, nil, &f)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			ts, err := f.read(o.Label("tracing"))
			if err != nil || ts.on != tc.on || ts.why != tc.why {
				t.Fatalf("on %v because %q (%v), want %v because %q", ts.on, ts.why, err, tc.on, tc.why)
			}
		})
	}
}
