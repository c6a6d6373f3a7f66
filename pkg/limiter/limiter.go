// Package limiter is the provider-neutral rate-limit contract of envoy-rls: the
// validated Policy, the Request a caller asks about, the Decision a store makes,
// the four-way Outcome that also says how a store failed, the batch rule
// (Commits, Pending) and the clock.
//
// The package knows nothing of Envoy or Redis. Stores (the in-memory store in
// pkg/limiter/memory, the Redis store in pkg/limiter/redis) implement Store;
// the algorithms' steps are the pure functions of pkg/limiter/algorithm,
// run by the memory store and mirrored by the Lua programs of pkg/lua.
package limiter

import (
	"context"
	"errors"
	"fmt"
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

// Tag co-locates states: a store that spreads states over shards keeps every
// state with one non-zero Tag in one shard, so that one atomic evaluation can
// reach them together. The zero Tag means "place by the subject": different
// subjects spread. (The Redis store makes it the key's Cluster hash tag, see
// redis.StorageKey; a store with one shard ignores it.)
type Tag [8]byte

// Role is the role a limit plays in its batch (see Store).
type Role uint8

const (
	// RoleOrdinary (the zero value): the batch commits only if this limit
	// allows.
	RoleOrdinary Role = iota
	// RoleShadow: checked, reported and (when the batch commits and it
	// allows) consumed, but it never blocks the batch. A policy built with
	// PolicySpec.Shadow has this role whatever the request says (unless a
	// check or a probe).
	RoleShadow
	// RoleQuota: the batch is blocked only when every quota-mode limit of
	// the batch denies (the reference's quota_mode rule).
	RoleQuota
	// RoleCheck: checked and reported, never consumed, never blocks. A
	// caller that already knows the answer is a denial (say, a limit of
	// zero outside the batch) sends the whole batch in this role.
	RoleCheck
	// RoleProbe: checked and reported, never consumed, and it blocks the
	// batch as an ordinary limit does when it denies. It asks "would Cost
	// more be admitted now" without taking them: pkg/rls sends an explicit
	// per-descriptor hits_addend of 0 as a probe of cost 1. A later request
	// of the batch on the same state does not see a probe's cost. On a
	// shadow policy a probe is RoleCheck (it never blocks).
	RoleProbe
	// RoleQuotaProbe: a probe of a quota-mode limit: checked and reported,
	// never consumed, and it takes part in the batch rule as a quota-mode
	// limit does (the batch is blocked only when every quota-mode limit,
	// probes included, denies). On a shadow policy it is RoleCheck.
	RoleQuotaProbe
)

func (r Role) String() string {
	switch r {
	case RoleOrdinary:
		return "ordinary"
	case RoleShadow:
		return "shadow"
	case RoleQuota:
		return "quota"
	case RoleCheck:
		return "check"
	case RoleProbe:
		return "probe"
	case RoleQuotaProbe:
		return "quota-probe"
	}
	return "unknown"
}

// Consumes reports whether an allowed request in this role spends its cost
// when its batch commits: every role but the check and probe ones does.
func (r Role) Consumes() bool { return r != RoleCheck && r != RoleProbe && r != RoleQuotaProbe }

// Blocks reports whether a denial in this role can stop its batch from
// committing: ordinary, quota and probe limits can, shadow and check limits
// never.
func (r Role) Blocks() bool {
	return r == RoleOrdinary || r == RoleQuota || r == RoleProbe || r == RoleQuotaProbe
}

// Quota reports whether the role takes part in the batch rule as a
// quota-mode limit (RoleQuota, RoleQuotaProbe).
func (r Role) Quota() bool { return r == RoleQuota || r == RoleQuotaProbe }

// Request asks whether one subject may spend Cost units of one policy. The
// caller's deadline travels in the context given to Store.Evaluate.
type Request struct {
	// Policy is the validated policy to apply. (Required)
	Policy *Policy
	// Subject is the pseudonymized subject. (Required)
	Subject SubjectDigest
	// Cost is the number of units to consume, 1 <= Cost <= Policy.MaxCost().
	Cost int64
	// Role is the limit's role in the batch. (Optional, default RoleOrdinary)
	Role Role
	// Tag places the state (see Tag); zero places it by the subject.
	// Requests that must be atomic together on a sharded store carry the
	// same Tag. (Optional)
	Tag Tag
	// EvaluationID is reserved for de-duplicated evaluation; this revision
	// rejects a non-empty value. (Optional)
	EvaluationID string
	// Lease is what a request of a concurrency policy (Policy.Leases) does
	// to its lease set; only such a policy takes one other than LeaseTake.
	// (Optional, default LeaseTake)
	Lease LeaseOp
	// LeaseAt identifies, for a release or a return, the leases it gives
	// back: their expiry in Unix ms, which the take's Decision.ResetAt
	// reported. 0 gives back the soonest-expiring leases (a release) or
	// the latest-expiring (a return). (Optional; only with a release or a
	// return)
	LeaseAt int64
	// LocalLease: the request is a release of leases that this replica's
	// local fallback holds (a take that pkg/limiter/failover decided
	// locally). Only that local limiter gives them back; the failover
	// wrapper never sends such a request to its store. (Optional; only
	// with a release)
	LocalLease bool
}

// EffectiveRole returns the role the batch rule applies: for a shadow
// policy RoleCheck when the request is a check or a probe (a shadow probe
// consumes nothing and never blocks), else RoleShadow; otherwise r.Role. An
// unknown role, or a nil policy, is RoleOrdinary.
func (r *Request) EffectiveRole() Role {
	if r.Policy != nil && r.Policy.Shadow() {
		if r.Role == RoleCheck || r.Role == RoleProbe || r.Role == RoleQuotaProbe {
			return RoleCheck
		}
		return RoleShadow
	}
	if r.Role > RoleQuotaProbe {
		return RoleOrdinary
	}
	return r.Role
}

// Validate reports whether r can be evaluated. The error names the field.
func (r Request) Validate() error {
	switch {
	case r.Policy == nil:
		return &FieldError{Field: "policy", Reason: "is required"}
	case r.Cost < 1 && !(r.Cost == 0 && r.Lease == LeaseRelease && r.Reserves()):
		return &FieldError{Field: "cost", Reason: "must be at least 1 (0 only to settle a reservation)"}
	case r.Cost > r.Policy.MaxCost():
		return &FieldError{Field: "cost", Reason: "exceeds the policy's max cost"}
	case r.Role > RoleQuotaProbe:
		return &FieldError{Field: "mode", Reason: "is not a known mode"}
	case r.EvaluationID != "":
		return &FieldError{Field: "evaluation_id", Reason: "de-duplicated evaluation is not supported"}
	case r.Lease > LeaseReturn || (r.Lease != LeaseTake && !r.Policy.Leases() && !r.Reserves()) || (r.Lease == LeaseReturn && r.Reserves()):
		return &FieldError{Field: "lease", Reason: "must be take, release or return, on a concurrency policy (take or release on a reserving one)"}
	case r.LeaseAt < 0 || r.LeaseAt > MaxSafeInteger || (r.LeaseAt != 0 && r.Lease == LeaseTake):
		return &FieldError{Field: "lease_at", Reason: "must be an expiry in [0, 2^53-1], on a release or a return"}
	case r.LocalLease && r.Lease != LeaseRelease:
		return &FieldError{Field: "local_lease", Reason: "is only for a release"}
	}
	return nil
}

// Source says where a Decision came from.
type Source uint8

const (
	SourceMemory     Source = iota + 1 // the in-process memory store
	SourceRedis                        // a Lua program in Redis
	SourceLocalCache                   // the local deny cache, repeating a store denial
	SourceFallback                     // the policy's failure mode, the store having failed (Decision.Fallback says how)
	// SourceMemoryOverflow: the memory store's per-policy overflow sketch,
	// which limits a new subject conservatively (it can only over-count)
	// when the store cannot give it an exact entry.
	SourceMemoryOverflow
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
	case SourceMemoryOverflow:
		return "memory-overflow"
	}
	return "unknown"
}

