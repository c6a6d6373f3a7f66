package memory

import (
	"context"
	"fmt"
	"slices"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/algorithm"
)

// Evaluate implements limiter.Store: the batch is all or nothing. It reads
// the clock once, locks the shards of every request in ascending shard order
// (each once, so that concurrent batches cannot deadlock), checks every
// request in order against the stored state (a request on a state that an
// earlier request of the batch already touched sees that request's tentative
// cost), decides with limiter.Commits, writes the new states only when the
// batch commits (a request that limiter.Request.Charges: whatever it
// decides, its denial included), and unlocks. Decision.Source is limiter.SourceMemory.
//
// A batch evaluated after ctx is done gets Unavailable outcomes
// (limiter.CategoryDeadline) and changes nothing. A new subject refused for
// capacity (see the package comment) is an Unavailable outcome found in the
// check, so it blocks the batch as any failure of a fail-closed limit does.
//
// A batch of requests of concurrency policies alone (limiter.LeasesOnly) is
// evaluated on the lease sets (lease.go); pkg/limiter/leases sends them
// apart from the rate requests of their batch.
func (s *Store) Evaluate(ctx context.Context, batch []limiter.Request, out []limiter.Outcome) {
	out = out[:len(batch)]
	if len(batch) == 0 || limiter.FailIfEnded(ctx, out, "memory store") {
		return
	}
	if limiter.LeasesOnly(batch) {
		s.evaluateLeases(batch, out)
		return
	}
	nowMs := s.clock.Now().UnixMilli()
	if len(batch) == 1 {
		s.evaluateOne(&batch[0], &out[0], nowMs)
		return
	}
	s.evaluateBatch(batch, out, nowMs)
}

// evaluateBatch is Evaluate for a batch of several requests. It is a
// function of its own so that a batch of one, the common call, runs on a
// stack without its frame (2 KiB): a call's goroutine then grows its stack
// less often.
func (s *Store) evaluateBatch(batch []limiter.Request, out []limiter.Outcome, nowMs int64) {
	sc := s.getScratch(len(batch))
	defer s.putScratch(sc)
	b := run{s: s, batch: batch, out: out, w: sc.work, nowMs: nowMs}
	valid := 0
	for i := range batch {
		r, wi := &batch[i], &b.w[i]
		*wi = work{prev: -1}
		if o, bad := refused(r, nowMs); bad {
			out[i] = o
			continue
		}
		wi.valid, wi.k = true, keyOf(r)
		wi.h, wi.shard = hashKey(&wi.k), s.shardIndex(&r.Subject)
		valid++
	}
	if valid == 0 {
		return
	}
	// Lock every distinct shard, in ascending order.
	order := sc.order[:0]
	for i := range b.w {
		if b.w[i].valid {
			order = append(order, b.w[i].shard)
		}
	}
	slices.Sort(order)
	order = slices.Compact(order)
	sc.order = order
	for _, si := range order {
		s.shards[si].mu.Lock()
	}
	// Phase 1: check, consuming nothing.
	for i := range batch {
		if b.w[i].valid {
			b.check(i)
		}
	}
	// Phase 2: commit, or report the allowed ones as they stand.
	b.commit(limiter.Commits(batch, out))
	if b.overflowLocked {
		s.overflowMu.Unlock()
	}
	for k := len(order) - 1; k >= 0; k-- {
		s.shards[order[k]].mu.Unlock()
	}
	s.report(b.dropped)
	s.reportOverflow(batch, out)
	if b.refused && s.obs != nil {
		for i := range b.w {
			if b.w[i].refused {
				s.obs.Refused(batch[i].Policy)
			}
		}
	}
}

// run is one evaluateBatch call, its shards locked: the batch, its
// outcomes, a work record per request and what the call found.
type run struct {
	s     *Store
	batch []limiter.Request
	out   []limiter.Outcome
	w     []work
	nowMs int64
	// dropped counts the expired states dropped; refused, that a request
	// was refused for capacity; overflowLocked, that overflowMu is held.
	dropped                 int
	refused, overflowLocked bool
}

// lockOverflow takes overflowMu, after the shard locks, at most once: when
// a request without an entry meets a sketch.
func (b *run) lockOverflow() {
	if !b.overflowLocked {
		b.s.overflowMu.Lock()
		b.overflowLocked = true
	}
}

