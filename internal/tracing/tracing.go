// Package tracing exports OpenTelemetry traces of the ShouldRateLimit calls
// by OTLP: its settings (--tracing, the OTEL_* variables and the reference
// service's TRACING_* ones), their check, and Start, which builds the tracer
// provider the packages take and the gRPC stats handler that starts a span
// per call.
package tracing

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/propagators/b3"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	noopmetric "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/stats"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/internal/buildinfo"
	"github.com/envoy-rls/envoy-rls/internal/redact"
)

// Tracing is configured by the OpenTelemetry SDK's standard variables, the
// --tracing flag (Flags) and the reference service's TRACING_* variables
// (docs/observe.md, "Tracing"). The variables this file reads itself;
// the OTLP exporters read the rest of OTEL_EXPORTER_OTLP_* (endpoint,
// headers, timeout, TLS, compression) and the batch span processor reads
// OTEL_BSP_*, both from the process environment.
const (
	envSDKDisabled       = "OTEL_SDK_DISABLED"
	envTracesExporter    = "OTEL_TRACES_EXPORTER"
	envEndpoint          = "OTEL_EXPORTER_OTLP_ENDPOINT"
	envTracesEndpoint    = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	envProtocol          = "OTEL_EXPORTER_OTLP_PROTOCOL"
	envTracesProtocol    = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	envServiceName       = "OTEL_SERVICE_NAME"
	envSampler           = "OTEL_TRACES_SAMPLER"
	envSamplerArg        = "OTEL_TRACES_SAMPLER_ARG"
	envRefEnabled        = "TRACING_ENABLED"
	envRefServiceName    = "TRACING_SERVICE_NAME"
	envRefNamespace      = "TRACING_SERVICE_NAMESPACE"
	envRefInstanceID     = "TRACING_SERVICE_INSTANCE_ID"
	envRefSamplingRate   = "TRACING_SAMPLING_RATE"
	envRefProtocol       = "TRACING_EXPORTER_PROTOCOL"
	defaultServiceName   = "envoy-rls"
	protocolGRPC         = "grpc"
	protocolHTTPProtobuf = "http/protobuf"
)

// tracingShutdownTimeout bounds flushing the spans still buffered when
// the server stops (after the drain).
const tracingShutdownTimeout = 5 * time.Second

// tracingSettings is what the flags and the environment ask of tracing.
type tracingSettings struct {
	on bool
	// why names the setting that decided on or off, for the start log.
	why      string
	protocol string // protocolGRPC or protocolHTTPProtobuf
	// sampler is nil for the SDK's default: parent-based, always on.
	sampler     sdktrace.Sampler
	samplerName string
	attrs       []attribute.KeyValue // resource attributes from the aliases
}

// Flags are tracing's settings: --tracing, which Define puts on the serve
// command (options.Group), and the process environment.
type Flags struct {
	// On is --tracing; given says whether the user set it (on the command
	// line, by its variable or a preset).
	On    bool
	given bool
	// Getenv reads the OTEL_* and TRACING_* variables. (Required)
	Getenv func(string) string
}

// Define defines --tracing on fs.
func (f *Flags) Define(fs *flag.FlagSet) map[string]string {
	fs.Var(tracingFlag{f}, "tracing", "export OpenTelemetry traces by OTLP, configured by the OTEL_* variables (docs/observe.md, Tracing); also on when OTEL_EXPORTER_OTLP_ENDPOINT is set, off when OTEL_SDK_DISABLED=true")
	return nil
}

// tracingFlag is --tracing: a boolean that records that it was set.
type tracingFlag struct{ f *Flags }

func (t tracingFlag) String() string { return strconv.FormatBool(t.f != nil && t.f.On) }

func (t tracingFlag) Set(s string) error {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	t.f.On, t.f.given = b, true
	return nil
}

func (tracingFlag) IsBoolFlag() bool { return true }

// Check refuses the tracing settings that would fail Start: every problem
// of the variables, one line each.
func (f *Flags) Check(check func(string, bool, string), _ func(string) string) {
	_, err := f.read("")
	check("", err == nil, fmt.Sprint(err))
}

