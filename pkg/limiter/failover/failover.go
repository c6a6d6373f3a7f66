// Package failover is the one owner of failure handling: a limiter.Store
// wrapper that answers every outcome its store could not decide with the
// failure mode of the request's policy, so that its caller only ever sees
// decisions.
//
//   - failure_mode closed (the default) denies, with a Retry-After of at
//     least limiter.FallbackRetryAfter, and open allows (limiter.FailureAnswer);
//   - failure_mode local decides with an in-process limiter (a memory store)
//     holding this replica's share of the limit: the policy's limit divided
//     by Config.Replicas (limiter.Policy.Share), so that the replicas
//     deciding alone admit about the global limit. It is used when the store
//     could not be reached or did not answer (Unavailable, Indeterminate); a
//     mismatch of state or program (Incompatible) is answered closed, as is
//     a limit the local limiter cannot decide either. The local state is
//     dropped when the store decides a whole batch again, so a later outage
//     starts from a full share.
//
// The local limits of a batch follow the batch rule with the store's other
// outcomes (limiter.Pending): when those already block the batch, the local
// limits are only checked, and consume nothing.
//
// A Store is safe for concurrent use.
package failover

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/memory"
)

// Defaults and bounds of Config.
const (
	// DefaultMaxEntries bounds the subjects the local limiter holds: at
	// memory.MaxBytesPerEntry, at most about 26 MiB when full.
	DefaultMaxEntries = 100_000
	// MaxReplicas bounds Config.Replicas.
	MaxReplicas = 10_000
	// maxShares bounds the cache of local shares; it is emptied when full
	// (reloads make new policies).
	maxShares = 4096
)

// Config configures a Store.
type Config struct {
	// Replicas is the number of replicas that share each global limit.
	// (Optional, default 1; at most MaxReplicas)
	Replicas int
	// MaxEntries bounds the subjects the local limiter holds exactly; new
	// subjects beyond it are limited by the memory store's overflow
	// sketch, which never admits more than the share. (Optional, default
	// DefaultMaxEntries)
	MaxEntries int
	// Clock drives the local limiter. (Optional, default the system clock)
	Clock limiter.Clock
	// Observer is told when the local limiter starts and stops deciding.
	// (Optional)
	Observer Observer
}

// Observer receives the local limiter's transitions. Its methods are called
// on the request path, at most once per transition.
type Observer interface {
	// LocalStarted: the store failed for a failure_mode local limit and the
	// local limiter decides (replicas is Config.Replicas).
	LocalStarted(replicas int)
	// LocalDropped: the store decided a whole batch again; the local state
	// of the outage is dropped.
	LocalDropped()
}

// Store answers for the store it wraps when that store fails.
type Store struct {
	inner    limiter.Store
	replicas int64
	clock    limiter.Clock
	newLocal func() (*memory.Store, error)
	observer Observer

	local atomic.Pointer[memory.Store]
	// active: local decisions were made since the store last decided a
	// whole batch; the first such batch drops the local state.
	active atomic.Bool

	mu     sync.Mutex
	shares map[*limiter.Policy]*limiter.Policy

	scratch sync.Pool // *scratch
}

var _ limiter.Store = (*Store)(nil)

// New wraps inner.
func New(inner limiter.Store, cfg Config) (*Store, error) {
	if inner == nil {
		return nil, errors.New("failover: a store is required")
	}
	switch {
	case cfg.Replicas == 0:
		cfg.Replicas = 1
	case cfg.Replicas < 0 || cfg.Replicas > MaxReplicas:
		return nil, fmt.Errorf("failover: Replicas %d is outside [1, %d]", cfg.Replicas, MaxReplicas)
	}
	switch {
	case cfg.MaxEntries == 0:
		cfg.MaxEntries = DefaultMaxEntries
	case cfg.MaxEntries < 0:
		return nil, fmt.Errorf("failover: MaxEntries %d is negative", cfg.MaxEntries)
	}
	if cfg.Clock == nil {
		cfg.Clock = limiter.SystemClock{}
	}
	s := &Store{
		inner:    inner,
		replicas: int64(cfg.Replicas),
		clock:    cfg.Clock,
		observer: cfg.Observer,
		shares:   map[*limiter.Policy]*limiter.Policy{},
		newLocal: func() (*memory.Store, error) {
			st, err := memory.New(memory.Config{Clock: cfg.Clock, MaxEntries: cfg.MaxEntries})
			if err != nil {
				return nil, fmt.Errorf("failover: local limiter: %w", err)
			}
			return st, nil
		},
	}
	st, err := s.newLocal()
	if err != nil {
		return nil, err
	}
	s.local.Store(st)
	s.scratch.New = func() any { return new(scratch) }
	return s, nil
}

// scratch is the reusable state of one Evaluate with local limits.
type scratch struct {
	idx     []int             // the local limits' positions in the batch
	fail    []limiter.Outcome // the store's failures of those limits
	pending limiter.Pending
	shares  limiter.Pending
}

