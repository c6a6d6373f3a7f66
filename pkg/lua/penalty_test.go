package lua

import (
	"encoding/binary"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// TestAppendBatchArgsPenalty: a policy with a penalty box sets flag bit 16
// and appends struct.pack('>ddd') of its three durations in ms after the
// fixed numbers; its BLOCKED replies parse, and are refused for a policy
// without a penalty or with units left.
func TestAppendBatchArgsPenalty(t *testing.T) {
	p := mustPolicy(t, limiter.PolicySpec{ID: "pen", Algorithm: limiter.FixedWindow, FailureMode: limiter.FailOpen,
		Params:  limiter.FixedWindowParams{Limit: 10, Window: time.Minute},
		Penalty: limiter.Penalty{Duration: 10 * time.Minute, MaxDuration: 24 * time.Hour, Decay: time.Hour}})
	a := AppendBatchArgs(nil, p, 1, limiter.RoleShadow)
	if len(a[1]) != BatchPacked+PenaltyPacked || BatchPackedLen(p) != len(a[1]) {
		t.Fatalf("packed %d bytes, want %d", len(a[1]), BatchPacked+PenaltyPacked)
	}
	b := []byte(a[1])
	if b[1] != byte(limiter.RoleShadow)|FlagFailOpen|FlagPenalty {
		t.Fatalf("flags %d, want shadow | fail open | penalty", b[1])
	}
	var got string
	for i := range 3 {
		got += fmt.Sprintf(" %v", math.Float64frombits(binary.BigEndian.Uint64(b[BatchPacked+8*i:])))
	}
	if got != " 600000 8.64e+07 3.6e+06" {
		t.Fatalf("extension %q", got)
	}
	plain := mustPolicy(t, limiter.PolicySpec{ID: "plain", Algorithm: limiter.FixedWindow,
		Params: limiter.FixedWindowParams{Limit: 10, Window: time.Minute}})
	blocked := limiter.Reply{Status: limiter.StatusBlocked, ServerNowMs: 1000, EffectiveNowMs: 1000, Limit: 10, RetryAfterMs: 5, ResetAtMs: 60000}
	if err := check(p, blocked); err != nil {
		t.Errorf("BLOCKED: %v", err)
	}
	if err := check(plain, blocked); err == nil {
		t.Error("BLOCKED accepted for a policy without a penalty")
	}
	blocked.Remaining = 1
	if err := check(p, blocked); err == nil {
		t.Error("BLOCKED accepted with units left")
	}
}