// check checks request i of the batch, consuming nothing: against the
// state an earlier request of the batch left, else the stored one (or the
// policy's sketch); a new entry reserves its room now, so that a full
// shard is known before the batch decides.
func (b *run) check(i int) {
	s, w, r, nowMs := b.s, b.w, &b.batch[i], b.nowMs
	wi := &w[i]
	sh := &s.shards[wi.shard]
	for j := i - 1; j >= 0; j-- {
		if w[j].valid && w[j].h == wi.h && w[j].k == wi.k {
			wi.prev = j
			break
		}
	}
	var st algorithm.State
	if pw := wi.prev; pw >= 0 {
		if w[pw].failed {
			wi.failed = true
			b.out[i] = b.out[pw]
			return
		}
		st, wi.inTable, wi.hasRoom = w[pw].cur, w[pw].inTable, w[pw].hasRoom
		wi.idx, wi.moves = w[pw].idx, w[pw].moves
		wi.sp, wi.overflow, wi.estimated = w[pw].sp, w[pw].overflow, w[pw].estimated
	} else {
		var d int
		st, wi.inTable, d, wi.idx = sh.load(&wi.k, wi.h, nowMs)
		wi.moves = sh.t.moves
		b.dropped += d
		if !wi.inTable && s.nSketches.Load() != 0 && !r.Reserves() {
			b.lockOverflow()
			if st, wi.failed = s.openSketchFor(&wi.spilled, r.Policy, &r.Subject, nowMs, false); wi.failed {
				b.out[i] = sketchClockUnsafe(r.Policy)
				return
			}
		}
	}
	next, reply, uncommitted, write := algorithm.CheckRequest(st, wi.sp.now(nowMs), r)
	wi.cur = st
	if write && r.EffectiveRole().Consumes() && !wi.inTable && !wi.hasRoom && !wi.overflow {
		if b.room(i) {
			wi.reserved, wi.hasRoom = true, true
		} else {
			// No room: the policy's sketch decides, from its own
			// estimate of the subject; it holds no reservations.
			if !r.Reserves() {
				b.lockOverflow()
				if st, wi.failed = s.openSketchFor(&wi.spilled, r.Policy, &r.Subject, nowMs, true); wi.failed {
					b.out[i] = sketchClockUnsafe(r.Policy)
					return
				}
			}
			if wi.sp.sk == nil {
				wi.failed = true
				b.refused, wi.refused = true, true
				b.out[i] = limiter.UnavailableOutcome(capacityRetryAfter, limiter.CategoryCapacity, errFull)
				return
			}
			wi.overflow = true
			next, reply, uncommitted, write = algorithm.CheckRequest(st, wi.sp.now(nowMs), r)
			wi.cur = st
		}
	}
	src := wi.source()
	if !r.EffectiveRole().Consumes() {
		b.out[i] = decided(r.Policy, uncommitted, src)
		return
	}
	switch {
	case write:
		wi.write, wi.next, wi.cur = true, next, next
		wi.uncommitted = uncommitted
	case wi.inTable && algorithm.PenaltyRecorded(st, next) && r.EffectiveRole().RecordsOffence():
		// An offence on a stored state: its block is written in phase 2
		// whatever the batch decides, and later requests on the state see
		// it.
		wi.penalty, wi.next, wi.cur = true, next, next
	case r.Charges():
		// A charge on a state already at its ceiling: nothing more to
		// record; the reply is what one more unit meets.
	default:
		// Denied: the limit's own denial unless an offence is recorded.
		reply = uncommitted
	}
	b.out[i] = decided(r.Policy, reply, src)
	b.out[i].Decision.Consumed = r.Charges() && b.out[i].Kind == limiter.Evaluated
}

// room reports whether request i's new entry has room in its shard, with
// the entries the requests before it reserved (shard.room), after dropping
// a bounded number of expired entries when it has none.
func (b *run) room(i int) bool {
	wi := &b.w[i]
	var res reservation
	for j := range i {
		if wj := &b.w[j]; wj.valid && wj.shard == wi.shard && wj.reserved {
			res.all++
			if wj.k.policy == wi.k.policy {
				res.own++
			}
			if wj.k.made {
				res.made++
			}
		}
	}
	sh := &b.s.shards[wi.shard]
	if sh.room(&wi.k, res) {
		return true
	}
	b.dropped += sh.dropExpired(b.nowMs, fullScanBudget)
	return sh.room(&wi.k, res)
}