// Certainty says how exact a Decision is.
type Certainty uint8

const (
	// Certain: the decision is exact (fixed window, token bucket, GCRA,
	// sliding log).
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
	// Allowed: the limit alone admits the request's cost.
	Allowed bool
	// Consumed: the cost was taken from the limit. True exactly when Allowed
	// and the batch committed (and the request was not a check or a
	// probe), or when the request Charges (recorded whatever it answered).
	// An allowed limit of a batch that did not commit is reported as it
	// stands, its cost not taken.
	Consumed bool
	// Limit is the policy's limit (token bucket: capacity; GCRA: burst).
	Limit int64
	// Remaining is what is left after this request: after its cost when
	// Consumed, before it otherwise (0 when denied and nothing is left).
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
	// Blocked: denied because the subject is in the policy's penalty box
	// (Policy.Penalty) for BlockedFor from now; nothing was consumed or
	// recorded. A blocked decision is Certain. Its RetryAfter and ResetAt
	// are never before the limit itself admits the cost: RetryAfter is
	// the longer of BlockedFor and the limit's own wait.
	Blocked bool
	// BlockedFor is, when Blocked, how long until the block ends (at most
	// RetryAfter): until then every request of the subject is BLOCKED,
	// whatever its cost; afterwards a request the limit denies is a new
	// offence. Zero when not Blocked.
	BlockedFor time.Duration
	// HoldAt is, for a committed reserve (Policy.Reserve), the identity of
	// the reservation it holds: its expiry, which a settle names
	// (Request.LeaseAt). Zero otherwise.
	HoldAt time.Time
	// Reserved is, for a request of a reserving policy, the units the
	// subject's live reservations hold after it (before it, when it did
	// not write): already counted in Remaining. Zero for other policies.
	Reserved int64
	// Expired is how many reservations of the subject this request found
	// expired unsettled and dropped (they stay charged at their amount);
	// counted once, by the request that writes the state without them.
	Expired int64
	// Fallback says, when Source is SourceFallback, how the policy's
	// failure mode answered (pkg/limiter/failover): FailOpen allowed and
	// FailClosed denied without knowing the limit's state; FailLocal is
	// the decision of the replica's local share.
	Fallback FailureMode
}

