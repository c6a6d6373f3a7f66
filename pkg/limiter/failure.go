package limiter

import (
	"fmt"
	"time"
)

// FailureMode says what a policy answers when the store fails. The answer
// is made by FailureAnswer, and by the failover wrapper of
// pkg/limiter/failover for FailLocal; the batch rule (Commits) says how a
// failure takes part in its batch.
type FailureMode uint8

const (
	// FailClosed (the default) denies, with a Retry-After.
	FailClosed FailureMode = iota
	// FailOpen allows; inside a store's batch, its failure takes no part.
	FailOpen
	// FailLocal decides with an in-process limiter holding this replica's
	// share of the limit while the store fails (pkg/limiter/failover).
	// Inside a store's batch it counts as FailClosed: a failure is a
	// denial.
	FailLocal
)

func (m FailureMode) String() string {
	switch m {
	case FailOpen:
		return "open"
	case FailLocal:
		return "local"
	}
	return "closed"
}

// ParseFailureMode is the inverse of FailureMode.String.
func ParseFailureMode(s string) (FailureMode, error) {
	for m := FailClosed; m <= FailLocal; m++ {
		if s == m.String() {
			return m, nil
		}
	}
	return 0, &FieldError{Field: "failure_mode", Reason: fmt.Sprintf("%q is not one of closed, open, local", s)}
}

// FallbackRetryAfter is the shortest Retry-After of a fail-closed answer:
// the store's hint when it gave a longer one.
const FallbackRetryAfter = time.Second

// FailureAnswer is the answer of r's failure mode to a failed outcome o
// (any kind but Evaluated): an Evaluated outcome whose Decision has Source
// SourceFallback and says how it answered (Decision.Fallback). FailOpen
// allows; FailClosed, and FailLocal when no local limiter decided, deny
// with RetryAfter max(o.RetryAfter, FallbackRetryAfter). Nothing is known
// of the limit's state (Decision.Known is false). The outcome keeps o's
// kind (Outcome.Failed), category, error and retry hint for metrics and
// logs.
func FailureAnswer(r *Request, o Outcome) Outcome {
	d := Decision{Source: SourceFallback, Fallback: FailClosed, RetryAfter: max(o.RetryAfter, FallbackRetryAfter)}
	if p := r.Policy; p != nil {
		d.PolicyID, d.PolicyRevision = p.ID(), p.Revision()
		if p.FailureMode() == FailOpen {
			d.Allowed, d.Fallback, d.RetryAfter = true, FailOpen, 0
		}
	}
	return Outcome{Kind: Evaluated, Decision: d, Failed: o.Kind, RetryAfter: o.RetryAfter, Category: o.Category, Err: o.Err}
}

// AnswerFailures replaces every outcome of batch that is not Evaluated by
// its failure mode's answer (FailureAnswer).
func AnswerFailures(batch []Request, out []Outcome) {
	for i := range out {
		if out[i].Kind != Evaluated {
			out[i] = FailureAnswer(&batch[i], out[i])
		}
	}
}

// AbstainsOnFailure reports whether a failure of a request of p takes no
// part in its batch (Commits): p fails open. A store that decides the
// batch rule inside a program of its own (the Redis batch program) passes
// this on to it.
func (p *Policy) AbstainsOnFailure() bool { return p.FailureMode() == FailOpen }

// abstains reports whether outcome o of request r takes no part in the
// batch rule: a failure of a fail-open policy, whether a store reports it
// (any kind but Evaluated) or its failure mode answered it (a FailOpen
// fallback decision). Envoy is answered OK for it, and the other limits
// decide.
func abstains(r *Request, o *Outcome) bool {
	if o.Kind == Evaluated {
		return o.Decision.Source == SourceFallback && o.Decision.Fallback == FailOpen
	}
	return r.Policy != nil && r.Policy.AbstainsOnFailure()
}
