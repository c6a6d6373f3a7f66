// Package failover is the one owner of failure handling: a limiter.Store
// wrapper that answers every outcome its store could not decide with the
// failure mode of the request's policy, so that its caller only ever sees
// decisions.
//
//   - failure_mode closed (the default) denies, with a Retry-After of at
//     least fallbackRetryAfter, and open allows (failureAnswer);
//   - failure_mode local decides with an in-process limiter (a memory store)
//     holding this replica's share of the limit: the policy's limit divided
//     by Config.Replicas (limiter.Policy.Share), so that the replicas
//     deciding alone admit about the global limit. It is used when the store
//     could not be reached or did not answer (Unavailable, Indeterminate); a
//     mismatch of state or program (Incompatible) is answered closed, as is
//     a limit the local limiter cannot decide either. The local rate state
//     is dropped when the store decides a whole batch again, so a later
//     outage starts from a full share.
//
// The store gets the caller's deadline less an answer reserve (AnswerReserve),
// and the local limiter and the failure modes answer within that reserve:
// a store that hangs still leaves time to decide locally before the caller
// gives up.
//
// The local limits of a batch follow the batch rule with the store's other
// outcomes (limiter.Pending): when those already block the batch, the local
// limits are only checked, and consume nothing.
//
// Leases have an owner. A take the local limiter admits holds a lease of
// the local share, in a lease table that outlives the store's return, so
// that the leases of a past outage still count in the next one; only a
// release marked limiter.Request.LocalLease gives such a lease back, and
// such a release never reaches the store. A release or a return of the
// store's leases is never decided locally: when the store fails it is
// answered by the failure mode, and the store's lease expires by its TTL
// (or a journal below this wrapper replays the release).
//
// Reservations (limiter.Reserve) have an owner too. A reserve of a
// failure_mode local policy during an outage is decided by the local
// limiter, whose rate state holds the reservation; a settle marked
// LocalLease settles it there. When that state has been dropped since the
// reserve (the store decided a whole batch), the settle's usage goes to
// the store as a plain charge (LeaseAt 0), which the store never saw: once
// per reservation, and only while the reservation would still be live (a
// settle after its expiry changes nothing, as it does in the store). A
// settle of the store's reservations is never decided locally: when the
// store fails it is answered by the failure mode (and a journal below this
// wrapper replays it). failure_mode closed denies a reserve; open admits
// it without a reservation (no HoldAt), so its usage is never settled.
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
	"github.com/envoy-rls/envoy-rls/pkg/limiter/deadline"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/leases"
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
	// maxCharged bounds the reservations of dropped local states whose
	// settle went to the store, remembered until they expire so that a
	// duplicate settle charges nothing. When it is full of live ones, a
	// settle is charged without being remembered: usage is not lost.
	maxCharged = 1 << 16
)

// Bounds of the answer reserve: the part of the caller's deadline kept back
// from the store so that a slow store still leaves time to answer by the
// policy's failure mode (the local limiter included) before the caller
// gives up. The reserve is a fifth of the time left, within these bounds.
const (
	minAnswerReserve = 2 * time.Millisecond
	maxAnswerReserve = 50 * time.Millisecond
	// maxStoreWait bounds the store's deadline however far the caller's is
	// (the Redis store's own timeout is at most a minute too). It also
	// bounds the memory of the deadline wheel: one entry per millisecond
	// still ahead.
	maxStoreWait = time.Minute
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
	Observer observer
	// Metrics counts the limits a failure mode answered. (Optional)
	Metrics *Metrics
}

// observer receives the local limiter's transitions. Its methods are called
// on the request path, at most once per transition.
type observer interface {
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
	observer observer
	metrics  *Metrics // nil: not counted

	// local decides with the local rate states of an outage and the local
	// leases of held, which are kept until released or expired.
	local atomic.Pointer[generation]
	held  *memory.Store
	// active: local decisions were made since the store last decided a
	// whole batch; the first such batch drops the local state.
	active atomic.Bool
	// deadlines makes the store's contexts (storeContext): one timer per
	// millisecond in use, not one per call.
	deadlines *deadline.Wheel

	mu     sync.Mutex
	shares map[*limiter.Policy]*limiter.Policy
	// charged holds the reservations of dropped local states whose settle
	// went to the store (chargeOnce), by their expiry.
	charged map[reservation]int64

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
		inner:     inner,
		replicas:  int64(cfg.Replicas),
		clock:     cfg.Clock,
		observer:  cfg.Observer,
		shares:    map[*limiter.Policy]*limiter.Policy{},
		charged:   map[reservation]int64{},
		deadlines: deadline.New(0),
		newLocal: func() (*memory.Store, error) {
			st, err := memory.New(memory.Config{Clock: cfg.Clock, MaxEntries: cfg.MaxEntries})
			if err != nil {
				return nil, fmt.Errorf("failover: local limiter: %w", err)
			}
			return st, nil
		},
	}
	var err error
	if s.held, err = s.newLocal(); err != nil {
		return nil, err
	}
	st, err := s.newLocal()
	if err != nil {
		return nil, err
	}
	s.local.Store(&generation{leases.New(st, s.held), 0})
	s.metrics = cfg.Metrics
	s.scratch.New = func() any { return new(scratch) }
	return s, nil
}

