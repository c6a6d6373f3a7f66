package lua

import (
	_ "embed"
	"strconv"
)

//go:embed reset-v1.lua
var resetV1 string

// Reset returns reset-v1.lua, the program of a policy reset: one key,
// deleted only when it holds a state this version writes, checked and
// deleted in one atomic run. It is not one of Programs, the rate programs.
func Reset() program { return program{Name: "reset-v1.lua", Source: resetV1} }

// ResetArgsV2 returns the ARGV of reset-v1.lua for a key of
// redis.StorageKey's layout named for the policy being reset: it is
// deleted when it holds a state of rate-batch-v2.lua or a lease set of
// the lease program (Lease).
func ResetArgsV2() []string { return []string{"2"} }

// ResetArgsV1 returns the ARGV of reset-v1.lua for a key of
// redis.StorageKeyV1's layout: it is deleted when it holds a hash of
// rate-batch-v1.lua of policyID at revision.
func ResetArgsV1(policyID string, revision uint32) []string {
	return []string{"1", policyID, strconv.FormatUint(uint64(revision), 10)}
}

// resetResult is the reply of reset-v1.lua: what the key held.
type resetResult int64

const (
	// resetForeign: not a state of envoy-rls (another type, fields or
	// layout); left alone.
	resetForeign resetResult = 0
	// resetDeleted: a state of the policy, deleted.
	resetDeleted resetResult = 1
	// resetOther: a state of another policy or revision; left alone.
	resetOther resetResult = 2
	// resetGone: no such key (it expired after the scan found it).
	resetGone resetResult = 3
)

// ParseResetReply validates a reply of reset-v1.lua and reports whether
// the key was a state of the policy, now deleted, or not a state of
// envoy-rls at all (foreign, left alone); any other reply is an error
// matching ErrMalformedReply.
func ParseResetReply(v int64) (deleted, foreign bool, err error) {
	r, err := parseResetResult(v)
	return r == resetDeleted, err == nil && r == resetForeign, err
}

func parseResetResult(v int64) (resetResult, error) {
	if r := resetResult(v); r >= resetForeign && r <= resetGone {
		return r, nil
	}
	return 0, malformed("reset reply %d", v)
}