// Evaluate implements limiter.Store: it evaluates batch with the store it
// wraps and answers every outcome that store could not decide by the
// policy's failure mode. Every outcome it returns is Evaluated: a failure
// mode's answer has Source limiter.SourceFallback, Decision.Fallback saying
// how it answered and Outcome.Failed the store's failure.
func (s *Store) Evaluate(ctx context.Context, batch []limiter.Request, out []limiter.Outcome) {
	s.inner.Evaluate(ctx, batch, out)
	failed, decided := false, false
	for i := range batch {
		o := &out[i]
		if o.Kind == limiter.Evaluated {
			decided = decided || o.Decision.Source != limiter.SourceLocalCache
			continue
		}
		failed = true
	}
	if !failed {
		if decided {
			s.storeDecided()
		}
		return
	}
	s.decideLocally(ctx, batch, out)
	limiter.AnswerFailures(batch, out)
}

// usesLocal reports whether the failed outcome of a request is decided
// locally: a failure_mode local policy whose store could not be reached or
// did not answer.
func usesLocal(r *limiter.Request, o *limiter.Outcome) bool {
	return (o.Kind == limiter.Unavailable || o.Kind == limiter.Indeterminate) &&
		r.Policy != nil && r.Policy.FailureMode() == limiter.FailLocal
}

// decideLocally replaces the store's failures of failure_mode local
// requests by the local limiter's decisions (Source SourceFallback,
// Fallback FailLocal). A request the local limiter cannot decide keeps a
// failure, which the caller answers closed.
func (s *Store) decideLocally(ctx context.Context, batch []limiter.Request, out []limiter.Outcome) {
	sc := s.scratch.Get().(*scratch)
	defer func() {
		sc.pending.Release()
		sc.shares.Release()
		clear(sc.fail)
		s.scratch.Put(sc)
	}()
	sc.idx, sc.fail = sc.idx[:0], sc.fail[:0]
	for i := range batch {
		if usesLocal(&batch[i], &out[i]) {
			sc.idx = append(sc.idx, i)
			sc.fail = append(sc.fail, out[i])
			out[i] = limiter.Outcome{} // undecided: the local limiter decides
		}
	}
	if len(sc.idx) == 0 {
		return
	}
	if !s.active.Load() && s.active.CompareAndSwap(false, true) && s.observer != nil {
		s.observer.LocalStarted(int(s.replicas))
	}
	reqs, outs := sc.pending.Split(batch, out)
	// Each request asks for the policy's local share. A cost above the
	// share never fits: it is denied without asking, and blocks the others
	// as any denial does.
	now := s.clock.Now()
	for k := range reqs {
		r := &reqs[k]
		q, err := s.share(r.Policy)
		if err != nil {
			// Not for a valid policy: the store's failure stands.
			outs[k] = sc.fail[k]
			continue
		}
		r.Policy = q
		if r.Cost > q.MaxCost() {
			outs[k] = limiter.EvaluatedOutcome(neverFits(q, now))
		}
	}
	sreqs, souts := sc.shares.Split(reqs, outs)
	s.local.Load().Evaluate(ctx, sreqs, souts)
	sc.shares.Merge(outs)
	for k := range reqs {
		o := &outs[k]
		if o.Kind != limiter.Evaluated {
			// No share, or the local limiter failed too (full, or the
			// deadline passed): answered closed.
			continue
		}
		o.Decision.Source, o.Decision.Fallback = limiter.SourceFallback, limiter.FailLocal
		o.Failed, o.RetryAfter, o.Category, o.Err = sc.fail[k].Kind, sc.fail[k].RetryAfter, sc.fail[k].Category, sc.fail[k].Err
	}
	sc.pending.Merge(out)
}

// share returns the local share of p, cached.
func (s *Store) share(p *limiter.Policy) (*limiter.Policy, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if q := s.shares[p]; q != nil {
		return q, nil
	}
	q, err := p.Share(s.replicas)
	if err != nil {
		return nil, err
	}
	if len(s.shares) >= maxShares {
		clear(s.shares)
	}
	s.shares[p] = q
	return q, nil
}

// storeDecided is told that the store decided every limit of a batch: the
// store is back, so the local state of an earlier outage is dropped.
func (s *Store) storeDecided() {
	if !s.active.Load() || !s.active.CompareAndSwap(true, false) {
		return
	}
	st, err := s.newLocal()
	if err != nil {
		// newLocal only fails on a configuration New checked; the old
		// state stays.
		return
	}
	s.local.Store(st)
	if s.observer != nil {
		s.observer.LocalDropped()
	}
}

// neverFits is the local denial of a cost above the local share.
func neverFits(p *limiter.Policy, now time.Time) limiter.Decision {
	w := time.Duration(p.WindowMillis()) * time.Millisecond
	if c := p.Calendar(); c != nil {
		_, end := c.Period(now.UnixMilli())
		w = time.Duration(end-now.UnixMilli()) * time.Millisecond
	}
	return limiter.Decision{
		Limit: p.Limit(), RetryAfter: w, ResetAt: now.Add(w),
		PolicyID: p.ID(), PolicyRevision: p.Revision(), Source: limiter.SourceFallback, Certainty: p.Certainty(),
	}
}
