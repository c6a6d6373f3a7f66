// Package memory is the in-process limiter.Store of envoy-rls: the embedded
// default that serves exact decisions on one machine without Redis.
//
// It runs the same pure algorithms as the Redis Lua programs (limiter.Apply),
// reading its injected clock once per Evaluate call. State lives in a fixed
// number of shards chosen by the subject digest (an HMAC, hence uniform),
// each an open-addressing hash table guarded by its own mutex, so that
// requests for different subjects rarely contend. A Store is safe for concurrent use by multiple
// goroutines; build it with New (the zero value is not usable).
//
// # Expiry
//
// Every state carries the TTL the algorithm gives it (the time after which it
// is indistinguishable from no state, plus the policy's cleanup grace). An
// expired state is dropped lazily when its subject is evaluated again, when a
// full shard needs room, and by Sweep, which the binary calls on a ticker.
// Sweep locks one shard at a time.
//
// # Capacity bound
//
// The number of live entries never exceeds Config.MaxEntries (split evenly
// across the shards). When a new subject arrives at a full shard, the store
// first drops up to a bounded number of expired entries of that shard; if the
// shard is still full, the request is refused with an Unavailable outcome of
// category limiter.CategoryCapacity, which the policy's failure mode answers
// (fail closed by default) and Observer.Refused counts. Subjects that already
// have state are always evaluated. The store never evicts live state: dropping
// a live counter would reset it and silently admit more than the limit.
// Refusing new subjects instead keeps every decision exact, at the price of
// denying (or, for fail-open policies, admitting without counting) new
// subjects until entries expire; size MaxEntries for the expected number of
// subjects live within one TTL.
package memory

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// Defaults for Config fields left zero.
const (
	DefaultMaxEntries = 1_000_000
	DefaultShards     = 256
	// CapacityRetryAfter is the retry hint of a capacity refusal.
	CapacityRetryAfter = time.Second
	// fullScanBudget bounds how many entries a full shard inspects for
	// expired ones before it refuses a new subject; Sweep does the rest.
	fullScanBudget = 64
)

// Observer is told what the store drops and refuses, so that the binary can
// count it (Prometheus counters, say). Calls are made outside the shard locks
// and concurrently from many goroutines; they must be cheap and safe for
// concurrent use.
type Observer interface {
	// Refused: a new subject was refused because its shard was full.
	Refused()
	// Expired: n expired states were dropped.
	Expired(n int)
}

// Config configures New.
type Config struct {
	// Clock drives enforcement. (Optional, default limiter.SystemClock)
	Clock limiter.Clock
	// MaxEntries bounds the number of live states. (Optional, default
	// DefaultMaxEntries)
	MaxEntries int
	// Shards is the number of independently locked shards, a power of two.
	// It is lowered to fit MaxEntries when MaxEntries is smaller. (Optional,
	// default DefaultShards)
	Shards int
	// Observer counts refusals and expiries. (Optional)
	Observer Observer
}

// ErrInvalidConfig is matched by every error New returns.
var ErrInvalidConfig = errors.New("memory: invalid config")

// ErrFull is the cause of a capacity refusal.
var ErrFull = errors.New("memory: store is full, new subjects are refused until entries expire")

// Store is the in-memory limiter.Store.
type Store struct {
	clock  limiter.Clock
	obs    Observer
	shards []shard
	mask   uint64
}

var _ limiter.Store = (*Store)(nil)

// key identifies one state. Revision and algorithm are part of it, so a new
// revision or algorithm starts fresh and stale state simply expires; stored
// state can therefore never be STATE_INCOMPATIBLE here.
type key struct {
	subject  limiter.SubjectDigest
	policy   string
	revision uint32
	alg      limiter.Algorithm
}

// entry is the part of a limiter.State the key does not already hold.
type entry struct {
	lastObserved, a, b, c, expiresAt int64
}

type shard struct {
	mu       sync.Mutex
	t        table
	capacity int
	// minExpiry is a lower bound of every entry's expiresAt (exact after a
	// complete scan): while now <= minExpiry nothing can have expired.
	minExpiry int64
	_         [64]byte // keep shards on separate cache lines
}

