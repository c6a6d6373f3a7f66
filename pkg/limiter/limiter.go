// Package limiter is the provider-neutral rate-limit contract of envoy-rls: the
// validated Policy, the Request a caller asks about, the Decision a store makes
// and the four-way Outcome that also says how a store failed.
//
// The package knows nothing of Envoy or Redis. Stores (the in-memory store in
// pkg/limiter/memory, the Redis store in pkg/limiter/redis) implement Store; the
// algorithms are pure functions (see Apply) shared by the memory store and
// mirrored by the Lua programs of pkg/lua.
package limiter

import (
	"context"
	"errors"
	"time"
)

// MaxSafeInteger is 2^53-1, the largest integer that Lua (IEEE-754 doubles)
// and this package represent exactly. Every stored or computed quantity stays
// at or below it.
const MaxSafeInteger int64 = 1<<53 - 1

// SubjectDigest identifies the limited subject: HMAC-SHA256 over the policy ID
// and the matched descriptor entries, computed by pkg/descriptors. Raw subject
// values (IPs, user IDs, API keys) never reach this package.
type SubjectDigest [32]byte

// Request asks whether one subject may spend Cost units of one policy. The
// caller's deadline travels in the context given to Store.Evaluate.
type Request struct {
	// Policy is the validated policy to apply. (Required)
	Policy *Policy
	// Subject is the pseudonymized subject. (Required)
	Subject SubjectDigest
	// Cost is the number of units to consume, 1 <= Cost <= Policy.MaxCost().
	Cost int64
	// EvaluationID is reserved for de-duplicated evaluation; this revision
	// rejects a non-empty value. (Optional)
	EvaluationID string
}

// Validate reports whether r can be evaluated. The error names the field.
func (r Request) Validate() error {
	switch {
	case r.Policy == nil:
		return &FieldError{Field: "policy", Reason: "is required"}
	case r.Cost < 1:
		return &FieldError{Field: "cost", Reason: "must be at least 1"}
	case r.Cost > r.Policy.MaxCost():
		return &FieldError{Field: "cost", Reason: "exceeds the policy's max cost"}
	case r.EvaluationID != "":
		return &FieldError{Field: "evaluation_id", Reason: "de-duplicated evaluation is not supported"}
	}
	return nil
}

// Source says where a Decision came from.
type Source uint8

const (
	SourceMemory     Source = iota + 1 // the in-process memory store
	SourceRedis                        // a Lua program in Redis
	SourceLocalCache                   // the local deny cache, repeating a store denial
	SourceFallback                     // the policy's failure mode, the store having failed
)

func (s Source) String() string {
	switch s {
	case SourceMemory:
		return "memory"
	case SourceRedis:
		return "redis"
	case SourceLocalCache:
		return "local-cache"
	case SourceFallback:
		return "fallback"
	}
	return "unknown"
}

// Certainty says how exact a Decision is.
type Certainty uint8

const (
	// Certain: the decision is exact (fixed window, token bucket).
	Certain Certainty = iota + 1
	// Approximate: the algorithm estimates (sliding-window counter); the
	// estimate is conservative, never admitting more than the limit.
	Approximate
)

func (c Certainty) String() string {
	switch c {
	case Certain:
		return "certain"
	case Approximate:
		return "approximate"
	}
	return "unknown"
}

// Decision is a store's verdict on one Request.
type Decision struct {
	Allowed bool
	// Limit is the policy's limit (token bucket: capacity).
	Limit int64
	// Remaining is what is left after this request (0 when denied and
	// nothing is left).
	Remaining int64
	// RetryAfter is, when denied, how long until this request's cost could
	// be admitted if nothing else is consumed; zero when allowed.
	RetryAfter time.Duration
	// ResetAt is when the subject's state returns to a full allowance if
	// nothing else is consumed (fixed window: the window end).
	ResetAt        time.Time
	PolicyID       string
	PolicyRevision uint32
	Source         Source
	Certainty      Certainty
}