// storeContext gives the store the caller's deadline less the answer
// reserve: a fifth of the time left, clamped to [MinAnswerReserve,
// MaxAnswerReserve]. Without it a hung store would use the whole deadline,
// the answer would arrive after the caller had given up (Envoy's own
// failure_mode_deny would decide instead of the policy's failure mode),
// and the local limiter would get an ended context. The deadline is at
// most MaxStoreWait away and comes from w: it fires up to one tick (1 ms)
// before the one reported, which only widens the reserve.
func storeContext(ctx context.Context, w *deadline.Wheel, now time.Time) context.Context {
	dl, ok := ctx.Deadline()
	if !ok {
		return ctx
	}
	reserve := min(max(dl.Sub(now)/5, minAnswerReserve), maxAnswerReserve)
	sdl := dl.Add(-reserve)
	if limit := now.Add(maxStoreWait); sdl.After(limit) {
		sdl = limit
	}
	return w.Context(ctx, now, sdl)
}

// scratch is the reusable state of one Evaluate with local limits.
type scratch struct {
	idx     []int             // the local limits' positions in the batch
	fail    []limiter.Outcome // the store's failures of those limits
	reqs    []limiter.Request // their requests, of the local shares
	pending limiter.Pending
	shares  limiter.Pending
}

// Evaluate implements limiter.Store: it evaluates batch with the store it
// wraps, under the caller's deadline less the answer reserve, and answers
// every outcome that store could not decide by the policy's failure mode,
// within the caller's own deadline. Every outcome it returns is Evaluated:
// a failure mode's answer has Source limiter.SourceFallback,
// Decision.Fallback saying how it answered and Outcome.Failed the store's
// failure. Releases of local leases and settles of local reservations
// (limiter.Request.LocalLease) go to the local limiter alone, but a
// settle whose local state was dropped, which goes to the store as a
// plain charge.
func (s *Store) Evaluate(ctx context.Context, batch []limiter.Request, out []limiter.Outcome) {
	for i := range batch {
		if batch[i].LocalLease {
			s.evaluateSplit(ctx, batch, out)
			return
		}
	}
	s.evaluate(ctx, batch, out)
}

func (s *Store) evaluate(ctx context.Context, batch []limiter.Request, out []limiter.Outcome) {
	s.inner.Evaluate(storeContext(ctx, s.deadlines, time.Now()), batch, out)
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
	for i := range batch {
		s.answer(&batch[i], &out[i])
	}
}

// fallbackRetryAfter is the shortest Retry-After of a fail-closed answer:
// the store's hint when it gave a longer one.
const fallbackRetryAfter = time.Second

// answer replaces o, the outcome of r, by its failure mode's answer
// (failureAnswer) when it is a failure, and counts it when a failure mode
// answered it (the local limiter's decisions included).
func (s *Store) answer(r *limiter.Request, o *limiter.Outcome) {
	if o.Kind != limiter.Evaluated {
		*o = failureAnswer(r, *o)
	}
	if o.Decision.Source == limiter.SourceFallback && s.metrics != nil {
		s.metrics.count(o)
	}
}

// failureAnswer is the answer of r's failure mode to a failed outcome o
// (any kind but Evaluated): an Evaluated outcome whose Decision has Source
// SourceFallback and says how it answered (Decision.Fallback). FailOpen
// allows; FailClosed, and FailLocal when no local limiter decided, deny
// with RetryAfter max(o.RetryAfter, fallbackRetryAfter). Nothing is known
// of the limit's state (Decision.Known is false). The outcome keeps o's
// kind (Outcome.Failed), category, error and retry hint for metrics and
// logs.
func failureAnswer(r *limiter.Request, o limiter.Outcome) limiter.Outcome {
	d := limiter.Decision{Source: limiter.SourceFallback, Fallback: limiter.FailClosed, RetryAfter: max(o.RetryAfter, fallbackRetryAfter)}
	if p := r.Policy; p != nil {
		d.PolicyID, d.PolicyRevision = p.ID(), p.Revision()
		if p.FailureMode() == limiter.FailOpen {
			d.Allowed, d.Fallback, d.RetryAfter = true, limiter.FailOpen, 0
		}
	}
	return limiter.Outcome{Kind: limiter.Evaluated, Decision: d, Failed: o.Kind, RetryAfter: o.RetryAfter, Category: o.Category, Err: o.Err}
}

// usesLocal reports whether the failed outcome of a request is decided
// locally: a failure_mode local policy whose store could not be reached or
// did not answer. A release or a return of the store's leases is not: the
// local limiter does not hold them.
func usesLocal(r *limiter.Request, o *limiter.Outcome) bool {
	return (o.Kind == limiter.Unavailable || o.Kind == limiter.Indeterminate) &&
		r.Policy != nil && r.Policy.FailureMode() == limiter.FailLocal && r.Lease == limiter.LeaseTake
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
		clear(sc.reqs)
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
	sc.pending.Evaluate(ctx, batch, out, func(ctx context.Context, reqs []limiter.Request, outs []limiter.Outcome) {
		// Copies, each asking for the policy's local share. A cost above the
		// share never fits: it is denied without asking, and blocks the others
		// as any denial does.
		sc.reqs = append(sc.reqs[:0], reqs...)
		reqs = sc.reqs
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
		sc.shares.Evaluate(ctx, reqs, outs, s.local.Load().Evaluate)
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
	})
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
// store is back, so the local rate state of an earlier outage is dropped.
// The local leases stay: the requests they admitted may still run.
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
	s.local.Store(&generation{leases.New(st, s.held), s.clock.Now().UnixMilli()})
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
