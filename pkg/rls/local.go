package rls

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/memory"
)

// Defaults of LocalConfig.
const (
	// DefaultLocalMaxEntries bounds the subjects the local limiter holds:
	// at memory.MaxBytesPerEntry, at most about 26 MiB when full.
	DefaultLocalMaxEntries = 100_000
	// MaxReplicas bounds LocalConfig.Replicas.
	MaxReplicas = 10_000
	// maxLocalPolicies bounds the cache of local shares; it is emptied
	// when full (reloads make new policies).
	maxLocalPolicies = 4096
)

// LocalConfig configures the in-process limiter that decides the limits of
// failure_mode: local policies while the shared store fails.
//
// A local limit is the policy's share: its limit (token bucket: capacity
// and refill amount) divided by Replicas, rounded down but at least 1, so
// that Replicas replicas deciding alone admit at most about the global
// limit. The local limiter is used for a limit whose store outcome is
// Unavailable or Indeterminate (the store could not be reached, did not
// answer in time, or was full); an Incompatible outcome (a state or reply
// mismatch, not an outage) is answered as fail closed. Its state is dropped
// when the store decides a whole call again.
type LocalConfig struct {
	// Replicas is the number of replicas that share the global limit.
	// (Optional, default 1; at most MaxReplicas)
	Replicas int
	// MaxEntries bounds the subjects held exactly; new subjects beyond it
	// are limited by the memory store's overflow sketch, which never admits
	// more than the share. (Optional, default DefaultLocalMaxEntries)
	MaxEntries int
	// Clock drives the local limiter. (Optional, default Config.Clock)
	Clock limiter.Clock
}

// localFallback is the local limiter of failure_mode: local policies.
type localFallback struct {
	replicas   int64
	maxEntries int
	clock      limiter.Clock
	log        *zap.Logger

	store atomic.Pointer[memory.Store]
	// active: local decisions were made since the store last decided a
	// whole call; the first such call drops the local state.
	active atomic.Bool

	mu     sync.Mutex
	shares map[*limiter.Policy]*limiter.Policy
}

func newLocalFallback(cfg LocalConfig, clock limiter.Clock, log *zap.Logger) (*localFallback, error) {
	switch {
	case cfg.Replicas == 0:
		cfg.Replicas = 1
	case cfg.Replicas < 0 || cfg.Replicas > MaxReplicas:
		return nil, fmt.Errorf("rls: LocalConfig.Replicas %d is outside [1, %d]", cfg.Replicas, MaxReplicas)
	}
	switch {
	case cfg.MaxEntries == 0:
		cfg.MaxEntries = DefaultLocalMaxEntries
	case cfg.MaxEntries < 0:
		return nil, fmt.Errorf("rls: LocalConfig.MaxEntries %d is negative", cfg.MaxEntries)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock
	}
	l := &localFallback{replicas: int64(cfg.Replicas), maxEntries: cfg.MaxEntries, clock: cfg.Clock, log: log,
		shares: map[*limiter.Policy]*limiter.Policy{}}
	st, err := l.newStore()
	if err != nil {
		return nil, err
	}
	l.store.Store(st)
	return l, nil
}

func (l *localFallback) newStore() (*memory.Store, error) {
	st, err := memory.New(memory.Config{Clock: l.clock, MaxEntries: l.maxEntries})
	if err != nil {
		return nil, fmt.Errorf("rls: local limiter: %w", err)
	}
	return st, nil
}

// share returns the local share of p, cached.
func (l *localFallback) share(p *limiter.Policy) (*limiter.Policy, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if q := l.shares[p]; q != nil {
		return q, nil
	}
	q, err := p.Share(l.replicas)
	if err != nil {
		return nil, err
	}
	if len(l.shares) >= maxLocalPolicies {
		clear(l.shares)
	}
	l.shares[p] = q
	return q, nil
}

// storeDecided is told that the store decided every limit of a call: the
// store is back, so the local state of an earlier outage is dropped.
func (l *localFallback) storeDecided() {
	if !l.active.Load() || !l.active.CompareAndSwap(true, false) {
		return
	}
	st, err := l.newStore()
	if err != nil {
		// newStore only fails on a configuration newLocalFallback checked.
		l.log.Error("local fallback: could not drop the local state", zap.Error(err))
		return
	}
	l.store.Store(st)
	l.log.Info(msgLocalDropped)
}

// Log messages of the local fallback.
const (
	msgLocalStarted = "store failed: deciding failure_mode local limits with this replica's share"
	msgLocalDropped = "store decides again: local fallback state dropped"
)

