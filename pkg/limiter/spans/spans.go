// Package spans holds what the request path's spans share, so that the
// service's store span (pkg/rls) and the Redis store's program spans
// (pkg/limiter/redis) name the same things the same way: the attribute
// keys of policies and outcomes, and how a batch's outcomes are recorded.
// Attributes name policies, counts and categories, never a descriptor
// value or a key.
package spans

import (
	"slices"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// Attribute keys shared by the request path's spans.
const (
	// Policies are the IDs of the policies of the limits in the span,
	// each once, in request order.
	Policies = attribute.Key("envoy_rls.policies")
	// Outcome is the summary of the span's outcomes (limiter.Summarize),
	// or a call's answer on its span.
	Outcome = attribute.Key("envoy_rls.outcome")
	// Failure is the failure category of the first failed outcome, when
	// one failed.
	Failure = attribute.Key("envoy_rls.failure")
)

// AppendPolicy appends id to ids unless it is there already.
func AppendPolicy(ids []string, id string) []string {
	if slices.Contains(ids, id) {
		return ids
	}
	return append(ids, id)
}

// RecordOutcomes sets Outcome on span from outs (limiter.Summarize) and,
// when one failed, Failure and an error status.
func RecordOutcomes(span trace.Span, outs []limiter.Outcome) {
	outcome, failure := limiter.Summarize(outs)
	span.SetAttributes(Outcome.String(outcome))
	if failure != "" {
		span.SetAttributes(Failure.String(failure))
		span.SetStatus(codes.Error, outcome)
	}
}