// OutcomeKind tells the four outcomes apart.
type OutcomeKind uint8

const (
	// Evaluated: the store decided; Outcome.Decision holds the verdict.
	Evaluated OutcomeKind = iota + 1
	// Unavailable: the store failed in a way known not to have changed any
	// state (not connected, deadline passed before sending, unsafe clock,
	// capacity exhausted).
	Unavailable
	// Indeterminate: the request was sent but no reply came (timeout or
	// connection loss after dispatch); the state may or may not have changed.
	Indeterminate
	// Incompatible: the stored state, the program or its reply do not match
	// what this version expects. Never treated as an allow.
	Incompatible
)

func (k OutcomeKind) String() string {
	switch k {
	case Evaluated:
		return "evaluated"
	case Unavailable:
		return "unavailable"
	case Indeterminate:
		return "indeterminate"
	case Incompatible:
		return "incompatible"
	}
	return "unknown"
}

// Failure categories carried by Unavailable and Incompatible outcomes. They
// are bounded, fixed strings so that they can be metric labels.
const (
	CategoryNotConnected      = "not_connected"
	CategoryDeadline          = "deadline"
	CategoryClockUnsafe       = "clock_unsafe"
	CategoryCapacity          = "capacity"
	CategoryInvalidRequest    = "invalid_request"
	CategoryStateIncompatible = "state_incompatible"
	CategoryReplyMalformed    = "reply_malformed"
	CategoryProgramInvalid    = "program_invalid"
)

// Outcome is exactly one of the four kinds. Build it with EvaluatedOutcome,
// UnavailableOutcome, IndeterminateOutcome or IncompatibleOutcome.
type Outcome struct {
	Kind OutcomeKind
	// Decision is set when Kind == Evaluated.
	Decision Decision
	// RetryAfter is a hint for Unavailable and Indeterminate outcomes.
	RetryAfter time.Duration
	// Category is one of the Category* constants for Unavailable and
	// Incompatible outcomes.
	Category string
	// Err is the underlying cause, for logs. It never contains subject data.
	Err error
}

// EvaluatedOutcome wraps a decision.
func EvaluatedOutcome(d Decision) Outcome { return Outcome{Kind: Evaluated, Decision: d} }

// UnavailableOutcome reports a failure known not to have mutated state.
func UnavailableOutcome(retryAfter time.Duration, category string, err error) Outcome {
	return Outcome{Kind: Unavailable, RetryAfter: retryAfter, Category: category, Err: err}
}

// IndeterminateOutcome reports a failure after dispatch: state may have changed.
func IndeterminateOutcome(retryAfter time.Duration, err error) Outcome {
	return Outcome{Kind: Indeterminate, RetryAfter: retryAfter, Err: err}
}

// IncompatibleOutcome reports a state, program or reply mismatch.
func IncompatibleOutcome(category string, err error) Outcome {
	return Outcome{Kind: Incompatible, Category: category, Err: err}
}

// Store evaluates batches of requests. One Envoy request carries several
// descriptors, so a batch holds one Request per matched limit.
//
// Evaluate writes exactly one Outcome per request into out, in order; out must
// have len(batch) elements (a shorter out is a programming error and Evaluate
// panics). Evaluate never blocks past ctx's deadline: requests it could not
// finish in time get an Unavailable or Indeterminate outcome. A request that
// fails Validate gets an Unavailable outcome with CategoryInvalidRequest.
//
// Implementations are safe for concurrent use by multiple goroutines.
type Store interface {
	Evaluate(ctx context.Context, batch []Request, out []Outcome)
}

// FieldError is a validation error that names the offending field.
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return "limiter: " + e.Field + " " + e.Reason }

// ErrInvalid is matched by every validation error: errors.Is(err, ErrInvalid).
var ErrInvalid = errors.New("limiter: invalid")

// Is makes errors.Is(fieldErr, ErrInvalid) true.
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }
