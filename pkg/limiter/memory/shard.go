package memory

import (
	"encoding/binary"
	"math"
	"sync"
	"unsafe"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/algorithm"
)

// shard is padded to shardSize, two cache lines (one adjacent-line
// prefetch pair): in the slice of shards each starts on its own line, so that
// goroutines working on different shards never write to a line they share.
type shard struct {
	shardState
	_ [shardSize - unsafe.Sizeof(shardState{})]byte
}

const shardSize = 128

type shardState struct {
	mu sync.Mutex
	t  table
	// capacity is the shard's share of MaxEntries (New keeps it below
	// 2^31); made counts the entries of policies made at request time
	// (limiter.Policy.Group set: key.made), which together hold at most
	// madeCap of it (see room).
	capacity, made int32
	// own counts the entries of each policy ID (see room).
	own map[string]int32
	// logs holds the log (algorithm.State.Log) of each sliding-log entry
	// and the reservations (algorithm.State.Reserved, at most
	// limiter.MaxReservations) of each entry of a reserving policy that
	// holds some, beside the table so that the other slots stay their
	// size; an entry's log goes with it (remove).
	logs map[key]string
	// minExpiry is a lower bound of every entry's expiresAt (exact after a
	// complete scan): while now <= minExpiry nothing can have expired.
	minExpiry int64
	// penalties holds the penalty fields (algorithm.State.PenaltyUntilMs,
	// PenaltyLevel) of the entries that recorded an offence: few subjects
	// do, so the slots do not carry them. An entry's penalty goes with the
	// entry (remove), so the map never outgrows the table.
	penalties map[key]penaltyFields
}

// penaltyFields are an entry's penalty box fields.
type penaltyFields struct{ until, level int64 }

// recordOffence stores the penalty fields of next, an offence of the live
// entry k at index i (algorithm.PenaltyRecorded), and raises the entry's
// expiry to next's.
func (sh *shard) recordOffence(i int, k *key, next algorithm.State) {
	if sh.penalties == nil {
		sh.penalties = make(map[key]penaltyFields)
	}
	sh.penalties[*k] = penaltyFields{until: next.PenaltyUntilMs, level: next.PenaltyLevel}
	e := &sh.t.slots[i].e
	e.expiresAt = max(e.expiresAt, next.ExpiresAtMs)
}

func (s *Store) shardIndex(d *limiter.SubjectDigest) int {
	return int(binary.LittleEndian.Uint64(d[:8]) & s.mask)
}

// load returns the live state of k, whether it has a live entry, and idx:
// the entry's index in the table when live, else the hint for insertAt
// (where the lookup stopped, or -1 when removing an expired entry moved
// slots). An expired entry is removed (it reads as no state) and counted in
// dropped.
func (sh *shard) load(k *key, h uint64, nowMs int64) (st algorithm.State, live bool, dropped, idx int) {
	i, found := sh.t.find(k, h)
	if !found {
		return algorithm.State{}, false, 0, i
	}
	e := &sh.t.slots[i].e
	if nowMs > e.expiresAt { // Redis semantics: a key lives through its expiry millisecond
		sh.remove(i)
		return algorithm.State{}, false, 1, -1
	}
	st = algorithm.State{
		Exists: true, Schema: algorithm.StateSchema, Algorithm: k.alg, PolicyID: k.policy, Revision: k.revision,
		LastObservedMs: e.lastObserved, Epoch: e.epoch, Level: e.level, Carry: e.carry, ExpiresAtMs: e.expiresAt,
	}
	if len(sh.penalties) != 0 {
		if pf, ok := sh.penalties[*k]; ok {
			st.PenaltyUntilMs, st.PenaltyLevel = pf.until, pf.level
		}
	}
	switch {
	case k.alg == limiter.SlidingLog:
		st.Log = sh.logs[*k]
	case k.reserves:
		st.Reserved = sh.logs[*k]
	}
	return st, true, 0, i
}

