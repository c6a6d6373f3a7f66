package memory

import (
	"errors"
	"math"
	"sync"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/algorithm"
)

// leaseKey identifies one lease set: a new revision starts a new set.
type leaseKey struct {
	subject  limiter.SubjectDigest
	policy   string
	revision uint32
}

// leaseSet is one stored lease set (algorithm.Lease's packed set) and when it
// may be dropped.
type leaseSet struct {
	set       string
	expiresAt int64
}

// errLeaseShare is the cause of a lease set's capacity refusal.
var errLeaseShare = errors.New("memory: no room for a new lease set in its policy's share of the lease table")

// leaseTable holds the lease sets of concurrency limits, at most max of
// them, shared between policies by the fairness rule of the rate states
// (room): a new set beyond its policy's share is refused for capacity, as
// a new subject of the rate states is when there is no room and no
// sketch. The zero value is not usable (newLeaseTable).
type leaseTable struct {
	mu   sync.Mutex
	sets map[leaseKey]leaseSet
	max  int
	// own counts the sets of each policy ID (room).
	own map[string]int
	// minExpiry is a lower bound of every set's expiresAt (exact after a
	// complete scan): while now < minExpiry no set has expired.
	minExpiry int64
}

func newLeaseTable(max int) *leaseTable {
	return &leaseTable{sets: make(map[leaseKey]leaseSet), max: max, own: make(map[string]int), minExpiry: math.MaxInt64}
}

// evaluateLeases evaluates a batch of lease requests: each request on its
// own, in order, under one lock, at one clock reading.
func (s *Store) evaluateLeases(batch []limiter.Request, out []limiter.Outcome) {
	nowMs := s.clock.Now().UnixMilli()
	t := s.leases
	// Deferred before the unlock, so run after it.
	defer s.observeRefusals(batch, out)
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
			t.remove(k)
			cur, held = leaseSet{}, false
		}
		next, reply, expiresAt, write := algorithm.Lease(cur.set, nowMs, r.Policy, r.Lease, r.LeaseAt, r.Cost, r.EffectiveRole().Consumes())
		if write && next != "" && !held && !t.room(k.policy, nowMs) {
			out[i] = limiter.UnavailableOutcome(capacityRetryAfter, limiter.CategoryCapacity, errLeaseShare)
			continue
		}
		switch {
		case !write:
		case next == "":
			t.remove(k)
		default:
			t.put(k, leaseSet{set: next, expiresAt: expiresAt})
		}
		out[i] = algorithm.LeaseDecision(r, reply, write, limiter.SourceMemory)
	}
}

// room is the fairness rule of the rate states (shard.room) over the whole
// table: a new set of policy fits while the policy holds fewer sets than
// are free, so that one policy holds at most half of the table and every
// flood leaves free room for the policies that come after it. When it does
// not fit, at most fullScanBudget sets are inspected for expired ones
// first (Sweep drops the rest), so that a refusal costs a bounded time
// under the lock. Concurrency policies are never made at request time
// (overrides are fixed windows), so the table has no share for them.
func (t *leaseTable) room(policy string, nowMs int64) bool {
	if t.own[policy] < t.max-len(t.sets) {
		return true
	}
	t.dropExpired(nowMs, fullScanBudget)
	return t.own[policy] < t.max-len(t.sets)
}

// put stores set v under k.
func (t *leaseTable) put(k leaseKey, v leaseSet) {
	if _, ok := t.sets[k]; !ok {
		t.own[k.policy]++
	}
	t.sets[k] = v
	t.minExpiry = min(t.minExpiry, v.expiresAt)
}

// remove drops the set of k and reports whether there was one.
func (t *leaseTable) remove(k leaseKey) bool {
	if _, ok := t.sets[k]; !ok {
		return false
	}
	delete(t.sets, k)
	if n := t.own[k.policy]; n > 1 {
		t.own[k.policy] = n - 1
	} else {
		delete(t.own, k.policy)
	}
	return true
}

// dropExpired drops the sets whose every lease has expired at nowMs. With
// budget 0 it scans the whole table; otherwise it inspects at most budget
// sets (a map's range starts at a random place, so successive scans look
// at different sets). The caller holds t.mu.
func (t *leaseTable) dropExpired(nowMs int64, budget int) {
	if nowMs < t.minExpiry {
		return
	}
	lowest := int64(math.MaxInt64)
	steps := 0
	for k, v := range t.sets {
		if budget > 0 && steps == budget {
			return
		}
		steps++
		if v.expiresAt <= nowMs {
			t.remove(k)
		} else {
			lowest = min(lowest, v.expiresAt)
		}
	}
	t.minExpiry = lowest
}

// sweep is a complete dropExpired under the lock (Store.Sweep).
func (t *leaseTable) sweep(nowMs int64) {
	t.mu.Lock()
	t.dropExpired(nowMs, 0)
	t.mu.Unlock()
}

// observeRefusals tells the Observer of each lease request of batch that
// out says was refused for capacity. It runs outside the table's lock.
func (s *Store) observeRefusals(batch []limiter.Request, out []limiter.Outcome) {
	if s.obs == nil {
		return
	}
	for i := range out {
		if out[i].Kind == limiter.Unavailable && out[i].Category == limiter.CategoryCapacity {
			s.obs.Refused(batch[i].Policy)
		}
	}
}

// reset removes the lease set of (policy, revision, *subject), or every set
// of (policy, revision) when subject is nil, and returns how many it
// removed.
func (t *leaseTable) reset(policy string, revision uint32, subject *limiter.SubjectDigest) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if subject != nil {
		if t.remove(leaseKey{subject: *subject, policy: policy, revision: revision}) {
			return 1
		}
		return 0
	}
	n := 0
	for k := range t.sets {
		if k.policy == policy && k.revision == revision {
			t.remove(k)
			n++
		}
	}
	return n
}
