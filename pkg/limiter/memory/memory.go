// Package memory is the in-process limiter.Store of envoy-rls: the embedded
// default that serves exact decisions on one machine without Redis.
//
// It runs the same pure algorithms as the Redis Lua programs (limiter.Check),
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
	"slices"
	"sync"
	"time"
	"unsafe"

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

// MaxBytesPerEntry bounds the heap a full store keeps per entry, to size
// MaxEntries from a memory budget. A slot is 96 bytes plus a 4-byte tag;
// a shard's table doubles when it would pass three quarters full, so a full
// shard is 3/8 to 3/4 full: 133 to 267 bytes per entry. Measured
// (TestFullStoreHeap, heap in use after a collection): 262 bytes at 100,000
// entries, 267 at 786,688 (every table just doubled, the worst case), 210
// at 1,000,000. While a table doubles, its old arrays are garbage until the
// next collection: the runtime took 304 bytes per entry from the system at
// 786,688.
const MaxBytesPerEntry = 272

// Observer is told what the store drops and refuses, so that it can be
// counted; Metrics is the Prometheus one. Calls are made outside the shard locks
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
	clock   limiter.Clock
	obs     Observer
	shards  []shard
	mask    uint64
	scratch sync.Pool // *scratch: per-call buffers
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

// shard is padded to shardSize, two cache lines (one adjacent-line
// prefetch pair): in the slice of shards each starts on its own line, so that
// goroutines working on different shards never write to a line they share.
type shard struct {
	shardState
	_ [shardSize - unsafe.Sizeof(shardState{})]byte
}

const shardSize = 128

type shardState struct {
	mu       sync.Mutex
	t        table
	capacity int
	// minExpiry is a lower bound of every entry's expiresAt (exact after a
	// complete scan): while now <= minExpiry nothing can have expired.
	minExpiry int64
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
	s.scratch.New = func() any { return new(scratch) }
	return s, nil
}