// keepLog records the log of st, the state just written for k (sliding
// log), or its reservations (a reserving policy; none: no record).
func (sh *shard) keepLog(k *key, st *algorithm.State) {
	v := st.Log
	switch {
	case k.reserves:
		if v = st.Reserved; v == "" {
			delete(sh.logs, *k)
			return
		}
	case k.alg != limiter.SlidingLog:
		return
	}
	if sh.logs == nil {
		sh.logs = make(map[key]string)
	}
	sh.logs[*k] = v
}

func entryOf(st algorithm.State) entry {
	return entry{lastObserved: st.LastObservedMs, epoch: st.Epoch, level: st.Level, carry: st.Carry, expiresAt: st.ExpiresAtMs}
}

// dropExpired deletes expired entries and returns how many. With budget 0
// it scans the whole table; otherwise it inspects at most budget slots,
// resuming where the previous bounded scan stopped.
func (sh *shard) dropExpired(nowMs int64, budget int) int {
	t := &sh.t
	if nowMs <= sh.minExpiry || t.n == 0 {
		return 0
	}
	size := len(t.slots)
	complete := budget == 0 || budget >= size
	steps, i := size, 0
	if !complete {
		steps, i = budget, t.cursor
	}
	dropped := 0
	lowest := int64(math.MaxInt64)
	for ; steps > 0; steps-- {
		s := &t.slots[i]
		used := t.used(i)
		if used && nowMs > s.e.expiresAt {
			// remove shifts a later slot into i: look at i again.
			sh.remove(i)
			dropped++
			steps++
			continue
		}
		if used {
			lowest = min(lowest, s.e.expiresAt)
		}
		i = (i + 1) & (size - 1)
	}
	if complete {
		sh.minExpiry = lowest
	} else {
		t.cursor = i
	}
	return dropped
}

// remove drops the entry at index i of the table.
func (sh *shard) remove(i int) {
	if len(sh.penalties) != 0 {
		delete(sh.penalties, sh.t.slots[i].k)
	}
	k := &sh.t.slots[i].k
	if k.alg == limiter.SlidingLog || k.reserves {
		delete(sh.logs, *k)
	}
	if k.made {
		sh.made--
	}
	p := k.policy
	if n := sh.own[p]; n > 1 {
		sh.own[p] = n - 1
	} else {
		delete(sh.own, p)
	}
	sh.t.remove(i)
}

// insertAt adds k (see table.insertAt).
func (sh *shard) insertAt(hint int, k *key, h uint64, e entry) {
	sh.t.insertAt(hint, k, h, e)
	if sh.own == nil {
		sh.own = make(map[string]int32)
	}
	sh.own[k.policy]++
	if k.made {
		sh.made++
	}
}

// madeShareDivisor: the policies made at request time (request-supplied
// limit overrides) hold at most 1/madeShareDivisor of each shard between
// them, so that the configured policies always keep the rest.
const madeShareDivisor = 8

// madeCap is how many entries of policies made at request time the shard
// holds at most: an eighth of it, at least one.
func (sh *shard) madeCap() int { return max(1, int(sh.capacity)/madeShareDivisor) }

// reservation counts the new entries an unfinished batch already claimed
// in one shard: all of them, those of the same policy, and those of
// policies made at request time.
type reservation struct{ all, own, made int }

// room is the fairness rule of the capacity bound: a new entry of k's policy
// fits while the policy holds fewer entries of this shard than are free, so
// that one policy holds at most half of the shard and every flood leaves
// free room for the policies that arrive after it. For a policy made at
// request time (k.made) the same rule applies within the share of those
// policies (madeCap), so that together they never hold more than that
// share, whatever the number of such policies: the configured policies
// keep the rest of the shard. r counts the new entries an unfinished batch
// already claimed in this shard.
func (sh *shard) room(k *key, r reservation) bool {
	free := int(sh.capacity) - sh.t.n - r.all
	if k.made {
		free = min(free, sh.madeCap()-int(sh.made)-r.made)
	}
	return int(sh.own[k.policy])+r.own < free
}
