package limiter

import (
	"context"
	"errors"
)

// ErrResetUnsupported is returned by a caller asking a store that does not
// implement Resetter (or a wrapper whose store does not) to forget state.
var ErrResetUnsupported = errors.New("limiter: the store cannot reset states")

// Resetter is implemented by stores that can forget limit states: the
// memory store, the Redis store and the local deny cache (which forgets its
// cached denials of the same states and passes the call on). A reset subject
// starts from a full allowance on its next request. Resetting races with
// requests in flight: a decision that commits just after the reset is
// counted in the fresh state.
type Resetter interface {
	// Reset deletes the states of the given requests (only Policy, Subject
	// and Tag are read) and returns how many existed. A state that does not
	// exist is not an error.
	Reset(ctx context.Context, states []Request) (int, error)
	// ResetPolicy deletes every state of the policy policyID at revision,
	// looking at no more than b.MaxScanned states and stopping when ctx
	// ends. The answer says how many it deleted and whether it looked at
	// every state (Complete); an incomplete reset can be asked again.
	ResetPolicy(ctx context.Context, policyID string, revision uint32, b ResetBounds) (PolicyReset, error)
}

// ResetBounds bounds one ResetPolicy call.
type ResetBounds struct {
	// MaxScanned is the most states (or keys) looked at. (Required, > 0)
	MaxScanned int
}

// PolicyReset is the answer of ResetPolicy.
type PolicyReset struct {
	// Scanned is how many states (Redis: keys) were looked at.
	Scanned int
	// Deleted is how many states of the policy at the revision were deleted.
	Deleted int
	// Skipped is how many keys the scan found that are not states of this
	// service (Redis: a key named like a state key whose name is not
	// exactly a state key's, or which does not hold what the programs
	// write); they are left alone and do not stop the reset.
	Skipped int
	// Complete: every state was looked at (else the scan stopped at
	// MaxScanned or at ctx's end).
	Complete bool
}