// Evaluate implements limiter.Store: the batch is all or nothing. It reads
// the clock once, locks the shards of every request in ascending shard order
// (each once, so that concurrent batches cannot deadlock), checks every
// request in order against the stored state (a request on a state that an
// earlier request of the batch already touched sees that request's tentative
// cost), decides with limiter.Commits, writes the new states only when the
// batch commits, and unlocks. Decision.Source is limiter.SourceMemory.
//
// A batch evaluated after ctx is done gets Unavailable outcomes
// (limiter.CategoryDeadline) and changes nothing. A new subject refused for
// capacity (see the package comment) is an Unavailable outcome found in the
// check, so it blocks the batch as any failure of a fail-closed limit does.
func (s *Store) Evaluate(ctx context.Context, batch []limiter.Request, out []limiter.Outcome) {
	out = out[:len(batch)]
	if len(batch) == 0 {
		return
	}
	if err := ctx.Err(); err != nil {
		for i := range out {
			out[i] = limiter.UnavailableOutcome(0, limiter.CategoryDeadline, fmt.Errorf("memory store: %w", err))
		}
		return
	}
	nowMs := s.clock.Now().UnixMilli()
	if len(batch) == 1 {
		s.evaluateOne(&batch[0], &out[0], nowMs)
		return
	}
	sc := s.getScratch(len(batch))
	defer s.putScratch(sc)
	w := sc.work
	valid := 0
	for i := range batch {
		r := &batch[i]
		w[i] = work{prev: -1}
		if err := r.Validate(); err != nil {
			out[i] = limiter.UnavailableOutcome(0, limiter.CategoryInvalidRequest, fmt.Errorf("memory store: %w", err))
			continue
		}
		if nowMs < 0 || nowMs > limiter.MaxSafeInteger {
			out[i] = limiter.UnavailableOutcome(limiter.ClockUnsafeRetryAfter, limiter.CategoryClockUnsafe,
				fmt.Errorf("memory store: clock reads %dms since the epoch: %w", nowMs, limiter.ErrClockUnsafe))
			continue
		}
		p := r.Policy
		w[i].valid = true
		w[i].k = key{subject: r.Subject, policy: p.ID(), revision: p.Revision(), alg: p.Algorithm()}
		w[i].h = hashKey(&w[i].k)
		w[i].shard = s.shardIndex(&r.Subject)
		valid++
	}
	if valid == 0 {
		return
	}
	// Lock every distinct shard, in ascending order.
	order := sc.order[:0]
	for i := range w {
		if w[i].valid {
			order = append(order, w[i].shard)
		}
	}
	slices.Sort(order)
	order = slices.Compact(order)
	sc.order = order
	for _, si := range order {
		s.shards[si].mu.Lock()
	}
	dropped, refused := 0, 0
	// Phase 1: check, consuming nothing.
	for i := range batch {
		wi := &w[i]
		if !wi.valid {
			continue
		}
		r := &batch[i]
		sh := &s.shards[wi.shard]
		for j := i - 1; j >= 0; j-- {
			if w[j].valid && w[j].h == wi.h && w[j].k == wi.k {
				wi.prev = j
				break
			}
		}
		var st limiter.State
		if pw := wi.prev; pw >= 0 {
			st, wi.inTable, wi.slot = w[pw].cur, w[pw].inTable, w[pw].slot
			wi.idx, wi.moves = w[pw].idx, w[pw].moves
		} else {
			var d int
			st, wi.inTable, d, wi.idx = sh.load(&wi.k, wi.h, nowMs)
			wi.moves = sh.t.moves
			dropped += d
		}
		next, reply, held, write := limiter.Check(st, nowMs, r.Policy, r.Cost)
		wi.cur = st
		if r.Role() == limiter.ModeCheck {
			out[i] = limiter.OutcomeFromReply(r.Policy, held, limiter.SourceMemory)
			continue
		}
		if write && !wi.inTable && !wi.slot {
			// A new entry: reserve room for it now, so that a full shard
			// is known before the batch decides.
			reserved := 0
			for j := 0; j < i; j++ {
				if w[j].valid && w[j].shard == wi.shard && w[j].reserved {
					reserved++
				}
			}
			if sh.t.n+reserved >= sh.capacity {
				dropped += sh.dropExpired(nowMs, fullScanBudget)
			}
			if sh.t.n+reserved >= sh.capacity {
				refused++
				out[i] = limiter.UnavailableOutcome(CapacityRetryAfter, limiter.CategoryCapacity, ErrFull)
				continue
			}
			wi.reserved, wi.slot = true, true
		}
		if write {
			wi.write, wi.next, wi.cur = true, next, next
			wi.held = held
		}
		out[i] = limiter.OutcomeFromReply(r.Policy, reply, limiter.SourceMemory)
	}
	// Phase 2: commit, or report the allowed ones as they stand.
	commit := limiter.Commits(batch, out)
	for i := range batch {
		wi := &w[i]
		if !wi.write {
			continue
		}
		if !commit || out[i].Kind != limiter.Evaluated {
			out[i] = limiter.OutcomeFromReply(batch[i].Policy, wi.held, limiter.SourceMemory)
			continue
		}
		sh := &s.shards[wi.shard]
		e := entryOf(wi.next)
		// The index the load found is still the key's unless a growth or
		// removal (an expiry, or an insert of this commit that grew the
		// table) moved it.
		if wi.inTable && wi.moves == sh.t.moves {
			sh.t.slots[wi.idx].e = e
		} else if j, found := sh.t.find(&wi.k, wi.h); found {
			sh.t.slots[j].e = e
		} else {
			sh.t.insert(&wi.k, wi.h, e)
		}
		sh.minExpiry = min(sh.minExpiry, wi.next.ExpiresAtMs)
		out[i].Decision.Consumed = true
	}
	for k := len(order) - 1; k >= 0; k-- {
		s.shards[order[k]].mu.Unlock()
	}
	s.report(dropped, refused)
}

// evaluateOne is Evaluate for a batch of one request (one descriptor: the
// common Envoy request), with the same outcomes and effects as the general
// path: one lock, one table lookup (the write goes to the slot the lookup
// found, or to the empty slot where it stopped when nothing has moved since),
// and no per-request work record. A batch of one commits exactly when its
// request allows (see limiter.Commits), so an allowed request consumes unless
// its reply is refused by OutcomeFromReply.
func (s *Store) evaluateOne(r *limiter.Request, o *limiter.Outcome, nowMs int64) {
	if err := r.Validate(); err != nil {
		*o = limiter.UnavailableOutcome(0, limiter.CategoryInvalidRequest, fmt.Errorf("memory store: %w", err))
		return
	}
	if nowMs < 0 || nowMs > limiter.MaxSafeInteger {
		*o = limiter.UnavailableOutcome(limiter.ClockUnsafeRetryAfter, limiter.CategoryClockUnsafe,
			fmt.Errorf("memory store: clock reads %dms since the epoch: %w", nowMs, limiter.ErrClockUnsafe))
		return
	}
	p := r.Policy
	k := key{subject: r.Subject, policy: p.ID(), revision: p.Revision(), alg: p.Algorithm()}
	h := hashKey(&k)
	sh := &s.shards[s.shardIndex(&r.Subject)]
	t := &sh.t
	dropped, refused := 0, 0
	sh.mu.Lock()
	// hint: where k is (found) or would be inserted (-1 once the table has
	// changed since the lookup).
	hint, found := t.find(&k, h)
	var st limiter.State
	if found {
		e := &t.slots[hint].e
		if nowMs > e.expiresAt { // Redis semantics: a key lives through its expiry millisecond
			t.remove(hint)
			dropped, found, hint = 1, false, -1
		} else {
			st = limiter.State{
				Exists: true, Schema: limiter.StateSchema, Algorithm: k.alg, PolicyID: k.policy, Revision: k.revision,
				LastObservedMs: e.lastObserved, A: e.a, B: e.b, C: e.c, ExpiresAtMs: e.expiresAt,
			}
		}
	}
	next, reply, held, write := limiter.Check(st, nowMs, p, r.Cost)
	switch {
	case r.Role() == limiter.ModeCheck:
		*o = limiter.OutcomeFromReply(p, held, limiter.SourceMemory)
	case !write:
		*o = limiter.OutcomeFromReply(p, reply, limiter.SourceMemory)
	case !found && t.n >= sh.capacity && s.full(sh, nowMs, &dropped):
		refused = 1
		*o = limiter.UnavailableOutcome(CapacityRetryAfter, limiter.CategoryCapacity, ErrFull)
	default:
		*o = limiter.OutcomeFromReply(p, reply, limiter.SourceMemory)
		if o.Kind != limiter.Evaluated {
			*o = limiter.OutcomeFromReply(p, held, limiter.SourceMemory)
			break
		}
		e := entryOf(next)
		if found {
			t.slots[hint].e = e
		} else {
			if dropped != 0 {
				hint = -1 // a removal moved slots
			}
			t.insertAt(hint, &k, h, e)
		}
		sh.minExpiry = min(sh.minExpiry, next.ExpiresAtMs)
		o.Decision.Consumed = true
	}
	sh.mu.Unlock()
	s.report(dropped, refused)
}

