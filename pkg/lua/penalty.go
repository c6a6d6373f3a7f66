package lua

import (
	"encoding/binary"
	"math"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// PenaltyPacked is the length of the penalty extension that follows the
// packed numbers of a key whose policy has a penalty box:
// struct.pack('>ddd'), duration, max duration and decay in ms
// (fragments/penalty.lua).
const PenaltyPacked = 3 * 8

// BatchPackedLen is the length AppendBatchPacked appends for a key of p:
// BatchPacked, plus PenaltyPacked with a penalty box, plus CalendarPacked
// for a calendar window.
func BatchPackedLen(p *limiter.Policy) int {
	n := BatchPacked
	if p.Penalty().On() {
		n += PenaltyPacked
	}
	if p.Calendar() != nil {
		n += CalendarPacked
	}
	return n
}

// packPenalty sets the penalty flag in b, a key's packed numbers of
// BatchPacked + PenaltyPacked bytes, and writes p's penalty extension.
func packPenalty(b []byte, p *limiter.Policy) {
	b[1] |= FlagPenalty
	d, m, decay := p.PenaltyArgs()
	for i, v := range [3]int64{d, m, decay} {
		binary.BigEndian.PutUint64(b[BatchPacked+8*i:], math.Float64bits(float64(v)))
	}
}
