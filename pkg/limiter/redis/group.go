package redis

import (
	"slices"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/lua"
)

// invalidRole marks a request that is not sent.
const invalidRole = limiter.Role(255)

// group is the requests of one batch that share a slot (all of them outside
// a Redis Cluster), and what their program call answered.
type group struct {
	idx       []int  // indices into the batch
	slot      uint16 // the hash slot in cluster mode, else 0
	outs      []limiter.Outcome
	replies   []limiter.Reply
	committed bool
	answered  bool // the program replied (outs hold decisions)
	refunded  bool // the refund program replied (whatever it found)

	// Working memory of run, reused when the group comes from a scratch.
	gk, args []string
	abuf     []byte // packed ARGV; the strings in args point into it
	policies []*limiter.Policy
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
	clear(g.gk)
	clear(g.args)
	clear(g.policies)
	clear(g.vals)
	clear(g.outs)
	*g = group{idx: g.idx[:0], outs: g.outs[:0], replies: g.replies[:0], gk: g.gk[:0], args: g.args[:0], abuf: g.abuf[:0], policies: g.policies[:0], vals: g.vals[:0]}
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
		if roles[i] == invalidRole {
			continue
		}
		var slot uint16
		if s.cluster {
			slot = KeySlot(keys[i])
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
			groups[k].slot = slot
		}
		groups[k].idx = append(groups[k].idx, i)
	}
	sc.groups, sc.slots = groups, slots
	return groups
}
