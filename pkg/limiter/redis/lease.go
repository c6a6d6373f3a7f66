package redis

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/rueidis"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/lua"
)

// leaseScript is lease-v2.lua, the program of concurrency limits.
var leaseScript = rueidis.NewLuaScript(lua.Lease().Source)

// evaluateLeases is the Redis store's lease evaluation
// (limiter.EvaluateWithLeases): one run of lease-v2.lua per request, in
// order, each atomic on its one key (a lease set is one key, so one slot).
// Each run carries the call's deadline in Redis's clock, as the batch
// program's calls do: a run that Redis reaches only after it (a stalled
// Redis) changes nothing and is Unavailable, so a take answered by its
// failure mode never holds a lease. A run that fails is classified as a
// batch run is: Unavailable when it certainly did not run, Indeterminate
// when it was sent and no answer came (a take may then hold its lease
// until the TTL), Incompatible when the set or the reply is not what this
// version expects.
func (s *Store) evaluateLeases(ctx context.Context, batch []limiter.Request, out []limiter.Outcome) {
	if limiter.FailIfEnded(ctx, out, "redis store: not sent") {
		return
	}
	if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > s.timeout {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	dl, _ := ctx.Deadline()
	dlMs := s.local.ms(dl)
	var kbuf []byte
	var vals []lua.Value
	for i := range batch {
		r := &batch[i]
		if err := r.Validate(); err != nil {
			out[i] = limiter.UnavailableOutcome(0, limiter.CategoryInvalidRequest, fmt.Errorf("redis store: %w", err))
			continue
		}
		if s.closed.Load() {
			out[i] = limiter.UnavailableOutcome(0, limiter.CategoryNotConnected, fmt.Errorf("redis store: policy %s: not sent: %w", r.Policy.ID(), errClosed))
			continue
		}
		kbuf = requestKey(kbuf[:0], r)
		off := &s.offsets[0]
		if s.cluster {
			off = &s.offsets[KeySlot(string(kbuf))]
		}
		rdl, _ := off.redisDeadline(dlMs) // 0, none, before the first sample
		res := leaseScript.Exec(ctx, s.client, []string{string(kbuf)}, lua.LeaseArgs(r, rdl))
		msgs, err := res.ToArray()
		if res.Error() != nil {
			out[i] = failedOutcome(r.Policy, res.Error())
			continue
		}
		var reply limiter.Reply
		if err == nil {
			vals = replyValues(vals, msgs)
			reply, err = lua.ParseLeaseReply(r.Policy, vals)
			now := s.local.ms(time.Now())
			if expired, ok := err.(*lua.ExpiredError); ok {
				off.sample(now, expired.ServerNowMs)
			} else if err == nil {
				off.sample(now, reply.ServerNowMs)
			}
		} else {
			err = fmt.Errorf("%w: reply is not an array: %w", lua.ErrMalformedReply, err)
		}
		if err != nil {
			out[i] = failedOutcome(r.Policy, err)
			continue
		}
		took := r.Lease == limiter.LeaseTake && reply.Status == limiter.StatusAllowed && r.EffectiveRole().Consumes()
		out[i] = limiter.LeaseDecision(r, reply, took, limiter.SourceRedis)
	}
}