// Known reports whether the decision describes the limit's state (Limit,
// Remaining, ResetAt): every decision but a fail-open or fail-closed answer
// to a store failure.
func (d *Decision) Known() bool { return d.Source != SourceFallback || d.Fallback == FailLocal }

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
	// CategoryUnkeyed: the request was not sent because its subject
	// digest is not yet the one every replica computes (the shared HMAC
	// secret is not read yet), so it must not be sent later either.
	CategoryUnkeyed = "unkeyed"
)

// ClockUnsafeRetryAfter is the retry hint of the Unavailable outcome that
// a CLOCK_UNSAFE reply becomes: the store clock stepped back further than
// the policy allows, and nothing can be decided until it catches up.
const ClockUnsafeRetryAfter = time.Second

// Sentinel causes carried in Outcome.Err; match them with errors.Is.
var (
	// ErrClockUnsafe: the store clock is behind the state's last-observed
	// time by more than the policy's max clock regression.
	ErrClockUnsafe = errors.New("limiter: store clock moved back beyond the policy's max clock regression")
	// ErrStateIncompatible: the stored state belongs to another schema,
	// algorithm, policy or revision.
	ErrStateIncompatible = errors.New("limiter: stored state is incompatible with the policy")
	// ErrProgramInvalid: the store program refused its arguments (INVALID).
	ErrProgramInvalid = errors.New("limiter: store program rejected its arguments")
	// ErrReplyMalformed: a reply is inconsistent with its status or policy.
	ErrReplyMalformed = errors.New("limiter: malformed reply")
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
	// Failed is, on an Evaluated outcome whose decision a failure mode made
	// (Decision.Source SourceFallback), the kind of the store failure it
	// answered; RetryAfter, Category and Err are that failure's. Zero
	// otherwise.
	Failed OutcomeKind
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

// FailIfEnded answers every request of a batch Unavailable
// (CategoryDeadline, the context's error wrapped as "who: err") when ctx
// has ended, and reports whether it had. A store calls it before it
// evaluates anything: a batch whose caller has gone changes nothing.
func FailIfEnded(ctx context.Context, out []Outcome, who string) bool {
	err := ctx.Err()
	if err == nil {
		return false
	}
	err = fmt.Errorf("%s: %w", who, err)
	for i := range out {
		out[i] = UnavailableOutcome(0, CategoryDeadline, err)
	}
	return true
}

// Summarize names the outcomes of a batch (or of part of one) for a span
// attribute: outcome is "allowed" when every request allowed, "denied" when
// one denied and none failed, else the kind of the first failure (an
// outcome that is not Evaluated, or a failure mode's answer to one, see
// Outcome.Failed); failure is then that failure's category (its kind when
// it has none), and "" otherwise.
func Summarize(outs []Outcome) (outcome, failure string) {
	outcome = "allowed"
	for i := range outs {
		o := &outs[i]
		kind := o.Kind
		if kind == Evaluated && o.Decision.Source == SourceFallback {
			kind = o.Failed
		}
		switch {
		case kind != Evaluated:
			failure = o.Category
			if failure == "" {
				failure = kind.String()
			}
			return kind.String(), failure
		case !o.Decision.Allowed:
			outcome = "denied"
		}
	}
	return outcome, ""
}

// Store evaluates batches of requests. One Envoy request carries several
// descriptors, so a batch holds one Request per matched limit.
//
// A batch is all or nothing: a request either consumes on every limit that
// admits it or on none. A store first checks every request at ONE instant
// (one clock reading; a later request on the same state sees the cost of an
// earlier one of the same batch), consuming nothing; then the batch commits
// iff Commits says so: every ordinary (and probe) request allows and, when
// there are quota-mode requests, not all of them deny. On commit every
// request that allowed consumes (shadow-mode ones too; checks and probes
// never); otherwise nothing does, and allowed requests are reported with
// Consumed false and their remaining before their cost. Shadow-mode
// requests never block.
// Where a store cannot make one atomic step (the Redis store with limits in
// different Redis Cluster slots) it documents how it compensates. A caller
// or store that knows some outcomes before asking (a cached denial, a limit
// that can never fit, an invalid request) asks CheckOnly whether they alone
// block the batch, and then sends the rest as RoleCheck.
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

// errInvalid is matched by every validation error: errors.Is(err, errInvalid).
var errInvalid = errors.New("limiter: invalid")

// Is makes errors.Is(fieldErr, errInvalid) true.
func (e *FieldError) Is(target error) bool { return target == errInvalid }