// commit writes what the batch's requests checked, when commit says the
// batch commits (a charge and an offence whatever it says); the allowed
// requests of a batch that does not are reported as they stand.
func (b *run) commit(commit bool) {
	for i := range b.batch {
		wi, p := &b.w[i], b.batch[i].Policy
		sh := &b.s.shards[wi.shard]
		if wi.penalty {
			j := wi.idx
			if wi.moves != sh.t.moves {
				j, _ = sh.t.find(&wi.k, wi.h) // an inserted key grew the table: still present
			}
			sh.recordOffence(j, &wi.k, wi.next)
			continue
		}
		if !wi.write {
			continue
		}
		// A charge is written whatever the batch decides.
		if (!commit && !b.batch[i].Charges()) || b.out[i].Kind != limiter.Evaluated {
			b.out[i] = decided(p, wi.uncommitted, wi.source())
			continue
		}
		b.out[i].Decision.Consumed = true
		if wi.overflow {
			wi.sp.sk.add(&wi.sp.idx, wi.next, wi.sp.eff, p)
			continue
		}
		e := entryOf(wi.next)
		// The index the load found is still the key's unless a growth or
		// removal (an expiry, or an insert of this commit that grew the
		// table) moved it.
		if wi.inTable && wi.moves == sh.t.moves {
			sh.t.slots[wi.idx].e = e
		} else if j, found := sh.t.find(&wi.k, wi.h); found {
			sh.t.slots[j].e = e
		} else {
			sh.insertAt(-1, &wi.k, wi.h, e)
		}
		sh.keepLog(&wi.k, &wi.next)
		sh.minExpiry = min(sh.minExpiry, wi.next.ExpiresAtMs)
	}
}

// refused is the outcome of a request the store cannot evaluate at nowMs
// (its clock reading, Unix ms): one that fails limiter.Request.Validate,
// or any request while the clock reads outside [0, MaxSafeInteger].
func refused(r *limiter.Request, nowMs int64) (limiter.Outcome, bool) {
	if err := r.Validate(); err != nil {
		return limiter.UnavailableOutcome(0, limiter.CategoryInvalidRequest, fmt.Errorf("memory store: %w", err)), true
	}
	if nowMs < 0 || nowMs > limiter.MaxSafeInteger {
		return limiter.UnavailableOutcome(limiter.ClockUnsafeRetryAfter, limiter.CategoryClockUnsafe,
			fmt.Errorf("memory store: clock reads %dms since the epoch: %w", nowMs, limiter.ErrClockUnsafe)), true
	}
	return limiter.Outcome{}, false
}

// decided is algorithm.OutcomeFromReply from src; a decision of the overflow
// sketch is an estimate (limiter.Approximate).
func decided(p *limiter.Policy, r algorithm.Reply, src limiter.Source) limiter.Outcome {
	o := algorithm.OutcomeFromReply(p, r, src)
	if src == limiter.SourceMemoryOverflow && o.Kind == limiter.Evaluated {
		o.Decision.Certainty = limiter.Approximate
	}
	return o
}

// report tells the Observer what one Evaluate call dropped. It is called
// with no lock held.
func (s *Store) report(dropped int) {
	if s.obs != nil && dropped > 0 {
		s.obs.Expired(dropped)
	}
}

// reportOverflow tells the Observer which decisions of a batch its
// policies' sketches made. It is called with no lock held.
func (s *Store) reportOverflow(batch []limiter.Request, out []limiter.Outcome) {
	if s.obs == nil {
		return
	}
	for i := range out {
		if out[i].Kind == limiter.Evaluated && out[i].Decision.Source == limiter.SourceMemoryOverflow {
			s.obs.Overflow(batch[i].Policy.Label())
		}
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
	cur, next algorithm.State
	write     bool
	// penalty: an offence whose block (next's penalty fields and expiry)
	// is written to the entry whatever the batch decides.
	penalty     bool
	uncommitted algorithm.Reply
	// inTable: the key has a live entry in the table, at idx when the
	// table's moves count is still moves. reserved: this request reserved a
	// new entry.
	inTable, reserved bool
	idx               int
	moves             uint64
	spilled
	// failed: the request got a failure outcome, which later requests on
	// the same state repeat.
	failed bool
	// refused: this request was refused for capacity (its later requests
	// on the same state repeat the outcome and are not counted again).
	refused bool
}

// spilled is what a request knows of its policy's sketch: all that
// evaluateOne needs of a work, in a tenth of its size (a smaller frame on
// every call's stack).
type spilled struct {
	// sp is the policy's sketch when the key has no entry and the sketch
	// remembers something (or must decide). overflow: the write goes to
	// the sketch (no room for an entry). estimated: the state came from the
	// sketch's estimate. hasRoom: this or an earlier request on the same
	// state reserved a new entry.
	sp                           spill
	overflow, estimated, hasRoom bool
}

// source is where the decision of w comes from: the sketch when it decides
// from the sketch's estimate and no exact entry takes over.
func (w *spilled) source() limiter.Source {
	if w.overflow || (w.estimated && !w.hasRoom) {
		return limiter.SourceMemoryOverflow
	}
	return limiter.SourceMemory
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
