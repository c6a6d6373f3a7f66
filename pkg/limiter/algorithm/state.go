package algorithm

import "github.com/envoy-rls/envoy-rls/pkg/limiter"

// StateSchema is the version of the stored state layout.
const StateSchema = 1

// Status is the first of the seven reply fields: how one evaluation ended.
// String gives the names docs/algorithms.md uses; how a store encodes a
// status (the Lua programs' codes) is that store's concern (pkg/lua).
type Status uint8

const (
	StatusAllowed           Status = iota + 1 // ALLOWED
	StatusDenied                              // DENIED
	StatusClockUnsafe                         // CLOCK_UNSAFE
	StatusStateIncompatible                   // STATE_INCOMPATIBLE
	StatusInvalid                             // INVALID
	// StatusBlocked: the subject is in its penalty box (limiter.Penalty);
	// a denial that consumed nothing and recorded nothing.
	StatusBlocked // BLOCKED
)

func (s Status) String() string {
	switch s {
	case StatusAllowed:
		return "ALLOWED"
	case StatusDenied:
		return "DENIED"
	case StatusClockUnsafe:
		return "CLOCK_UNSAFE"
	case StatusStateIncompatible:
		return "STATE_INCOMPATIBLE"
	case StatusInvalid:
		return "INVALID"
	case StatusBlocked:
		return "BLOCKED"
	}
	return "UNKNOWN"
}

// Reply is the seven-field answer of one evaluation, identical for the Go
// steps and the Lua programs. Times are Unix milliseconds.
type Reply struct {
	Status         Status
	ServerNowMs    int64 // the store clock as read
	EffectiveNowMs int64 // after clamping a small backward step
	Limit          int64
	Remaining      int64
	RetryAfterMs   int64
	ResetAtMs      int64
	// BlockLeftMs is, for BLOCKED, the ms from the effective now until the
	// penalty box's block ends: at most RetryAfterMs, which also waits
	// for the limit itself to admit the cost. 0 for every other status.
	BlockLeftMs int64
	// HoldAtMs is, for an ALLOWED reserve (CheckRequest) that writes, the
	// identity of the reservation it holds; 0 otherwise.
	HoldAtMs int64
	// ReservedUnits is, for a request of a reserving policy, the units its
	// subject's live reservations hold after the request (before it when
	// it does not write); 0 for other policies.
	ReservedUnits int64
	// Expired is, for a request of a reserving policy that writes, how
	// many reservations it found expired unsettled and dropped (they
	// stay charged); 0 otherwise.
	Expired int64
}

// State is the stored state of one (policy, subject). The zero value (Exists
// false) is "no state yet". The Lua programs keep the same fields in one
// string (pkg/lua/src/fragments/string-v2.lua).
type State struct {
	Exists    bool
	Schema    int64
	Algorithm limiter.Algorithm
	PolicyID  string
	Revision  uint32
	// LastObservedMs is the largest effective time that changed this state.
	LastObservedMs int64
	// Epoch is when the counts were taken: the window id (fixed and
	// sliding window, sliding log) or the last refill time in ms (token bucket); GCRA:
	// the theoretical arrival time's whole ms.
	Epoch int64
	// Level is what the epoch holds: the units consumed in the window
	// (fixed and sliding window) or the tokens left (token bucket); 0 for
	// GCRA.
	Level int64
	// Carry is what is kept beside the level: the previous window's count
	// (sliding window), the sub-token refill remainder (token bucket) or
	// the theoretical arrival time's fraction of a ms, in 1/amount ms (GCRA).
	Carry int64
	// Log is a sliding log's hits in its window, oldest first, packed as
	// the Lua programs keep it: SlidingLogEntryBytes per hit (see
	// AppendSlidingLogEntry); empty for the other algorithms.
	// A string, so that State stays comparable.
	Log string
	// Reserved is, for a reserving policy (limiter.Reserve), its
	// reservations, packed as the Lua programs keep them:
	// ReservationEntryBytes each (see reserve.go), identities ascending;
	// empty for every other policy. A string, as Log.
	Reserved string
	// ExpiresAtMs is when the state may be dropped (effective now + TTL).
	ExpiresAtMs int64
	// PenaltyUntilMs is when the last penalty block ends (effective
	// time), PenaltyLevel how many offences in a row it counts (0: none);
	// only a policy with a Penalty reads or writes them.
	PenaltyUntilMs, PenaltyLevel int64
}
