package memory

import (
	"context"
	"sync"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// leaseKey identifies one lease set: a new revision starts a new set.
type leaseKey struct {
	subject  limiter.SubjectDigest
	policy   string
	revision uint32
}

// leaseSet is one stored lease set (limiter.Lease's packed set) and when it
// may be dropped.
type leaseSet struct {
	set       string
	expiresAt int64
}

// leaseTable holds the lease sets of concurrency limits, at most max of
// them: a new set when it is full (after dropping the expired ones) is
// refused for capacity, as a new subject of the rate states is when there
// is no room and no sketch. The zero value is not usable (newLeaseTable).
type leaseTable struct {
	mu   sync.Mutex
	sets map[leaseKey]leaseSet
	max  int
}

func newLeaseTable(max int) *leaseTable {
	return &leaseTable{sets: make(map[leaseKey]leaseSet), max: max}
}

// evaluateLeases is the memory store's lease evaluation
// (limiter.EvaluateWithLeases): each request on its own, in order, under
// one lock, at one clock reading.
func (s *Store) evaluateLeases(ctx context.Context, batch []limiter.Request, out []limiter.Outcome) {
	if limiter.FailIfEnded(ctx, out, "memory store") {
		return
	}
	nowMs := s.clock.Now().UnixMilli()
	t := s.leases
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range batch {
		r := &batch[i]
		if o, bad := refused(r, nowMs); bad {
			out[i] = o
			continue
		}
		k := leaseKey{subject: r.Subject, policy: r.Policy.ID(), revision: r.Policy.Revision()}
		cur, held := t.sets[k]
		if held && cur.expiresAt <= nowMs {
			delete(t.sets, k)
			cur, held = leaseSet{}, false
		}
		next, reply, expiresAt, write := limiter.Lease(cur.set, nowMs, r.Policy, r.Lease, r.LeaseAt, r.Cost, r.EffectiveRole().Consumes())
		if write && next != "" && !held && !t.room(nowMs) {
			out[i] = limiter.UnavailableOutcome(CapacityRetryAfter, limiter.CategoryCapacity, ErrFull)
			continue
		}
		switch {
		case !write:
		case next == "":
			delete(t.sets, k)
		default:
			t.sets[k] = leaseSet{set: next, expiresAt: expiresAt}
		}
		out[i] = limiter.LeaseDecision(r, reply, write, limiter.SourceMemory)
	}
}

// room reports whether a new set fits, dropping the expired ones when the
// table is full.
func (t *leaseTable) room(nowMs int64) bool {
	if len(t.sets) < t.max {
		return true
	}
	t.dropExpired(nowMs)
	return len(t.sets) < t.max
}

// dropExpired drops the sets whose every lease has expired at nowMs. The
// caller holds t.mu.
func (t *leaseTable) dropExpired(nowMs int64) {
	for k, v := range t.sets {
		if v.expiresAt <= nowMs {
			delete(t.sets, k)
		}
	}
}

// sweep is dropExpired under the lock (Store.Sweep).
func (t *leaseTable) sweep(nowMs int64) {
	t.mu.Lock()
	t.dropExpired(nowMs)
	t.mu.Unlock()
}

// reset removes the lease set of (policy, revision, *subject), or every set
// of (policy, revision) when subject is nil, and returns how many it
// removed.
func (t *leaseTable) reset(policy string, revision uint32, subject *limiter.SubjectDigest) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if subject != nil {
		k := leaseKey{subject: *subject, policy: policy, revision: revision}
		if _, ok := t.sets[k]; ok {
			delete(t.sets, k)
			return 1
		}
		return 0
	}
	n := 0
	for k := range t.sets {
		if k.policy == policy && k.revision == revision {
			delete(t.sets, k)
			n++
		}
	}
	return n
}
