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

// ResetResult is the reply of reset-v1.lua: what the key held.
type ResetResult int64

const (
	// ResetForeign: not a state of envoy-rls (another type, fields or
	// layout); left alone.
	ResetForeign ResetResult = 0
	// ResetDeleted: a state of the policy, deleted.
	ResetDeleted ResetResult = 1
	// ResetOther: a state of another policy or revision; left alone.
	ResetOther ResetResult = 2
	// ResetGone: no such key (it expired after the scan found it).
	ResetGone ResetResult = 3
)

// ParseResetReply validates a reply of reset-v1.lua: one of the
// ResetResult values, anything else an error matching ErrMalformedReply.
func ParseResetReply(v int64) (ResetResult, error) {
	if r := ResetResult(v); r >= ResetForeign && r <= ResetGone {
		return r, nil
	}
	return 0, malformed("reset reply %d", v)
}