// read decides whether tracing is on and how, from --tracing (as the user
// set it: label) and the environment. The rule, first match wins:
//
//  1. OTEL_SDK_DISABLED=true: off.
//  2. --tracing (ENVOY_RLS_TRACING) when given: its value.
//  3. TRACING_ENABLED when set: its value.
//  4. OTEL_TRACES_EXPORTER when set: on for otlp, off for none.
//  5. OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
//     set: on.
//  6. Otherwise off.
//
// Every variable it reads is checked even when tracing stays off, so a
// typo fails start instead of silently tracing nothing.
func (f *Flags) read(label string) (tracingSettings, error) {
	getenv := f.Getenv
	var ts tracingSettings
	var errs []error
	bad := func(name, value, want string) {
		errs = append(errs, fmt.Errorf("%s=%q: must be %s", name, redact.Setting(name, value), want))
	}
	parseBool := func(name string) (v, set bool) {
		raw := getenv(name)
		if raw == "" {
			return false, false
		}
		b, err := strconv.ParseBool(strings.TrimSpace(raw))
		if err != nil {
			bad(name, raw, "true or false")
			return false, false
		}
		return b, true
	}
	disabled, _ := parseBool(envSDKDisabled)
	refOn, refSet := parseBool(envRefEnabled)
	exporter := strings.ToLower(strings.TrimSpace(getenv(envTracesExporter)))
	switch exporter {
	case "", "otlp", "none":
	default:
		bad(envTracesExporter, getenv(envTracesExporter), "otlp or none (this binary exports traces by OTLP only)")
	}
	switch {
	case disabled:
		ts.why = envSDKDisabled + "=true"
	case f.given:
		ts.on, ts.why = f.On, label
	case refSet:
		ts.on, ts.why = refOn, envRefEnabled+"="+getenv(envRefEnabled)
	case exporter != "":
		ts.on, ts.why = exporter == "otlp", envTracesExporter+"="+exporter
	case getenv(envTracesEndpoint) != "":
		ts.on, ts.why = true, envTracesEndpoint+" is set"
	case getenv(envEndpoint) != "":
		ts.on, ts.why = true, envEndpoint+" is set"
	default:
		ts.why = "no tracing setting"
	}
	if ts.on {
		checkOTLP(getenv, bad)
	}

	ts.protocol = protocolHTTPProtobuf
	if name, raw := firstSet(getenv, envTracesProtocol, envProtocol, envRefProtocol); raw != "" {
		switch p := strings.ToLower(strings.TrimSpace(raw)); {
		case p == protocolGRPC:
			ts.protocol = protocolGRPC
		case p == protocolHTTPProtobuf, p == "http" && name == envRefProtocol:
		case name == envRefProtocol:
			bad(name, raw, "http or grpc")
		default:
			bad(name, raw, "grpc or http/protobuf (http/json is not supported)")
		}
	}

	ts.sampler, ts.samplerName = readSampler(getenv, bad)

	name := defaultServiceName
	if v := getenv(envRefServiceName); v != "" {
		name = v
	}
	ts.attrs = append(ts.attrs, attribute.String("service.name", name),
		attribute.String("service.version", buildinfo.Get().Version))
	if v := getenv(envRefNamespace); v != "" {
		ts.attrs = append(ts.attrs, attribute.String("service.namespace", v))
	}
	if v := getenv(envRefInstanceID); v != "" {
		ts.attrs = append(ts.attrs, attribute.String("service.instance.id", v))
	} else if h, err := os.Hostname(); err == nil && h != "" {
		ts.attrs = append(ts.attrs, attribute.String("service.instance.id", h))
	}
	return ts, errors.Join(errs...)
}

// readSampler is the sampler of OTEL_TRACES_SAMPLER (and its argument),
// else of TRACING_SAMPLING_RATE (parent-based, that ratio for new traces),
// else nil and "parentbased_always_on" (the SDK's default).
func readSampler(getenv func(string) string, bad func(name, value, want string)) (sdktrace.Sampler, string) {
	ratio := func(name string) (float64, bool) {
		raw := getenv(name)
		if raw == "" {
			return 1, true
		}
		r, err := strconv.ParseFloat(strings.TrimSpace(raw), 64)
		if err != nil || r < 0 || r > 1 {
			bad(name, raw, "a number between 0 and 1")
			return 0, false
		}
		return r, true
	}
	raw := getenv(envSampler)
	switch s := strings.ToLower(strings.TrimSpace(raw)); s {
	case "":
	case "always_on":
		return sdktrace.AlwaysSample(), s
	case "always_off":
		return sdktrace.NeverSample(), s
	case "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), s
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), s
	case "traceidratio", "parentbased_traceidratio":
		r, ok := ratio(envSamplerArg)
		if !ok {
			return nil, ""
		}
		if s == "traceidratio" {
			return sdktrace.TraceIDRatioBased(r), fmt.Sprintf("%s(%g)", s, r)
		}
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(r)), fmt.Sprintf("%s(%g)", s, r)
	default:
		bad(envSampler, raw, "always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio")
		return nil, ""
	}
	if getenv(envRefSamplingRate) != "" {
		r, ok := ratio(envRefSamplingRate)
		if !ok {
			return nil, ""
		}
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(r)), fmt.Sprintf("parentbased_traceidratio(%g)", r)
	}
	return nil, "parentbased_always_on"
}

// firstSet is the first of names that is set, and its value.
func firstSet(getenv func(string) string, names ...string) (name, value string) {
	for _, n := range names {
		if v := getenv(n); v != "" {
			return n, v
		}
	}
	return "", ""
}

// Tracing is the running tracer provider of a serve, nil when tracing is
// off.
type Tracing struct {
	tp *sdktrace.TracerProvider
}

