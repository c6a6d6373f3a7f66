// Package memory is the in-process limiter.Store of envoy-rls: the embedded
// default that serves exact decisions on one machine without Redis.
//
// It runs the same pure algorithms as the Redis Lua programs (algorithm.Check),
// reading its injected clock once per Evaluate call, and evaluates a batch all
// or nothing (see limiter.Store and Store.Evaluate). State lives in a fixed
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
// across the shards), and live state is never evicted: dropping a live
// counter would reset it and silently admit more than the limit. Subjects
// that have an entry are always evaluated exactly.
//
// A flood stays in its policy: a policy may take a new entry in a shard
// only while it holds fewer entries of that shard than are free (after the
// shard has dropped up to a bounded number of expired entries), so one
// policy holds at most half of the store and every flood leaves room for the
// policies that come after it. Policies made at request time (a
// limiter.Policy with a Group: request-supplied limit overrides) hold at
// most an eighth of each shard between them, by the same rule within that
// share, however many of them there are: the configured policies keep the
// rest. A new subject of a policy that has no room
// left is decided by the policy's overflow sketch (sketch.go): a count-min
// sketch, at least MinSketchBytes, wider from a pool sized to MaxEntries
// (sketch.go), that can only over-count, so that it
// never admits more than the exact algorithm would for any subject. Its
// decisions are ordinary Evaluated outcomes with Source
// limiter.SourceMemoryOverflow and Certainty limiter.Approximate, counted by
// Observer.Overflow under the policy's Label. At most Config.MaxSketches
// policies hold a sketch at once, policies made at request time an eighth
// of them; beyond that a new subject without room is refused with an
// Unavailable outcome of category limiter.CategoryCapacity, which the
// policy's failure mode answers and Observer.Refused counts.
//
// The lease sets of concurrency limits live in a table of their own
// (lease.go), of at most MaxEntries sets, shared by the same rule over the
// whole table: one concurrency policy holds at most half of it. They have
// no sketch: a new set beyond its policy's share is refused the same way.
//
// The Observer is told of refusals and overflow decisions by the policy's
// limiter.Policy.Label, or the policy itself, never by an ID made of request
// data.
package memory

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// Defaults for Config fields left zero.
const (
	DefaultMaxEntries = 1_000_000
	defaultShards     = 256
	// capacityRetryAfter is the retry hint of a capacity refusal.
	capacityRetryAfter = time.Second
	// fullScanBudget bounds how many entries a full shard inspects for
	// expired ones before it refuses a new subject; Sweep does the rest.
	fullScanBudget = 64
	// minShardEntries is the least capacity New gives a shard (see
	// Config.Shards).
	minShardEntries = 8
)

// MaxBytesPerEntry bounds the heap a full store keeps per entry, to size
// MaxEntries from a memory budget. A slot is 96 bytes plus a 4-byte tag;
// a shard's table doubles when it would pass three quarters full, so a full
// shard is 3/8 to 3/4 full: 133 to 267 bytes per entry; TestFullStoreHeap
// holds a full store to the bound (its measurements: docs/deploy.md).
// Overflow sketches (Store.SketchBytes) come on top. The process needs
// about twice this at its peak: see docs/deploy.md.
const MaxBytesPerEntry = 272

// observer is told what the store drops and refuses, so that it can be
// counted; Metrics is the Prometheus one. Calls are made outside the shard locks
// and concurrently from many goroutines; they must be cheap and safe for
// concurrent use.
type observer interface {
	// Refused: a new subject of policy found no room for an entry and no
	// sketch for its policy (MaxSketches policies were already in overflow,
	// or for a policy made at request time, its share of them), or a new
	// lease set of a concurrency policy found no room in the policy's share
	// of the lease table.
	Refused(policy *limiter.Policy)
	// Expired: n expired states were dropped.
	Expired(n int)
	// Overflow: a decision for a policy was made by its overflow sketch;
	// label is the policy's limiter.Policy.Label (its ID, or for a policy
	// made at request time its group: a bounded set of names).
	Overflow(label string)
}

// Config configures New.
type Config struct {
	// Clock drives enforcement. (Optional, default limiter.SystemClock)
	Clock limiter.Clock
	// MaxEntries bounds the number of live states. (Optional, default
	// DefaultMaxEntries)
	MaxEntries int
	// Shards is the number of independently locked shards, a power of two.
	// It is lowered until each shard holds at least 8 entries, or to 1.
	// (Optional, default DefaultShards)
	Shards int
	// MaxSketches bounds how many policies can hold an overflow sketch at
	// once, each at least MinSketchBytes; with the pool (sketch.go) it
	// bounds their memory (Store.SketchBytes). (Optional, default
	// DefaultMaxSketches)
	MaxSketches int
	// Observer counts refusals, expiries and overflow decisions. (Optional)
	Observer observer
}

// errInvalidConfig is matched by every error New returns.
var errInvalidConfig = errors.New("memory: invalid config")

// errFull is the cause of a capacity refusal.
var errFull = errors.New("memory: no room for a new subject and every overflow sketch is in use")

