package spans_test

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/spans"
)

// TestRecordOutcomes: a batch's summary and, when a limit failed (also when
// a failure mode answered it), its category and an error status.
func TestRecordOutcomes(t *testing.T) {
	allowed := limiter.EvaluatedOutcome(limiter.Decision{Allowed: true})
	denied := limiter.EvaluatedOutcome(limiter.Decision{})
	down := limiter.UnavailableOutcome(0, limiter.CategoryNotConnected, errors.New("down"))
	// As pkg/limiter/failover answers it, fail closed.
	answered := limiter.Outcome{Kind: limiter.Evaluated, Decision: limiter.Decision{Source: limiter.SourceFallback},
		Failed: down.Kind, Category: down.Category, Err: down.Err}
	for _, tc := range []struct {
		name             string
		outs             []limiter.Outcome
		outcome, failure string
	}{
		{"allowed", []limiter.Outcome{allowed, allowed}, "allowed", ""},
		{"denied", []limiter.Outcome{allowed, denied}, "denied", ""},
		{"failed", []limiter.Outcome{denied, down}, "unavailable", limiter.CategoryNotConnected},
		{"answered by a failure mode", []limiter.Outcome{answered}, "unavailable", limiter.CategoryNotConnected},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			_, span := tp.Tracer("test").Start(context.Background(), "s")
			spans.RecordOutcomes(span, tc.outs)
			span.End()
			got := rec.Ended()[0]
			attrs := map[attribute.Key]string{}
			for _, kv := range got.Attributes() {
				attrs[kv.Key] = kv.Value.AsString()
			}
			if attrs[spans.Outcome] != tc.outcome || attrs[spans.Failure] != tc.failure {
				t.Fatalf("attributes %v, want outcome %q failure %q", attrs, tc.outcome, tc.failure)
			}
			if wantErr := tc.failure != ""; (got.Status().Code == codes.Error) != wantErr {
				t.Fatalf("status %v, want error: %v", got.Status(), wantErr)
			}
		})
	}
	if ids := spans.AppendPolicy(spans.AppendPolicy([]string{"a"}, "b"), "a"); len(ids) != 2 {
		t.Fatalf("AppendPolicy: %v, want each ID once", ids)
	}
}
