package rls

import (
	"context"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/spans"
)

// tracerName is the instrumentation scope of the spans this package starts.
const tracerName = "github.com/envoy-rls/envoy-rls/pkg/rls"

// storeSpanName is the span around one store evaluation (one batch: the
// limits of one call).
const storeSpanName = "envoy_rls.store.evaluate"

// Span attributes. They name the rule domain, the policies and counts,
// never a descriptor value: values reach neither spans nor their events.
const (
	// attrDomain is the request's domain when the rules know it, else
	// UnknownDomainLabel (so a client cannot write arbitrary text into
	// spans).
	attrDomain = attribute.Key("envoy_rls.domain")
	// attrDescriptors is the number of descriptors in the request.
	attrDescriptors = attribute.Key("envoy_rls.descriptors")
	// attrBatchSize is the number of limits evaluated in one batch.
	attrBatchSize = attribute.Key("envoy_rls.batch_size")
	// attrPolicies, attrOutcome (the answer on the call's span: OK,
	// OVER_LIMIT; the store's summary on the store span) and AttrFailure
	// are the request path's shared keys (pkg/limiter/spans).
	attrPolicies = spans.Policies
	attrOutcome  = spans.Outcome
	attrFailure  = spans.Failure
)

// tracer returns the package's tracer of tp, nil when tp is nil: nil
// means no spans and no work on the request path.
func tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return nil
	}
	return tp.Tracer(tracerName)
}

// evaluateTraced is store.Evaluate inside a child span of the call's span.
func (s *Server) evaluateTraced(storeCtx context.Context, send []limiter.Request, outs []limiter.Outcome) {
	storeCtx, span := s.tracer.Start(storeCtx, storeSpanName, trace.WithSpanKind(trace.SpanKindInternal))
	defer span.End()
	s.store.Evaluate(storeCtx, send, outs)
	if !span.IsRecording() {
		return
	}
	ids := make([]string, 0, len(send))
	for i := range send {
		ids = spans.AppendPolicy(ids, send[i].Policy.ID())
	}
	span.SetAttributes(attrBatchSize.Int(len(send)), attrPolicies.StringSlice(ids))
	spans.RecordOutcomes(span, outs)
}

// annotateCall sets the call's attributes on the span in ctx (the gRPC
// server span), when it records.
func (s *Server) annotateCall(ctx context.Context, req *rlsv3.RateLimitRequest, known bool, sc *scratch, resp *rlsv3.RateLimitResponse) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	domain := unknownDomainLabel
	if known {
		domain = req.Domain
	}
	ids := make([]string, 0, len(sc.batch))
	for i := range sc.descs {
		ds := &sc.descs[i]
		if ds.kind != statusStore && ds.kind != statusNeverFits {
			continue
		}
		ids = spans.AppendPolicy(ids, ds.match.Rule.Policy.ID())
	}
	span.SetAttributes(
		attrDomain.String(domain),
		attrDescriptors.Int(len(req.Descriptors)),
		attrPolicies.StringSlice(ids),
		attrBatchSize.Int(len(sc.batch)),
		attrOutcome.String(resp.OverallCode.String()),
	)
}
