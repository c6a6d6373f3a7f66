package memory

import (
	"context"
	"fmt"
	"slices"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

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
			st, wi.inTable, wi.hasRoom = w[pw].cur, w[pw].inTable, w[pw].hasRoom
			wi.idx, wi.moves = w[pw].idx, w[pw].moves
		} else {
			var d int
			st, wi.inTable, d, wi.idx = sh.load(&wi.k, wi.h, nowMs)
			wi.moves = sh.t.moves
			dropped += d
		}
		next, reply, uncommitted, write := limiter.Check(st, nowMs, r.Policy, r.Cost)
		wi.cur = st
		if !r.EffectiveRole().Consumes() {
			out[i] = limiter.OutcomeFromReply(r.Policy, uncommitted, limiter.SourceMemory)
			continue
		}
		if write && !wi.inTable && !wi.hasRoom {
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
			wi.reserved, wi.hasRoom = true, true
		}
		if write {
			wi.write, wi.next, wi.cur = true, next, next
			wi.uncommitted = uncommitted
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
			out[i] = limiter.OutcomeFromReply(batch[i].Policy, wi.uncommitted, limiter.SourceMemory)
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
	refused := 0
	sh.mu.Lock()
	// hint: where k is (found) or would be inserted (-1 once the table has
	// changed since the lookup).
	st, found, dropped, hint := sh.load(&k, h, nowMs)
	next, reply, uncommitted, write := limiter.Check(st, nowMs, p, r.Cost)
	switch {
	case !r.EffectiveRole().Consumes():
		*o = limiter.OutcomeFromReply(p, uncommitted, limiter.SourceMemory)
	case !write:
		*o = limiter.OutcomeFromReply(p, reply, limiter.SourceMemory)
	case !found && t.n >= sh.capacity && s.full(sh, nowMs, &dropped):
		refused = 1
		*o = limiter.UnavailableOutcome(CapacityRetryAfter, limiter.CategoryCapacity, ErrFull)
	default:
		*o = limiter.OutcomeFromReply(p, reply, limiter.SourceMemory)
		if o.Kind != limiter.Evaluated {
			*o = limiter.OutcomeFromReply(p, uncommitted, limiter.SourceMemory)
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
	cur, next   limiter.State
	write       bool
	uncommitted limiter.Reply
	// inTable: the key has a live entry in the table, at idx when the
	// table's moves count is still moves. reserved: this request reserved a
	// new entry; hasRoom: this or an earlier request on the same state did.
	inTable, reserved, hasRoom bool
	idx                        int
	moves                      uint64
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
