package limiter

import (
	"errors"
	"time"
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
