package memory

import (
	"context"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

var _ limiter.Resetter = (*Store)(nil)

// Reset implements limiter.Resetter: it removes the states of the given
// requests from their shards (a concurrency policy's: its lease set). A
// subject counted in an overflow sketch (a
// flood beyond MaxEntries) has no state of its own and is not reset; its
// sketch forgets it within the sketch's window.
func (s *Store) Reset(ctx context.Context, states []limiter.Request) (int, error) {
	n := 0
	for i := range states {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		r := &states[i]
		if r.Policy == nil {
			continue
		}
		if r.Policy.Leases() {
			n += s.leases.reset(r.Policy.ID(), r.Policy.Revision(), &r.Subject)
			continue
		}
		k := keyOf(r)
		sh := &s.shards[s.shardIndex(&r.Subject)]
		sh.mu.Lock()
		if at, found := sh.t.find(&k, hashKey(&k)); found {
			sh.remove(at)
			n++
		}
		sh.mu.Unlock()
	}
	return n, nil
}

// ResetPolicy implements limiter.Resetter: it walks every shard, one lock at
// a time, and removes the states of policyID at revision (any algorithm),
// then its lease sets.
// Its cost is one pass over the table of every shard (MaxEntries slots at
// most); b.MaxScanned bounds the entries looked at.
func (s *Store) ResetPolicy(ctx context.Context, policyID string, revision uint32, b limiter.ResetBounds) (limiter.PolicyReset, error) {
	var res limiter.PolicyReset
	if b.MaxScanned <= 0 {
		return res, &limiter.FieldError{Field: "MaxScanned", Reason: "must be positive"}
	}
	for i := range s.shards {
		if ctx.Err() != nil || res.Scanned >= b.MaxScanned {
			return res, nil
		}
		sh := &s.shards[i]
		sh.mu.Lock()
		res.Scanned += sh.t.n
		if sh.own[policyID] > 0 {
			t := &sh.t
			for j := 0; j < len(t.slots); {
				k := &t.slots[j].k
				if t.used(j) && k.policy == policyID && k.revision == revision {
					// remove shifts a later slot into j: look at j again.
					sh.remove(j)
					res.Deleted++
					continue
				}
				j++
			}
		}
		sh.mu.Unlock()
	}
	res.Deleted += s.leases.reset(policyID, revision, nil)
	res.Complete = true
	return res, nil
}