// Start builds the tracer provider when tracing is on and returns it with
// the function that flushes and stops it (at most tracingShutdownTimeout).
// label names a flag as the user set it; exporter replaces the OTLP
// exporter (tests).
func Start(ctx context.Context, f *Flags, label func(string) string, log *zap.Logger, exporter sdktrace.SpanExporter) (*Tracing, func(), error) {
	ts, err := f.read(label("tracing"))
	if err != nil {
		return nil, nil, err
	}
	if !ts.on {
		log.Debug("tracing off", zap.String("because", ts.why))
		return nil, func() {}, nil
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(ts.attrs...),
		// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win over the
		// TRACING_* aliases.
		resource.WithFromEnv(),
		resource.WithTelemetrySDK(),
	)
	if err != nil {
		return nil, nil, fmt.Errorf("tracing: resource attributes (%s, OTEL_RESOURCE_ATTRIBUTES): %w", envServiceName, err)
	}
	var opts []sdktrace.TracerProviderOption
	if exporter != nil {
		// Tests read spans as soon as they end.
		opts = append(opts, sdktrace.WithSyncer(exporter))
	} else {
		if exporter, err = newOTLPExporter(ctx, ts.protocol); err != nil {
			return nil, nil, err
		}
		warnOTLPCredentials(log, f.Getenv)
		opts = append(opts, sdktrace.WithBatcher(exporter))
	}
	opts = append(opts, sdktrace.WithResource(res))
	if ts.sampler != nil {
		opts = append(opts, sdktrace.WithSampler(ts.sampler))
	}
	// The SDK reports export failures only through this process-wide
	// handler; route them to the log (sampled) while this server runs.
	prev := otel.GetErrorHandler()
	sampled := log.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return zapcore.NewSamplerWithOptions(c, time.Minute, 5, 100)
	}))
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		sampled.Warn("tracing: export failed; spans dropped", zap.String("error", redact.URLs(err.Error())))
	}))
	tp := sdktrace.NewTracerProvider(opts...)
	log.Info("tracing on",
		zap.String("because", ts.why),
		zap.String("protocol", ts.protocol),
		zap.String("sampler", ts.samplerName),
		zap.String("service_name", serviceName(res)))
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), tracingShutdownTimeout)
		defer cancel()
		if err := tp.Shutdown(ctx); err != nil {
			log.Warn("tracing: spans not flushed at stop", zap.Duration("timeout", tracingShutdownTimeout), zap.Error(err))
		}
		otel.SetErrorHandler(prev)
	}
	return &Tracing{tp: tp}, stop, nil
}

// newOTLPExporter is the OTLP exporter of protocol; it reads its endpoint,
// headers, timeout, TLS and compression from OTEL_EXPORTER_OTLP_*.
func newOTLPExporter(ctx context.Context, protocol string) (sdktrace.SpanExporter, error) {
	var exp sdktrace.SpanExporter
	var err error
	if protocol == protocolGRPC {
		exp, err = otlptracegrpc.New(ctx)
	} else {
		exp, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP %s exporter (%s, %s): %s", protocol, envEndpoint, envTracesEndpoint, redact.URLs(err.Error()))
	}
	return exp, nil
}

func serviceName(res *resource.Resource) string {
	v, _ := res.Set().Value("service.name")
	return v.AsString()
}

// propagator reads the caller's trace context: B3 (single or multiple
// headers, as Envoy's Zipkin tracer sends them) and W3C traceparent, which
// wins when a call carries both.
func propagator() propagation.TextMapPropagator {
	return propagation.NewCompositeTextMapPropagator(b3.New(), propagation.TraceContext{})
}

// shouldRateLimitMethod is the one method traced: health checks and
// reflection are not.
var shouldRateLimitMethod = "/" + rlsv3.RateLimitService_ServiceDesc.ServiceName + "/ShouldRateLimit"

// Provider is the tracer provider for the packages' options: nil (no
// spans, no work) when tracing is off. (A nil *sdktrace.TracerProvider in
// the interface would not be nil.)
func (t *Tracing) Provider() trace.TracerProvider {
	if t == nil {
		return nil
	}
	return t.tp
}

// ServerOptions hold the gRPC stats handler that starts a server span per
// ShouldRateLimit call, a child of the caller's trace context; none when
// tracing is off.
func (t *Tracing) ServerOptions() []grpc.ServerOption {
	if t == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.StatsHandler(otelgrpc.NewServerHandler(
		otelgrpc.WithTracerProvider(t.tp),
		otelgrpc.WithPropagators(propagator()),
		// Metrics stay with Prometheus (/metrics).
		otelgrpc.WithMeterProvider(noopmetric.NewMeterProvider()),
		otelgrpc.WithFilter(func(info *stats.RPCTagInfo) bool { return info.FullMethodName == shouldRateLimitMethod }),
	))}
}
