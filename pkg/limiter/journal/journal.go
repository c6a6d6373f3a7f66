// Package journal keeps the settlements a store could not record and
// applies them when it answers again: a limiter.Store wrapper with a
// bounded, in-memory journal.
//
// A settlement is usage already spent or given back, which the caller does
// not ask about and cannot send again: a charge (a request of a
// `charge: always` policy in a role that consumes, limiter.Request.Charges:
// Envoy ignores its answer), a lease release (limiter.LeaseRelease, sent
// when the stream is done) and a settle of a reservation
// (limiter.Request.Settles: the usage of a stream that reserved). When the
// store fails such a request in a way
// that may have left it unapplied (Unavailable, but for an invalid request;
// Indeterminate), the Journal keeps a copy; the outcome goes up unchanged,
// so the failure mode answers it as before. Takes, rate requests, checks,
// probes and lease returns are never kept: their caller was answered by the
// failure mode, and nothing was spent.
//
// Run replays the entries, oldest first, in batches of replayBatch, each
// entry as a request of its own (a charge or a settle in
// limiter.RoleOrdinary: it records its cost whatever the limit answers; a
// release or a settle names what it gives back or settles, LeaseAt, as
// it was sent): an entry the store
// evaluates is done, one it fails again is kept for the next attempt
// (backing off from minRetry to maxRetry while the store fails, at once
// when a request through the Journal is answered by the store again), one
// it finds incompatible or invalid is dropped. A release older than its
// policy's lease TTL is dropped unsent: its lease has expired, and a release
// without identity would free another request's lease. A settle is sent
// whenever it comes: one naming a reservation that has expired, or that a
// replay settled already, changes nothing (the estimate stays charged).
//
// # Once
//
// An entry is removed when the store answered its replay, so a charge is
// applied by the replay at most once. An Indeterminate outcome whose store
// still awaits the answer (limiter.Awaited: the Redis store, when the
// answer comes after the deadline) is not replayed until that answer
// says: applied (the entry is done) or not (it is replayed); it is
// replayed unseen only after awaitMax. So a charge counts twice only when
// its first attempt did apply it and the answer was lost (the connection
// broke after the program ran; see docs/consistency.md).
//
// # Bounds
//
// At most Config.MaxEntries entries are held (at most MaxBytesPerEntry each);
// a settlement that finds the journal full is dropped and counted. Adding
// is O(1) under a short lock and never waits for the store. What is held
// lives in memory: a process that dies without Stop loses it. Stop replays
// what it can in the time it is given and, with Config.File, writes the
// rest to that file, which New's caller reads back with Restore.
//
// A Journal is safe for concurrent use.
package journal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// Defaults and bounds of Config.
const (
	// DefaultMaxEntries bounds the journal: at most about 8.6 MiB when
	// full (MaxBytesPerEntry).
	DefaultMaxEntries = 100_000
	// MaxMaxEntries bounds Config.MaxEntries.
	MaxMaxEntries = 10_000_000
	// defaultReplayTimeout bounds one replay batch (the store's own
	// timeout may cut it shorter).
	defaultReplayTimeout = time.Second
	// replayBatch is the most entries one replay sends.
	replayBatch = 64
	// minRetry and maxRetry bound the wait between replays that the store
	// failed: it starts at minRetry and doubles up to maxRetry; a request
	// the store answers cuts it short, but never below minRetry.
	minRetry = 100 * time.Millisecond
	maxRetry = 5 * time.Second
	// awaitMax bounds the wait for the late answer of an Indeterminate
	// outcome (limiter.Awaited) before the entry is replayed unseen.
	awaitMax = 30 * time.Second
	// MaxBytesPerEntry bounds the heap a full journal keeps per entry
	// (the entry and its share of a chunk; the policy is the rules', and
	// a late answer awaited, held only while its store's call is in
	// flight, the store's).
	MaxBytesPerEntry = 90
)

// kind is what a settlement does; it labels the metrics.
type kind uint8

const (
	// kindCharge records usage already spent (limiter.Request.Charges).
	kindCharge kind = iota
	// kindRelease gives leases back (limiter.LeaseRelease).
	kindRelease
	// kindSettle settles a reservation (limiter.Request.Settles).
	kindSettle
	numKinds
)

func (k kind) String() string {
	switch k {
	case kindRelease:
		return "release"
	case kindSettle:
		return "settle"
	}
	return "charge"
}

// Reasons an entry is dropped: the values of the reason label.
const (
	// ReasonFull: the journal held Config.MaxEntries entries.
	reasonFull = "full"
	// ReasonIncompatible: the store found the state or its program
	// incompatible (limiter.Incompatible); a replay cannot change that.
	reasonIncompatible = "incompatible"
	// ReasonInvalid: the store refused the request as invalid, or a
	// restored entry no longer settles anything under its policy.
	reasonInvalid = "invalid"
	// ReasonExpired: a release older than its policy's lease TTL.
	reasonExpired = "expired"
	// ReasonPolicyGone: a restored entry names a policy (ID and revision)
	// that the rules no longer hold.
	reasonPolicyGone = "policy_gone"
)

