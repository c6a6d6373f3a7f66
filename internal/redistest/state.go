package redistest

import (
	"encoding/binary"
	"math"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/algorithm"
)

// stateAlgorithms are the algorithm bytes of the rate program's states
// (pkg/lua's algorithm codes), as tests expect them.
var stateAlgorithms = [...]byte{limiter.FixedWindow: 1, limiter.SlidingWindow: 2, limiter.TokenBucket: 3,
	limiter.GCRA: 4, limiter.SlidingLog: 5, limiter.Concurrency: 0}

// The state of a key of rate-batch-v2.lua (pkg/lua/src/fragments/string-v2.lua),
// which tests write and read in Redis with AppendState and ParseState:
// one string, big-endian as struct.pack('>Bdddd') of head,
// LastObservedMs, Epoch, Level and Carry; head is the algorithm byte, plus
// StatePenalty when struct.pack('>dd') of PenaltyUntilMs and PenaltyLevel
// follows, or StateReserved when struct.pack('>H') of the number of
// reservations and Reserved (16 bytes each) follow; then a sliding log's
// Log. Every number is an integer in [0, 2^53-1], which a float64 holds
// exactly.
const (
	// StateLen is the length of a state without a penalty box or a log.
	StateLen = 1 + 4*8
	// StatePenaltyLen is the length of the penalty box that may follow.
	StatePenaltyLen = 2 * 8
	// StatePenalty is the bit of head that says a penalty box follows.
	StatePenalty = 64
	// StateReserved is the bit of head that says reservations follow.
	StateReserved = 32
	// MaxPenaltyLevel is the largest penalty level a state may hold.
	MaxPenaltyLevel = 99
)

// AppendState appends st, a state of its algorithm, to dst in the layout
// of rate-batch-v2.lua; its penalty box only when its PenaltyLevel is not
// 0. Its Schema, PolicyID and Revision are not kept: the key names them.
func AppendState(dst []byte, st algorithm.State) []byte {
	head := stateAlgorithms[st.Algorithm]
	switch {
	case st.PenaltyLevel > 0:
		head |= StatePenalty
	case st.Reserved != "":
		head |= StateReserved
	}
	dst = append(dst, head)
	for _, v := range []int64{st.LastObservedMs, st.Epoch, st.Level, st.Carry} {
		dst = binary.BigEndian.AppendUint64(dst, math.Float64bits(float64(v)))
	}
	switch {
	case st.PenaltyLevel > 0:
		for _, v := range []int64{st.PenaltyUntilMs, st.PenaltyLevel} {
			dst = binary.BigEndian.AppendUint64(dst, math.Float64bits(float64(v)))
		}
	case st.Reserved != "":
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(st.Reserved)/algorithm.ReservationEntryBytes))
		dst = append(dst, st.Reserved...)
	}
	return append(dst, st.Log...)
}

// ParseState reads a value of rate-batch-v2.lua's layout as a state of p
// (its Schema, Algorithm, PolicyID and Revision p's): ok is false for a
// value the program reads as STATE_INCOMPATIBLE (another algorithm,
// another length, a number that is not an integer in [0, 2^53-1], a
// sliding window's count above any sliding limit, a penalty level outside
// [1, MaxPenaltyLevel] or a block ending at 0, reservations of a policy
// that does not reserve or other than a count of 1 or more and whole
// entries). A sliding log's Log and the reservations are returned as
// stored: the program checks them as it reads them.
func ParseState(v []byte, p *limiter.Policy) (st algorithm.State, ok bool) {
	if len(v) < StateLen {
		return st, false
	}
	alg := stateAlgorithms[p.Algorithm()]
	num := func(i int) (int64, bool) {
		f := math.Float64frombits(binary.BigEndian.Uint64(v[i:]))
		if !(f >= 0 && f <= float64(limiter.MaxSafeInteger)) || f != math.Trunc(f) {
			return 0, false
		}
		return int64(f), true
	}
	st = algorithm.State{Exists: true, Schema: algorithm.StateSchema, Algorithm: p.Algorithm(), PolicyID: p.ID(), Revision: p.Revision()}
	var fields [4]int64
	for k := range fields {
		n, ok := num(1 + 8*k)
		if !ok {
			return algorithm.State{}, false
		}
		fields[k] = n
	}
	st.LastObservedMs, st.Epoch, st.Level, st.Carry = fields[0], fields[1], fields[2], fields[3]
	rest := v[StateLen:]
	switch {
	case v[0] == alg|StatePenalty && len(rest) >= StatePenaltyLen:
		until, ok1 := num(StateLen)
		level, ok2 := num(StateLen + 8)
		if !ok1 || !ok2 || until < 1 || level < 1 || level > MaxPenaltyLevel {
			return algorithm.State{}, false
		}
		st.PenaltyUntilMs, st.PenaltyLevel = until, level
		rest = rest[StatePenaltyLen:]
	case v[0] == alg|StateReserved && p.Reserve().On() && len(rest) >= 2:
		n := int(binary.BigEndian.Uint16(rest))
		if n < 1 || len(rest) != 2+n*algorithm.ReservationEntryBytes {
			return algorithm.State{}, false
		}
		st.Reserved, rest = string(rest[2:]), nil
	case v[0] != alg:
		return algorithm.State{}, false
	}
	if p.Algorithm() == limiter.SlidingLog {
		st.Log = string(rest)
	} else if len(rest) > 0 {
		return algorithm.State{}, false
	}
	if p.Algorithm() == limiter.SlidingWindow && (st.Level > limiter.MaxSafeInteger/limiter.SlidingScale || st.Carry > limiter.MaxSafeInteger/limiter.SlidingScale) {
		return algorithm.State{}, false
	}
	return st, true
}

// Reservation returns reservation i of a packed algorithm.State.Reserved
// (16 bytes each: its identity and amount, big-endian doubles).
func Reservation(res string, i int) (id, amount int64) {
	b := []byte(res[i*algorithm.ReservationEntryBytes : (i+1)*algorithm.ReservationEntryBytes])
	return int64(math.Float64frombits(binary.BigEndian.Uint64(b))), int64(math.Float64frombits(binary.BigEndian.Uint64(b[8:])))
}
