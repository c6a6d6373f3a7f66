package redis

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/algorithm"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/deadline"
	"github.com/envoy-rls/envoy-rls/pkg/lua"
)

// leaseScript is lease-v2.lua, the program of concurrency limits.
var leaseScript = rueidis.NewLuaScript(lua.Lease().Source)

// evaluateLeases evaluates a batch of lease requests: one run of
// lease-v2.lua per request, in order, each atomic on its one key (a lease set is one key, so one slot).
// Each run carries the call's deadline in Redis's clock, as the batch
// program's calls do: a run that Redis reaches only after it (a stalled
// Redis) changes nothing and is Unavailable, so a take answered by its
// failure mode never holds a lease. A run that fails is classified as a
// batch run is: Unavailable when it certainly did not run, Indeterminate
// when it was sent and no answer came by the deadline (runLease then
// gives back what a late answer says the take took), Incompatible when
// the set or the reply is not what this version expects.
func (s *Store) evaluateLeases(ctx context.Context, batch []limiter.Request, out []limiter.Outcome) {
	if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > s.timeout {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	dl, _ := ctx.Deadline()
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
		out[i] = s.runLease(ctx, r, dl)
	}
}

// leaseRun is one run of lease-v2.lua, answered to its caller or, when the
// caller left first (abandoned), handled by the run itself.
type leaseRun struct {
	done  chan struct{}
	state atomic.Int32 // leaseRunning, then leaseAnswered or leaseAbandoned
	reply algorithm.Reply
	err   error
}

const (
	leaseRunning int32 = iota
	leaseAnswered
	leaseAbandoned
)

// runLease runs r's lease operation and returns its outcome by ctx's end
// (deadline dl). The run itself is not bound by dl: once sent, it waits
// for Redis's answer as long as the connection does (answerWait). When that
// answer comes after the caller left and says a take took leases, the run
// gives them back at once (a return of the take's identity): the caller
// was answered without a lease, and no release will ever name it.
func (s *Store) runLease(ctx context.Context, r *limiter.Request, dl time.Time) limiter.Outcome {
	key := string(requestKey(nil, r))
	off := &s.offsets[0]
	if s.cluster {
		off = &s.offsets[keySlot(key)]
	}
	rdl, _ := off.redisDeadline(s.local.ms(dl)) // 0, none, before the first sample
	req := *r
	run := &leaseRun{done: make(chan struct{})}
	wait, cancel := context.WithDeadline(context.WithoutCancel(ctx), dl.Add(s.answerWait))
	go func() {
		defer cancel()
		run.reply, run.err = s.execLease(wait, &req, key, off, rdl)
		if run.state.CompareAndSwap(leaseRunning, leaseAnswered) {
			close(run.done)
			return
		}
		s.giveBackLate(&req, key, run.reply, run.err)
	}()
	select {
	case <-run.done:
	case <-ctx.Done():
	case <-deadline.Cancelled(ctx):
	}
	if run.state.CompareAndSwap(leaseRunning, leaseAbandoned) {
		return limiter.IndeterminateOutcome(DefaultRetryAfter,
			fmt.Errorf("redis store: policy %s: no answer within the deadline: %w", r.Policy.ID(), context.Cause(ctx)))
	}
	<-run.done
	if run.err != nil {
		return failedOutcome(r.Policy, run.err)
	}
	return algorithm.LeaseDecision(r, run.reply, takes(r, run.reply), limiter.SourceRedis)
}

// takes reports whether reply says r took leases.
func takes(r *limiter.Request, reply algorithm.Reply) bool {
	return r.Lease == limiter.LeaseTake && reply.Status == algorithm.StatusAllowed && r.EffectiveRole().Consumes()
}

// execLease sends one run of lease-v2.lua (deadline rdl in Redis's clock)
// and parses its reply; a reply samples the clock offset off.
func (s *Store) execLease(ctx context.Context, r *limiter.Request, key string, off *clockOffset, rdl int64) (algorithm.Reply, error) {
	res := leaseScript.Exec(ctx, s.client, []string{key}, lua.LeaseArgs(r, rdl))
	if err := res.Error(); err != nil {
		return algorithm.Reply{}, err
	}
	msgs, err := res.ToArray()
	if err != nil {
		return algorithm.Reply{}, fmt.Errorf("%w: reply is not an array: %w", lua.ErrMalformedReply, err)
	}
	reply, err := lua.ParseLeaseReply(r.Policy, replyValues(nil, msgs))
	now := s.local.ms(time.Now())
	if expired, ok := err.(*lua.ExpiredError); ok {
		off.sample(now, expired.ServerNowMs)
	} else if err == nil {
		off.sample(now, reply.ServerNowMs)
	}
	return reply, err
}

// giveBackLate handles the answer of a run whose caller left: a take that
// took leases gives them back, bounded by the store's timeout. A return
// that fails leaves them to expire after the lease TTL.
func (s *Store) giveBackLate(r *limiter.Request, key string, reply algorithm.Reply, err error) {
	if err != nil || !takes(r, reply) || s.closed.Load() {
		return
	}
	back := *r
	back.Lease, back.LeaseAt = limiter.LeaseReturn, reply.ResetAtMs
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	leaseScript.Exec(ctx, s.client, []string{key}, lua.LeaseArgs(&back, 0))
}
