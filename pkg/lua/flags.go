package lua

// The bits of the flags byte of a key's packed numbers (AppendBatchPacked).
// rate-batch-v1.lua reads them with bit.band.
const (
	// FlagRoleMask holds the key's role (limiter.Role: 0 ordinary, 1
	// shadow, 2 quota, 3 check, 4 probe, 5 quota probe) in bits 0-2.
	FlagRoleMask = 7
	// FlagFailOpen: the key's failure takes no part in the batch rule
	// (limiter.Policy.AbstainsOnFailure: the policy fails open), as
	// limiter.Commits says; the failure mode's answer itself is
	// pkg/limiter/failover's.
	FlagFailOpen = 8
	// FlagPenalty: the penalty extension follows the packed numbers
	// (limiter.Penalty, BatchPackedLen).
	FlagPenalty = 16
	// FlagCalendar: the calendar extension (CalendarPacked bytes) follows
	// the packed numbers, after the penalty extension when both are set.
	FlagCalendar = 32
)