// settles reports whether r is a settlement, and of which kind: a charge
// (limiter.Request.Charges, not of a concurrency policy), a lease release,
// or a settle in whatever role (one of cost 0 that names no reservation
// does nothing).
func settles(r *limiter.Request) (kind, bool) {
	switch p := r.Policy; {
	case p == nil:
		return 0, false
	case p.Leases():
		return kindRelease, r.Lease == limiter.LeaseRelease
	case r.Settles():
		return kindSettle, r.Cost > 0 || r.LeaseAt != 0
	case r.Lease == limiter.LeaseTake && r.Charges():
		return kindCharge, true
	}
	return 0, false
}

// unapplied reports whether o is a failure that may have left its request
// unapplied, so that a replay can still apply it: not an invalid request,
// nor one keyed with a digest no replica reads (limiter.CategoryUnkeyed).
func unapplied(o *limiter.Outcome) bool {
	switch o.Kind {
	case limiter.Unavailable:
		return o.Category != limiter.CategoryInvalidRequest && o.Category != limiter.CategoryUnkeyed
	case limiter.Indeterminate:
		return true
	}
	return false
}

// observer is told what the journal holds, keeps, replays and drops.
// Metrics is the Prometheus one. Its methods are called with the journal's
// lock held: they must be quick and must not call the Journal.
type observer interface {
	// Journalled: a settlement of kind k was kept.
	Journalled(k kind)
	// Replayed: n entries of kind k were applied by the store.
	Replayed(k kind, n int)
	// Dropped: n entries (or settlements) of kind k were dropped for
	// reason (a Reason* constant).
	Dropped(k kind, reason string, n int)
	// Entries: the journal now holds n entries.
	Entries(n int)
}

// Config configures a Journal.
type Config struct {
	// Store is the store whose failed settlements are kept. (Required)
	Store limiter.Store
	// MaxEntries bounds the entries held. (Optional, default
	// DefaultMaxEntries; at most MaxMaxEntries)
	MaxEntries int
	// ReplayTimeout bounds one replay batch. (Optional, default
	// DefaultReplayTimeout)
	ReplayTimeout time.Duration
	// File is where Stop writes the entries it could not replay, and
	// Restore reads them back: a file of its own per process, in a
	// directory the process can write (New checks). (Optional)
	File string
	// Clock dates the entries, for the releases' expiry. (Optional,
	// default the system clock)
	Clock limiter.Clock
	// Observer is told what happens to entries. (Optional)
	Observer observer
}

// entry is one kept settlement.
type entry struct {
	policy  *limiter.Policy
	subject limiter.SubjectDigest
	tag     limiter.Tag
	cost    int64
	at      int64 // when it was journalled, Unix ms
	// leaseAt is a release's or a settle's limiter.Request.LeaseAt.
	leaseAt int64
	// awaited is, for an Indeterminate outcome, the store's late answer
	// to wait for before a replay (nil: none to wait for), awaited since
	// at + awaitedAfter ms.
	awaited      *limiter.Awaited
	awaitedAfter uint32
	kind         kind
}

// awaitedSince is when e began to await its late answer, Unix ms.
func (e *entry) awaitedSince() int64 { return e.at + int64(e.awaitedAfter) }

// await makes e await a, from now (Unix ms).
func (e *entry) await(a *limiter.Awaited, now int64) {
	e.awaited, e.awaitedAfter = a, uint32(min(max(now-e.at, 0), 1<<32-1))
}

// request is the replay of e, a request of its own: a charge or a settle
// in the ordinary role (it records its cost whatever the limit answers; a
// settle never blocks), a release as pkg/rls sends one (a check: it never
// blocks); a release or a settle names its LeaseAt.
func (e *entry) request() limiter.Request {
	r := limiter.Request{Policy: e.policy, Subject: e.subject, Tag: e.tag, Cost: e.cost}
	switch e.kind {
	case kindRelease:
		r.Lease, r.Role, r.LeaseAt = limiter.LeaseRelease, limiter.RoleCheck, e.leaseAt
	case kindSettle:
		r.Lease, r.LeaseAt = limiter.LeaseRelease, e.leaseAt
	}
	return r
}

