// Package rls answers Envoy: it implements
// envoy.service.ratelimit.v3.RateLimitService on top of the descriptor rules
// (pkg/descriptors) and a limiter store (pkg/limiter).
//
// One ShouldRateLimit call validates the request's bounds, matches every
// descriptor against the current rule snapshot, evaluates all matched limits
// as one all-or-nothing batch through limiter.Store.Evaluate (bounded by the
// call's deadline: a call consumes on every matched limit or on none), and
// builds the response: one status per descriptor, the overall
// code, the X-RateLimit-* and Retry-After headers and, on OVER_LIMIT, a small
// JSON body. This is the only package that speaks gRPC status codes.
//
// A Server is safe for concurrent use.
package rls

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// Rules is the part of a compiled rule snapshot the server consults. A
// *descriptors.Snapshot satisfies it. Implementations must not retain the
// entries slice: the server reuses it.
type Rules interface {
	Match(domain string, entries []descriptors.Entry) (descriptors.Match, bool)
	HasDomain(domain string) bool
	Override(domain string, entries []descriptors.Entry, requestsPerUnit uint32, unit descriptors.Unit, multiplier uint32) (descriptors.Match, bool)
}

// Defaults for Config fields left zero.
const (
	defaultDenialLogTick       = time.Second
	defaultDenialLogFirst      = 10
	defaultDenialLogThereafter = 1000
)

// Config configures a Server.
type Config struct {
	// Rules returns the current rule snapshot, or nil when none is loaded
	// (calls are then answered Unavailable). It is called once per call, so
	// a reload takes effect at the next call. (Required)
	Rules func() Rules
	// Store decides the matched limits, given the caller's context: it
	// answers store failures by each policy's failure mode within the
	// caller's deadline, as pkg/limiter/failover does (keeping an answer
	// reserve of it). An outcome that is not a decision reads as a
	// fail-closed answer. (Required)
	Store limiter.Store
	// Metrics receives the service's counters. (Required; see NewMetrics)
	Metrics *Metrics
	// MaxOverridePolicies bounds the override policies of each domain
	// that may hold state at once: the key lists and windows of
	// descriptors that carry their own limit (the reference's
	// RateLimitOverride). A descriptor whose override policy would be one
	// more is answered OVER_LIMIT, with a retry hint of the time until the
	// earliest tracked one has no state left (at least a second), and
	// counted in envoy_rls_override_refused_total{domain}. (Optional,
	// default DefaultMaxOverridePolicies; at most MaxOverridePoliciesBound)
	MaxOverridePolicies int
	// Logger receives denial, failure and panic logs. Denials and store
	// failures are sampled. (Optional, default: no logs)
	Logger *zap.Logger
	// Clock converts a decision's reset time into duration_until_reset; it
	// must be the store's clock. (Optional, default: the system clock)
	Clock limiter.Clock
	// DefaultHeaders applies to rules that do not set `headers`.
	// (Optional, default HeadersFull)
	DefaultHeaders descriptors.HeaderMode
	// HeaderNames names the limit, remaining and reset headers.
	// (Optional, default DefaultHeaderNames)
	HeaderNames HeaderNames
	// DenialLogTick, DenialLogFirst and DenialLogThereafter sample denial
	// and store-failure logs: per tick, the first DenialLogFirst lines of a
	// kind are written, then one in DenialLogThereafter. (Optional,
	// defaults 1s, 10, 1000)
	DenialLogTick       time.Duration
	DenialLogFirst      int
	DenialLogThereafter int
	// TracerProvider, when not nil, makes a span around each store
	// evaluation and sets the call's attributes (domain, policies, batch
	// size, outcome) on the span in the call's context, the gRPC server
	// span (see trace.go). (Optional, default nil: no tracing work at all)
	TracerProvider trace.TracerProvider
	// Admission is told when a call served through Register starts and
	// when its request has been read; it may have cut the call, and counted
	// it, before it started (see Admission). (Optional, default nil: every
	// call is counted by its handler)
	Admission Admission
	// Observer receives every call and every decided limit, besides
	// Metrics. (Optional)
	Observer Observer
	// Auditor receives every denied limit, shadow denials included.
	// (Optional, default nil: no audit work at all)
	Auditor Auditor
	// RequestIDKey, when set, names the descriptor key that carries the
	// call's request id (Envoy's request_headers action on x-request-id):
	// a descriptor made of that one entry is never matched against the
	// rules, so its value is no subject, and the value becomes the
	// Denial's RequestID. (Optional, default: only the x-request-id gRPC
	// metadata)
	RequestIDKey string
	// DynamicMetadata sets every response's dynamic_metadata, which
	// Envoy's rate-limit filter stores under its own name
	// (envoy.filters.http.ratelimit) and its access logs can write: the
	// fields of envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA (the
	// domain, each descriptor's entries and hits_addend, the rules'
	// metadata) and, per descriptor, what decided it (see
	// buildDynamicMetadata). The entries are the request's values, sent
	// back to the proxy that sent them. (Optional, default false: no
	// metadata, no work)
	DynamicMetadata bool
}

// Server implements rlsv3.RateLimitServiceServer.
type Server struct {
	rlsv3.UnimplementedRateLimitServiceServer

	rules          func() Rules
	store          limiter.Store
	metrics        *Metrics
	log            *zap.Logger // unsampled: panics
	sampled        *zap.Logger // sampled: denials, store failures
	clock          limiter.Clock
	defaultHeaders descriptors.HeaderMode
	headerNames    HeaderNames
	admission      Admission // nil: none
	scratch        sync.Pool
	tracer         trace.Tracer // nil: tracing off
	observer       Observer     // nil: none
	auditor        Auditor      // nil: none
	// requestIDKey names the request id descriptor's key ("": none).
	requestIDKey string
	overrides    *overrideCap
	markers      markerKeys
	// dynamicMetadata: Config.DynamicMetadata.
	dynamicMetadata bool
	// epoch is a reading of the monotonic clock at New: a call's duration
	// is the difference of two durations since it, each one clock read,
	// where time.Now reads two clocks (wall and monotonic).
	epoch time.Time
	// systemClock: clock is the system clock, so the time at which the
	// store returned is the clock's reading for the answer.
	systemClock bool
}

