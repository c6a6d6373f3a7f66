package limiter

import "fmt"

// FailureMode says what a policy answers when the store fails. The answer
// is made by the failover wrapper of pkg/limiter/failover; the batch rule
// (Commits) says how a failure takes part in its batch.
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
