package redis

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/spans"
	"github.com/envoy-rls/envoy-rls/pkg/lua"
)

// tracerName is the instrumentation scope of the store's spans.
const tracerName = "github.com/envoy-rls/envoy-rls/pkg/limiter/redis"

// Span names: one span per program run, a child of the caller's span.
const (
	batchSpanName  = "envoy_rls.redis.batch"
	refundSpanName = "envoy_rls.redis.refund"
)

// Span attributes. Keys and arguments are never recorded (the keys hold
// digests only, but they identify a subject for as long as the HMAC
// secret lives); neither are error texts.
var (
	attrDBSystem  = attribute.String("db.system.name", "redis")
	attrDBOpName  = attribute.String("db.operation.name", "EVALSHA")
	attrDBOpFcall = attribute.String("db.operation.name", "FCALL")
	attrBatch     = attribute.String("envoy_rls.program", lua.Batch().Name)
	attrRefund    = attribute.String("envoy_rls.program", lua.Refund().Name)
)

const (
	attrGroupSize     = attribute.Key("envoy_rls.group_size")
	attrGroupRequests = attribute.Key("envoy_rls.group_requests")
	attrCommitted     = attribute.Key("envoy_rls.committed")
)

// tracer returns the store's tracer of tp, nil when tp is nil (no spans,
// no work).
func tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return nil
	}
	return tp.Tracer(tracerName)
}

// runTraced is runProgram inside a span that describes the group run: a
// child of its first call's span, linked to the others'.
func (s *Store) runTraced(gs []*group) {
	var links []trace.Link
	for _, g := range gs[1:] {
		if sc := trace.SpanContextFromContext(g.ctx); sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	op := attrDBOpFcall // the command the run starts with (function.go)
	if s.evalsha.Load() {
		op = attrDBOpName
	}
	ctx, span := s.tracer.Start(gs[0].ctx, batchSpanName, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attrDBSystem, op, attrBatch), trace.WithLinks(links...))
	defer span.End()
	s.runProgram(ctx, gs)
	if !span.IsRecording() {
		return
	}
	var outs []limiter.Outcome
	var ids []string
	keys, committed := 0, false
	for _, g := range gs {
		outs = append(outs, g.outs[:len(g.idx)]...)
		keys += len(g.idx)
		committed = committed || g.committed
		for k := range g.idx {
			ids = spans.AppendPolicy(ids, g.policies[k].ID())
		}
	}
	span.SetAttributes(
		attrGroupSize.Int(keys),
		attrGroupRequests.Int(len(gs)),
		spans.Policies.StringSlice(ids),
		attrCommitted.Bool(committed),
	)
	spans.RecordOutcomes(span, outs)
}

// refundTraced runs one refund program of n requests inside a span.
func (s *Store) refundTraced(ctx context.Context, n int, exec func(context.Context) error) error {
	ctx, span := s.tracer.Start(ctx, refundSpanName, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attrDBSystem, attrDBOpName, attrRefund, attrGroupSize.Int(n)))
	defer span.End()
	err := exec(ctx)
	span.SetAttributes(attrCommitted.Bool(err == nil))
	if err != nil {
		span.SetStatus(codes.Error, "refund not answered")
	}
	return err
}