// usesLocal reports whether the store outcome of a request is decided
// locally: a failure_mode local policy whose store could not be reached or
// did not answer.
func usesLocal(r *limiter.Request, o *limiter.Outcome) bool {
	return (o.Kind == limiter.Unavailable || o.Kind == limiter.Indeterminate) &&
		r.Policy != nil && r.Policy.FailureMode() == limiter.FailLocal
}

// localBatch is the scratch of one local evaluation.
type localBatch struct {
	idx  []int
	reqs []limiter.Request
	outs []limiter.Outcome
	fail []limiter.Outcome // the store's outcomes, for metrics and logs
}

// decideLocally replaces the failed store outcomes of failure_mode local
// requests of sent (the requests given to the store, whose outcomes are
// outs) by decisions of the local limiter, Source limiter.SourceFallback.
// all and allOuts are the whole batch of the call (sent first), for the
// batch rule: when the other limits already block the call, the local
// limits are only checked. When the store decided every request, the local
// state of an earlier outage is dropped instead.
func (s *Server) decideLocally(ctx context.Context, sent []limiter.Request, outs []limiter.Outcome, all []limiter.Request, allOuts []limiter.Outcome, lb *localBatch) {
	l := s.local
	failed, decided := false, false
	lb.idx = lb.idx[:0]
	for i := range sent {
		o := &outs[i]
		if o.Kind == limiter.Evaluated {
			decided = decided || o.Decision.Source != limiter.SourceLocalCache
			continue
		}
		failed = true
		if usesLocal(&sent[i], o) {
			lb.idx = append(lb.idx, i)
		}
	}
	if !failed {
		if decided {
			l.storeDecided()
		}
		return
	}
	if len(lb.idx) == 0 {
		return
	}
	if !l.active.Load() && l.active.CompareAndSwap(false, true) {
		l.log.Warn(msgLocalStarted, zap.Int64("replicas_hint", l.replicas))
	}
	// The batch rule over the whole call, the local limits undecided
	// (outs is the head of allOuts).
	lb.fail = lb.fail[:0]
	for _, i := range lb.idx {
		lb.fail = append(lb.fail, outs[i])
		allOuts[i] = limiter.Outcome{}
	}
	checkOnly := limiter.CheckOnly(all, allOuts)
	lb.reqs = lb.reqs[:0]
	for k, i := range lb.idx {
		r := sent[i]
		q, err := l.share(r.Policy)
		if err != nil {
			// Not for a valid policy; answered fail closed.
			outs[i] = lb.fail[k]
			continue
		}
		r.Policy = q
		if checkOnly {
			r.Role = limiter.RoleCheck
		}
		lb.reqs = append(lb.reqs, r)
	}
	if cap(lb.outs) < len(lb.reqs) {
		lb.outs = make([]limiter.Outcome, len(lb.reqs))
	}
	lb.outs = lb.outs[:len(lb.reqs)]
	// A cost above the local share never fits: it is denied without
	// asking, and blocks the others as any denial does.
	now := l.clock.Now()
	neverFits := false
	for j := range lb.reqs {
		lb.outs[j] = limiter.Outcome{}
		if r := &lb.reqs[j]; r.Cost > r.Policy.MaxCost() {
			lb.outs[j] = limiter.EvaluatedOutcome(neverFitsDecision(r.Policy, now))
			neverFits = true
		}
	}
	if neverFits && limiter.CheckOnly(lb.reqs, lb.outs) {
		for j := range lb.reqs {
			lb.reqs[j].Role = limiter.RoleCheck
		}
	}
	l.store.Load().Evaluate(ctx, lb.reqs, lb.outs)
	j := 0
	for k, i := range lb.idx {
		if outs[i].Kind != 0 {
			continue // no share: the store's failure stands
		}
		o := lb.outs[j]
		if r := &lb.reqs[j]; r.Cost > r.Policy.MaxCost() {
			o = limiter.EvaluatedOutcome(neverFitsDecision(r.Policy, now))
		}
		j++
		outs[i] = o
		if o.Kind != limiter.Evaluated {
			// The local limiter failed too (full, or the call's deadline
			// passed): respond answers it fail closed and counts it.
			continue
		}
		outs[i].Decision.Source = limiter.SourceFallback
		s.metrics.storeError(lb.fail[k].Kind)
		s.metrics.fallback(limiter.FailLocal)
	}
}

// neverFitsDecision is the local denial of a cost above the local share.
func neverFitsDecision(p *limiter.Policy, now time.Time) limiter.Decision {
	w := time.Duration(p.WindowMillis()) * time.Millisecond
	if c := p.Calendar(); c != nil {
		w = untilPeriodEnd(now, c)
	}
	return limiter.Decision{
		Limit: p.Limit(), RetryAfter: w, ResetAt: now.Add(w),
		PolicyID: p.ID(), PolicyRevision: p.Revision(), Source: limiter.SourceFallback, Certainty: p.Certainty(),
	}
}