var _ rlsv3.RateLimitServiceServer = (*Server)(nil)

// New validates cfg and returns a Server.
func New(cfg Config) (*Server, error) {
	if cfg.Rules == nil {
		return nil, errors.New("rls: Config.Rules is required")
	}
	if cfg.Store == nil {
		return nil, errors.New("rls: Config.Store is required")
	}
	if cfg.Metrics == nil {
		return nil, errors.New("rls: Config.Metrics is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Clock == nil {
		cfg.Clock = limiter.SystemClock{}
	}
	switch cfg.DefaultHeaders {
	case descriptors.HeadersDefault:
		cfg.DefaultHeaders = descriptors.HeadersFull
	case descriptors.HeadersFull, descriptors.HeadersRetryAfter, descriptors.HeadersNone:
	default:
		return nil, fmt.Errorf("rls: Config.DefaultHeaders %d is not a header mode", cfg.DefaultHeaders)
	}
	names, err := cfg.HeaderNames.withDefaults()
	if err != nil {
		return nil, err
	}
	switch {
	case cfg.MaxOverridePolicies == 0:
		cfg.MaxOverridePolicies = DefaultMaxOverridePolicies
	case cfg.MaxOverridePolicies < 0 || cfg.MaxOverridePolicies > MaxOverridePoliciesBound:
		return nil, fmt.Errorf("rls: Config.MaxOverridePolicies %d is not between 1 and %d", cfg.MaxOverridePolicies, MaxOverridePoliciesBound)
	}
	if cfg.DenialLogTick <= 0 {
		cfg.DenialLogTick = defaultDenialLogTick
	}
	if cfg.DenialLogFirst <= 0 {
		cfg.DenialLogFirst = defaultDenialLogFirst
	}
	if cfg.DenialLogThereafter <= 0 {
		cfg.DenialLogThereafter = defaultDenialLogThereafter
	}
	log := cfg.Logger.Named("rls")
	s := &Server{
		rules:   cfg.Rules,
		store:   cfg.Store,
		metrics: cfg.Metrics,
		log:     log,
		sampled: log.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
			return zapcore.NewSamplerWithOptions(c, cfg.DenialLogTick, cfg.DenialLogFirst, cfg.DenialLogThereafter)
		})),
		clock:          cfg.Clock,
		defaultHeaders: cfg.DefaultHeaders,
		headerNames:    names,
		admission:      cfg.Admission,
		tracer:         tracer(cfg.TracerProvider),
		observer:       cfg.Observer,
		auditor:        cfg.Auditor,
		requestIDKey:   cfg.RequestIDKey,
		overrides:      newOverrideCap(cfg.MaxOverridePolicies, cfg.Metrics),

		dynamicMetadata: cfg.DynamicMetadata,
		epoch:           time.Now(),
	}
	_, s.systemClock = cfg.Clock.(limiter.SystemClock)
	if _, err := rand.Read(s.markers.instance[:]); err != nil {
		return nil, fmt.Errorf("rls: the release markers' instance key: %w", err)
	}
	s.scratch.New = func() any { return new(scratch) }
	return s, nil
}

// ShouldRateLimit answers one Envoy rate-limit check.
func (s *Server) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (resp *rlsv3.RateLimitResponse, err error) {
	start := time.Since(s.epoch)
	storeFailed := false
	metricDomain := unknownDomainLabel
	var dm *domainMetrics // metricDomain's, once the domain is known
	defer func() {
		if r := recover(); r != nil {
			s.logPanic(r)
			resp, err = nil, status.Error(codes.Internal, "rls: internal error while evaluating the request")
		}
		d := time.Since(s.epoch) - start
		if dm == nil {
			dm = s.metrics.domain(metricDomain)
		}
		s.metrics.observeCallOf(dm, status.Code(err), d)
		if s.observer != nil {
			s.observer.ObserveCall(CallObservation{Code: status.Code(err), Duration: d, StoreFailed: storeFailed})
		}
	}()
	if err := ctx.Err(); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	if err := validateRequest(req); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	rules := s.rules()
	if rules == nil {
		return nil, status.Error(codes.Unavailable, "rls: no rules are loaded")
	}
	if rules.HasDomain(req.Domain) {
		metricDomain = req.Domain
	}
	dm = s.metrics.domain(metricDomain)
	sc := s.getScratch()
	sc.metrics = dm
	resp = s.evaluate(ctx, req, rules, sc)
	if s.tracer != nil {
		s.annotateCall(ctx, req, rules.HasDomain(req.Domain), sc, resp)
	}
	storeFailed = sc.storeFailed
	// Not reached on panic: the scratch of a panicking call is dropped.
	s.putScratch(sc)
	return resp, nil
}

func (s *Server) logPanic(r any) {
	// The panic value may carry request data unless it is a runtime error
	// (index out of range, nil dereference...), so only those are logged
	// verbatim.
	fields := []zap.Field{zap.Stack("stack")}
	if re, ok := r.(runtime.Error); ok {
		fields = append(fields, zap.String("panic", re.Error()))
	} else {
		fields = append(fields, zap.String("panic_type", fmt.Sprintf("%T", r)))
	}
	s.log.Error("panic while evaluating ShouldRateLimit; answered Internal", fields...)
}