// New builds a Store.
func New(cfg Config) (*Store, error) {
	if cfg.Clock == nil {
		cfg.Clock = limiter.SystemClock{}
	}
	switch {
	case cfg.MaxEntries == 0:
		cfg.MaxEntries = DefaultMaxEntries
	case cfg.MaxEntries < 0:
		return nil, fmt.Errorf("%w: MaxEntries %d is negative", ErrInvalidConfig, cfg.MaxEntries)
	}
	switch {
	case cfg.Shards == 0:
		cfg.Shards = DefaultShards
	case cfg.Shards < 0 || cfg.Shards&(cfg.Shards-1) != 0:
		return nil, fmt.Errorf("%w: Shards %d is not a positive power of two", ErrInvalidConfig, cfg.Shards)
	}
	for cfg.Shards > cfg.MaxEntries {
		cfg.Shards /= 2
	}
	if cfg.MaxEntries/cfg.Shards >= math.MaxInt32 {
		return nil, fmt.Errorf("%w: MaxEntries %d is above %d per shard", ErrInvalidConfig, cfg.MaxEntries, math.MaxInt32-1)
	}
	s := &Store{clock: cfg.Clock, obs: cfg.Observer, shards: make([]shard, cfg.Shards), mask: uint64(cfg.Shards - 1)}
	per, extra := cfg.MaxEntries/cfg.Shards, cfg.MaxEntries%cfg.Shards
	for i := range s.shards {
		sh := &s.shards[i]
		sh.capacity = per
		if i < extra {
			sh.capacity++
		}
		sh.minExpiry = math.MaxInt64
	}
	return s, nil
}

// Evaluate implements limiter.Store. It reads the clock once and evaluates
// the requests in order, one outcome each, with Decision.Source
// limiter.SourceMemory. A request evaluated after ctx is done gets an
// Unavailable outcome (limiter.CategoryDeadline) and changes nothing.
func (s *Store) Evaluate(ctx context.Context, batch []limiter.Request, out []limiter.Outcome) {
	out = out[:len(batch)]
	nowMs := s.clock.Now().UnixMilli()
	for i := range batch {
		if err := ctx.Err(); err != nil {
			out[i] = limiter.UnavailableOutcome(0, limiter.CategoryDeadline, fmt.Errorf("memory store: %w", err))
			continue
		}
		out[i] = s.evaluate(&batch[i], nowMs)
	}
}

// evaluate is one request: load, limiter.Apply, commit, under the subject's
// shard lock. The three steps are separate so that an all-or-nothing batch
// can later lock its distinct shards in index order, Apply every request,
// and commit only when all are allowed.
func (s *Store) evaluate(r *limiter.Request, nowMs int64) limiter.Outcome {
	if err := r.Validate(); err != nil {
		return limiter.UnavailableOutcome(0, limiter.CategoryInvalidRequest, fmt.Errorf("memory store: %w", err))
	}
	p := r.Policy
	if nowMs < 0 || nowMs > limiter.MaxSafeInteger {
		return limiter.UnavailableOutcome(limiter.ClockUnsafeRetryAfter, limiter.CategoryClockUnsafe,
			fmt.Errorf("memory store: clock reads %dms since the epoch: %w", nowMs, limiter.ErrClockUnsafe))
	}
	k := key{subject: r.Subject, policy: p.ID(), revision: p.Revision(), alg: p.Algorithm()}
	h := hashKey(&k)
	sh := s.shardFor(&r.Subject)

	sh.mu.Lock()
	st, i, found, dropped := sh.load(&k, h, nowMs)
	next, reply, write := limiter.Apply(st, nowMs, p, r.Cost)
	refused := false
	switch {
	case write && found:
		sh.t.slots[i].e = entryOf(next)
		sh.minExpiry = min(sh.minExpiry, next.ExpiresAtMs)
	case write:
		if sh.room(nowMs, &dropped) {
			sh.t.insert(&k, h, entryOf(next))
			sh.minExpiry = min(sh.minExpiry, next.ExpiresAtMs)
		} else {
			refused = true
		}
	case dropped > 0:
		// An expired state the request did not replace.
		sh.t.remove(i)
	}
	sh.mu.Unlock()

	if s.obs != nil {
		if dropped > 0 {
			s.obs.Expired(dropped)
		}
		if refused {
			s.obs.Refused()
		}
	}
	if refused {
		return limiter.UnavailableOutcome(CapacityRetryAfter, limiter.CategoryCapacity, ErrFull)
	}
	return limiter.OutcomeFromReply(p, reply, limiter.SourceMemory)
}