// full is the capacity check of a new entry on a shard with no room left:
// it drops up to fullScanBudget expired entries (adding them to dropped) and
// reports whether the shard is still full.
func (s *Store) full(sh *shard, nowMs int64, dropped *int) bool {
	*dropped += sh.dropExpired(nowMs, fullScanBudget)
	return sh.t.n >= sh.capacity
}

// report tells the Observer what one Evaluate call dropped and refused. It
// is called with no lock held.
func (s *Store) report(dropped, refused int) {
	if s.obs == nil {
		return
	}
	if dropped > 0 {
		s.obs.Expired(dropped)
	}
	for range refused {
		s.obs.Refused()
	}
}

// work is the per-request state of one Evaluate call.
type work struct {
	k     key
	h     uint64
	shard int
	valid bool
	// prev is the index of the latest earlier request of the batch on the
	// same state, or -1.
	prev int
	// cur is the state after this request's tentative cost (the state it
	// saw when it wrote nothing); next the state to write on commit.
	cur, next limiter.State
	write     bool
	held      limiter.Reply
	// inTable: the key has a live entry in the table, at idx when the
	// table's moves count is still moves. reserved: this request reserved a
	// new entry; slot: this or an earlier request on the same state did.
	inTable, reserved, slot bool
	idx                     int
	moves                   uint64
}

type scratch struct {
	work  []work
	order []int
}

func (s *Store) getScratch(n int) *scratch {
	sc := s.scratch.Get().(*scratch)
	if cap(sc.work) < n {
		sc.work = make([]work, n)
	}
	sc.work = sc.work[:n]
	return sc
}

func (s *Store) putScratch(sc *scratch) {
	clear(sc.work) // drop policy ID strings
	s.scratch.Put(sc)
}

func (s *Store) shardIndex(d *limiter.SubjectDigest) int {
	return int(binary.LittleEndian.Uint64(d[:8]) & s.mask)
}

// load returns the live state of k, whether it has a live entry and its
// index in the table. An expired entry is removed (it reads as no state) and
// counted in dropped.
func (sh *shard) load(k *key, h uint64, nowMs int64) (st limiter.State, live bool, dropped, idx int) {
	i, found := sh.t.find(k, h)
	if !found {
		return limiter.State{}, false, 0, 0
	}
	e := &sh.t.slots[i].e
	if nowMs > e.expiresAt { // Redis semantics: a key lives through its expiry millisecond
		sh.t.remove(i)
		return limiter.State{}, false, 1, 0
	}
	return limiter.State{
		Exists: true, Schema: limiter.StateSchema, Algorithm: k.alg, PolicyID: k.policy, Revision: k.revision,
		LastObservedMs: e.lastObserved, A: e.a, B: e.b, C: e.c, ExpiresAtMs: e.expiresAt,
	}, true, 0, i
}

func entryOf(st limiter.State) entry {
	return entry{lastObserved: st.LastObservedMs, a: st.A, b: st.B, c: st.C, expiresAt: st.ExpiresAtMs}
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
		used := t.used(i)
		if used && nowMs > s.e.expiresAt {
			// remove shifts a later slot into i: look at i again.
			t.remove(i)
			dropped++
			steps++
			continue
		}
		if used {
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