// Journal is a limiter.Store that keeps the settlements its store could
// not record and replays them (see the package doc).
type Journal struct {
	store    limiter.Store
	clock    limiter.Clock
	observer observer
	max      int
	timeout  time.Duration
	file     string
	// retryMin and retryMax are minRetry and maxRetry (tests shorten
	// them).
	retryMin, retryMax time.Duration

	mu sync.Mutex
	q  deque
	// held is q.len(), read on the request path without the lock.
	held atomic.Int64

	// kick wakes Run: an entry was added to an empty journal, or the
	// store answered a request.
	kick chan struct{}
	// replaying is held by the one replay that runs at a time.
	replaying sync.Mutex
}

var _ limiter.Store = (*Journal)(nil)

// New builds a Journal over cfg.Store. With cfg.File it checks that the
// file's directory can be written.
func New(cfg Config) (*Journal, error) {
	if cfg.Store == nil {
		return nil, errors.New("journal: a store is required")
	}
	switch {
	case cfg.MaxEntries == 0:
		cfg.MaxEntries = DefaultMaxEntries
	case cfg.MaxEntries < 0 || cfg.MaxEntries > MaxMaxEntries:
		return nil, fmt.Errorf("journal: MaxEntries %d is outside [1, %d]", cfg.MaxEntries, MaxMaxEntries)
	}
	switch {
	case cfg.ReplayTimeout == 0:
		cfg.ReplayTimeout = defaultReplayTimeout
	case cfg.ReplayTimeout < 0:
		return nil, fmt.Errorf("journal: ReplayTimeout %v is negative", cfg.ReplayTimeout)
	}
	if cfg.Clock == nil {
		cfg.Clock = limiter.SystemClock{}
	}
	if cfg.Observer == nil {
		cfg.Observer = nopObserver{}
	}
	if cfg.File != "" {
		if err := checkWritable(cfg.File); err != nil {
			return nil, err
		}
	}
	return &Journal{
		store: cfg.Store, clock: cfg.Clock, observer: cfg.Observer,
		max: cfg.MaxEntries, timeout: cfg.ReplayTimeout, file: cfg.File,
		retryMin: minRetry, retryMax: maxRetry,
		kick: make(chan struct{}, 1),
	}, nil
}

// checkWritable creates and removes a file beside path, so that a journal
// file that could never be written is found at start, not at stop.
func checkWritable(path string) error {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".check-*")
	if err != nil {
		return fmt.Errorf("journal: the file's directory cannot be written: %w", err)
	}
	name := f.Name()
	err = errors.Join(f.Close(), os.Remove(name))
	if err != nil {
		return fmt.Errorf("journal: the file's directory cannot be written: %w", err)
	}
	return nil
}

// Evaluate implements limiter.Store: it evaluates batch with the store and
// keeps a copy of each settlement the store failed and may not have
// applied. The outcomes are the store's, unchanged.
func (j *Journal) Evaluate(ctx context.Context, batch []limiter.Request, out []limiter.Outcome) {
	j.store.Evaluate(ctx, batch, out)
	answered := false
	for i := range batch {
		o := &out[i]
		if o.Kind == limiter.Evaluated {
			answered = answered || o.Decision.Source != limiter.SourceLocalCache
			continue
		}
		if !unapplied(o) {
			continue
		}
		if k, ok := settles(&batch[i]); ok && batch[i].Validate() == nil {
			var awaited *limiter.Awaited
			if o.Kind == limiter.Indeterminate {
				errors.As(o.Err, &awaited)
			}
			j.add(&batch[i], k, awaited)
		}
	}
	if answered && j.held.Load() > 0 {
		j.wake()
	}
}

// add keeps a copy of r (whose store's late answer is awaited, when not
// nil), or drops it when the journal is full.
func (j *Journal) add(r *limiter.Request, k kind, awaited *limiter.Awaited) {
	e := entry{policy: r.Policy, subject: r.Subject, tag: r.Tag, cost: r.Cost, at: j.clock.Now().UnixMilli(), leaseAt: r.LeaseAt, kind: k}
	e.await(awaited, e.at)
	j.mu.Lock()
	if j.q.len() >= j.max {
		j.observer.Dropped(k, reasonFull, 1)
		j.mu.Unlock()
		return
	}
	j.q.push(e)
	n := j.q.len()
	j.held.Store(int64(n))
	j.observer.Journalled(k)
	j.observer.Entries(n)
	j.mu.Unlock()
	if n == 1 {
		j.wake()
	}
}

// wake tells Run there is work, without waiting.
func (j *Journal) wake() {
	select {
	case j.kick <- struct{}{}:
	default:
	}
}

// Len returns the number of entries held.
func (j *Journal) Len() int { return int(j.held.Load()) }

// nopObserver is the Observer of a Journal configured without one.
type nopObserver struct{}

func (nopObserver) Journalled(kind)           {}
func (nopObserver) Replayed(kind, int)        {}
func (nopObserver) Dropped(kind, string, int) {}
func (nopObserver) Entries(int)               {}