func (s *Store) shardFor(d *limiter.SubjectDigest) *shard {
	return &s.shards[binary.LittleEndian.Uint64(d[:8])&s.mask]
}

// load returns the live state of k and whether (and where) k is stored. An
// expired state reads as no state and counts in dropped; it stays in place
// for the caller to overwrite or remove.
func (sh *shard) load(k *key, h uint64, nowMs int64) (st limiter.State, i int, found bool, dropped int) {
	i, found = sh.t.find(k, h)
	if !found {
		return limiter.State{}, i, false, 0
	}
	e := &sh.t.slots[i].e
	if nowMs > e.expiresAt { // Redis semantics: a key lives through its expiry millisecond
		return limiter.State{}, i, true, 1
	}
	return limiter.State{
		Exists: true, Schema: limiter.StateSchema, Algorithm: k.alg, PolicyID: k.policy, Revision: k.revision,
		LastObservedMs: e.lastObserved, A: e.a, B: e.b, C: e.c, ExpiresAtMs: e.expiresAt,
	}, i, true, 0
}

func entryOf(st limiter.State) entry {
	return entry{lastObserved: st.LastObservedMs, a: st.A, b: st.B, c: st.C, expiresAt: st.ExpiresAtMs}
}

// room reports whether the shard can take a new entry, first dropping up to
// fullScanBudget expired entries when it is full.
func (sh *shard) room(nowMs int64, dropped *int) bool {
	if sh.t.n < sh.capacity {
		return true
	}
	*dropped += sh.dropExpired(nowMs, fullScanBudget)
	return sh.t.n < sh.capacity
}

// dropExpired deletes expired entries and returns how many. With budget 0
// it scans the whole table; otherwise it inspects at most budget slots,
// resuming where the previous bounded scan stopped.
func (sh *shard) dropExpired(nowMs int64, budget int) int {
	t := &sh.t
	if nowMs <= sh.minExpiry || t.n == 0 {
		return 0
	}
	size := len(t.slots)
	complete := budget == 0 || budget >= size
	steps, i := size, 0
	if !complete {
		steps, i = budget, t.cursor
	}
	dropped := 0
	lowest := int64(math.MaxInt64)
	for ; steps > 0; steps-- {
		s := &t.slots[i]
		if s.used() && nowMs > s.e.expiresAt {
			// remove shifts a later slot into i: look at i again.
			t.remove(i)
			dropped++
			steps++
			continue
		}
		if s.used() {
			lowest = min(lowest, s.e.expiresAt)
		}
		i = (i + 1) & (size - 1)
	}
	if complete {
		sh.minExpiry = lowest
	} else {
		t.cursor = i
	}
	return dropped
}

// Sweep drops every state expired at now, one shard lock at a time, and
// returns how many it dropped (also reported to Observer.Expired). Call it
// periodically; a shard holds at most MaxEntries/Shards entries, which
// bounds how long one sweep step holds a lock.
func (s *Store) Sweep(now time.Time) int {
	nowMs := now.UnixMilli()
	total := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		total += sh.dropExpired(nowMs, 0)
		sh.mu.Unlock()
	}
	if s.obs != nil && total > 0 {
		s.obs.Expired(total)
	}
	return total
}

// SweepExpired is Sweep at the store clock's now.
func (s *Store) SweepExpired() int { return s.Sweep(s.clock.Now()) }

// Len returns the number of stored states, expired ones not yet dropped
// included.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.t.n
		sh.mu.Unlock()
	}
	return n
}