// Store is the in-memory limiter.Store.
type Store struct {
	clock   limiter.Clock
	obs     observer
	shards  []shard
	mask    uint64
	scratch sync.Pool // *scratch: per-call buffers

	// overflowMu guards sketches; a call takes it after every shard lock
	// it holds, and takes no shard lock while holding it. nSketches is
	// len(sketches), read without the lock: while it is 0 (no flood), new
	// subjects never take overflowMu.
	overflowMu  sync.Mutex
	sketches    map[sketchKey]*sketch
	nSketches   atomic.Int32
	maxSketches int
	// madeSketches counts the sketches of policies made at request time;
	// sketchPool is the memory the sketches may take beyond
	// MinSketchBytes each, sketchPoolUsed what they take of it. Guarded by
	// overflowMu. sketchBytes is the sketches' memory in all, written
	// under overflowMu and read without it (SketchBytes).
	madeSketches               int
	sketchPool, sketchPoolUsed int64
	sketchBytes                atomic.Int64
	// maxSketchBits is log2 of the widest row a sketch may have
	// (sketchSizing).
	maxSketchBits uint8
	// leases holds the lease sets of concurrency limits (lease.go).
	leases *leaseTable
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
	// made: the policy was made at request time (limiter.Policy.Group is
	// set), which a policy ID always is or is not: it is no part of the
	// key's identity, only of where its entry may go (shard.room).
	made bool
	// reserves: the policy takes reservations (limiter.Reserve), which
	// its ID and revision always do or do not: the entry keeps them
	// beside its slot (shard.logs).
	reserves bool
}

// keyOf is the key of r's state.
func keyOf(r *limiter.Request) key {
	p := r.Policy
	return key{subject: r.Subject, policy: p.ID(), revision: p.Revision(), alg: p.Algorithm(), made: p.Group() != "",
		reserves: p.Reserve().On()}
}

// entry is the part of a algorithm.State the key does not already hold.
type entry struct {
	lastObserved, epoch, level, carry, expiresAt int64
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
		return nil, fmt.Errorf("%w: MaxEntries %d is negative", errInvalidConfig, cfg.MaxEntries)
	}
	switch {
	case cfg.Shards == 0:
		cfg.Shards = defaultShards
	case cfg.Shards < 0 || cfg.Shards&(cfg.Shards-1) != 0:
		return nil, fmt.Errorf("%w: Shards %d is not a positive power of two", errInvalidConfig, cfg.Shards)
	}
	// A shard holds at least minShardEntries (when the bound allows), so
	// that the fairness rule (see shard.room) has room to share.
	for cfg.Shards > 1 && cfg.MaxEntries/cfg.Shards < minShardEntries {
		cfg.Shards /= 2
	}
	switch {
	case cfg.MaxSketches == 0:
		cfg.MaxSketches = DefaultMaxSketches
	case cfg.MaxSketches < 0:
		return nil, fmt.Errorf("%w: MaxSketches %d is negative", errInvalidConfig, cfg.MaxSketches)
	}
	if cfg.MaxEntries/cfg.Shards >= math.MaxInt32 {
		return nil, fmt.Errorf("%w: MaxEntries %d is above %d per shard", errInvalidConfig, cfg.MaxEntries, math.MaxInt32-1)
	}
	s := &Store{clock: cfg.Clock, obs: cfg.Observer, shards: make([]shard, cfg.Shards), mask: uint64(cfg.Shards - 1),
		sketches: make(map[sketchKey]*sketch), maxSketches: cfg.MaxSketches, leases: newLeaseTable(cfg.MaxEntries)}
	s.sketchPool, s.maxSketchBits = sketchSizing(cfg.MaxEntries)
	per, extra := cfg.MaxEntries/cfg.Shards, cfg.MaxEntries%cfg.Shards
	for i := range s.shards {
		sh := &s.shards[i]
		sh.capacity = int32(per)
		if i < extra {
			sh.capacity++
		}
		sh.minExpiry = math.MaxInt64
	}
	s.scratch.New = func() any { return new(scratch) }
	return s, nil
}

// Sweep drops every state expired at now, one shard lock at a time, and
// returns how many it dropped (also reported to Observer.Expired); then it
// frees the overflow sketches that remember nothing any more and the lease
// sets whose leases have all expired. Call it
// periodically; a shard holds at most MaxEntries/Shards entries, which
// bounds how long one sweep step holds a lock.
func (s *Store) Sweep(now time.Time) int {
	nowMs := now.UnixMilli()
	defer func() {
		s.overflowMu.Lock()
		s.dropIdleSketches(nowMs)
		s.overflowMu.Unlock()
		s.leases.sweep(nowMs)
	}()
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

// Sketches returns the number of overflow sketches held.
func (s *Store) Sketches() int { return int(s.nSketches.Load()) }

// SketchBytes returns the memory the overflow sketches held take: at most
// MaxSketches × MinSketchBytes plus the pool (the larger of
// SketchPoolBytesPerEntry × MaxEntries and MinSketchPoolBytes).
func (s *Store) SketchBytes() int64 { return s.sketchBytes.Load() }

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
