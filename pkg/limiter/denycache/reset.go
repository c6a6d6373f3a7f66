package denycache

import (
	"context"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

var _ limiter.Resetter = (*cache)(nil)

// Reset implements limiter.Resetter: it forgets the cached denials of the
// given states (any limit, revision or algorithm of their policy and
// subject), then resets them in the store behind. Without the forgetting a
// reset subject would still be denied locally until its cached retry point.
// A store that cannot reset answers limiter.ErrResetUnsupported.
func (c *cache) Reset(ctx context.Context, states []limiter.Request) (int, error) {
	rs, ok := c.store.(limiter.Resetter)
	if !ok {
		return 0, limiter.ErrResetUnsupported
	}
	for i := range states {
		r := &states[i]
		if r.Policy == nil {
			continue
		}
		id := r.Policy.ID()
		c.forget(r.Subject, func(k *key) bool { return k.policyID == id && k.subject == r.Subject })
	}
	return rs.Reset(ctx, states)
}

// ResetPolicy implements limiter.Resetter: it forgets every cached denial of
// policyID at revision, then resets the policy in the store behind.
func (c *cache) ResetPolicy(ctx context.Context, policyID string, revision uint32, b limiter.ResetBounds) (limiter.PolicyReset, error) {
	rs, ok := c.store.(limiter.Resetter)
	if !ok {
		return limiter.PolicyReset{}, limiter.ErrResetUnsupported
	}
	match := func(k *key) bool { return k.policyID == policyID && k.revision == revision }
	for i := range c.shards {
		c.shards[i].drop(match)
	}
	return rs.ResetPolicy(ctx, policyID, revision, b)
}

// forget drops the cached denials of subject that match.
func (c *cache) forget(subject limiter.SubjectDigest, match func(*key) bool) {
	k := key{subject: subject}
	c.shardOf(&k).drop(match)
}

// drop deletes the shard's entries that match.
func (sh *shard) drop(match func(*key) bool) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for k := range sh.m {
		if match(&k) {
			delete(sh.m, k)
		}
	}
	sh.changed()
}
