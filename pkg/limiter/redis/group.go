package redis

import (
	"context"
	"slices"
	"sync/atomic"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/algorithm"
	"github.com/envoy-rls/envoy-rls/pkg/lua"
)

// group is the requests of one batch that share a slot (all of them outside
// a Redis Cluster), and what their program run answered. It is one call of
// a group commit (commit.go).
type group struct {
	idx       []int  // indices into the batch
	slot      uint16 // the hash slot in cluster mode, else 0
	outs      []limiter.Outcome
	replies   []algorithm.Reply
	committed bool
	answered  bool // the program replied (outs hold decisions)
	refunded  bool // the refund program replied (whatever it found)
	// free: no command in flight refers to the call's buffers any more.
	free bool

	// The call, as the run that takes it reads it. Its requests' policies
	// and costs are copied (policies, costs): a call whose deadline passes
	// after its group was taken returns while the run still reads, and its
	// caller may then reuse the batch. roles and keys live in the call's
	// scratch, which is not reused then (free stays false).
	ctx   context.Context
	roles []limiter.Role
	keys  []string
	costs []int64
	// leases and ats: the requests' lease operations and LeaseAt, which
	// a reserving policy's key carries (lua.AppendRequestPacked).
	leases []limiter.LeaseOp
	ats    []int64
	bytes  int // the keys and arguments of the call in a command (size)
	// state is one of the group states (commit.go); queued is when it
	// started waiting; the run that took it sends once on done (buffered).
	state  atomic.Int32
	queued time.Time
	done   chan struct{}
	// late is set by a caller that left before its run answered, before
	// it marks g groupAbandoned; the run resolves it.
	late *limiter.LateAnswer

	// Working memory of the run, reused when the group comes from a scratch.
	policies []*limiter.Policy // of g.idx's requests
	vals     []lua.Value
}

// scratch is the working memory of one Evaluate call, pooled on the Store
// so that the common call (one slot) allocates little. The keys and packed
// arguments are strings that point into kbuf and g.abuf (unsafe.String):
// rueidis holds them until the command is written, so a scratch goes back
// to the pool only when every command built from it has been answered
// (after an error or an abandoned call it is left to the GC).
type scratch struct {
	roles  []limiter.Role
	keys   []string
	ends   []int
	kbuf   []byte
	slots  []uint16
	groups []*group
	g      group // the first group
}

// reset drops what a pooled scratch must not keep alive.
func (sc *scratch) reset() {
	clear(sc.keys)
	clear(sc.groups)
	g := &sc.g
	clear(g.policies)
	clear(g.vals)
	clear(g.outs)
	g.idx, g.outs, g.replies, g.policies, g.costs, g.vals = g.idx[:0], g.outs[:0], g.replies[:0], g.policies[:0], g.costs[:0], g.vals[:0]
	g.leases, g.ats = g.leases[:0], g.ats[:0]
	g.slot, g.committed, g.answered, g.refunded, g.free = 0, false, false, false, false
	g.ctx, g.roles, g.keys, g.late = nil, nil, nil, nil
}

// grow returns s resized to n elements, reusing its array when it can.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// group splits the sent requests by slot in cluster mode, in batch order.
// The first group is sc.g.
func (s *Store) group(sc *scratch, batch []limiter.Request, roles []limiter.Role, keys []string) []*group {
	groups := sc.groups[:0]
	slots := sc.slots[:0]
	for i := range batch {
		var slot uint16
		if s.cluster {
			slot = keySlot(keys[i])
		}
		k := slices.Index(slots, slot)
		if k < 0 {
			k = len(groups)
			slots = append(slots, slot)
			if k == 0 {
				sc.g.idx = sc.g.idx[:0]
				groups = append(groups, &sc.g)
			} else {
				groups = append(groups, &group{})
			}
			if groups[k].done == nil {
				groups[k].done = make(chan struct{}, 1)
			}
			groups[k].slot = slot
		}
		groups[k].idx = append(groups[k].idx, i)
	}
	sc.groups, sc.slots = groups, slots
	return groups
}
