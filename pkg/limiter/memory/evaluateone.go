package memory

import (
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/algorithm"
)

// evaluateOne is Evaluate for a batch of one request (one descriptor: the
// common Envoy request), with the same outcomes and effects as the general
// path: one lock, one table lookup (the write goes to the slot the lookup
// found, or to the empty slot where it stopped when nothing has moved since),
// and no per-request work record. A batch of one commits exactly when its
// request allows (see limiter.Commits), so an allowed request consumes unless
// its reply is refused by OutcomeFromReply.
func (s *Store) evaluateOne(r *limiter.Request, o *limiter.Outcome, nowMs int64) {
	if refusal, bad := refused(r, nowMs); bad {
		*o = refusal
		return
	}
	p := r.Policy
	k := keyOf(r)
	h := hashKey(&k)
	sh := &s.shards[s.shardIndex(&r.Subject)]
	t := &sh.t
	refused := false
	sh.mu.Lock()
	// hint: where k is (found) or would be inserted (-1 once the table has
	// changed since the lookup).
	st, found, dropped, hint := sh.load(&k, h, nowMs)
	// A subject without an entry may meet its policy's sketch: wo holds
	// the sketch fields, and overflowMu is taken after the shard lock.
	var wo spilled
	overflowLocked, failed := false, false
	if !found && s.nSketches.Load() != 0 && !r.Reserves() {
		s.overflowMu.Lock()
		overflowLocked = true
		st, failed = s.openSketchFor(&wo, p, &r.Subject, nowMs, false)
	}
	next, reply, uncommitted, write := algorithm.CheckRequest(st, wo.sp.now(nowMs), r)
	room := true
	if !failed && write && !found && r.EffectiveRole().Consumes() {
		if room = sh.room(&k, reservation{}); !room {
			dropped += sh.dropExpired(nowMs, fullScanBudget)
			room = sh.room(&k, reservation{})
		}
		if dropped != 0 {
			hint = -1 // a removal moved slots
		}
		if !room && !r.Reserves() { // a sketch holds no reservations
			if !overflowLocked {
				s.overflowMu.Lock()
				overflowLocked = true
			}
			if st, failed = s.openSketchFor(&wo, p, &r.Subject, nowMs, true); !failed {
				wo.overflow = wo.sp.sk != nil
				next, reply, uncommitted, write = algorithm.CheckRequest(st, wo.sp.now(nowMs), r)
			}
		}
	}
	switch {
	case failed:
		*o = sketchClockUnsafe(p)
	case !r.EffectiveRole().Consumes():
		*o = decided(p, uncommitted, wo.source())
	case !write && found && r.EffectiveRole().RecordsOffence() && algorithm.PenaltyRecorded(st, next):
		// An offence: its block is written whatever the batch decides.
		sh.recordOffence(hint, &k, next)
		*o = decided(p, reply, wo.source())
	case !write && r.Charges():
		// A charge on a state already at its ceiling: nothing more to
		// record; the reply is what one more unit meets.
		*o = decided(p, reply, wo.source())
		o.Decision.Consumed = o.Kind == limiter.Evaluated
	case !write:
		// Denied (an offence with no stored state records nothing: the
		// limit's own denial).
		*o = decided(p, uncommitted, wo.source())
	case wo.overflow:
		*o = decided(p, reply, limiter.SourceMemoryOverflow)
		if o.Kind != limiter.Evaluated {
			*o = decided(p, uncommitted, limiter.SourceMemoryOverflow)
			break
		}
		wo.sp.sk.add(&wo.sp.idx, next, wo.sp.eff, p)
		o.Decision.Consumed = true
	case !found && !room:
		refused = true
		*o = limiter.UnavailableOutcome(capacityRetryAfter, limiter.CategoryCapacity, errFull)
	default:
		*o = algorithm.OutcomeFromReply(p, reply, limiter.SourceMemory)
		if o.Kind != limiter.Evaluated {
			*o = algorithm.OutcomeFromReply(p, uncommitted, limiter.SourceMemory)
			break
		}
		e := entryOf(next)
		if found {
			t.slots[hint].e = e
		} else {
			sh.insertAt(hint, &k, h, e)
		}
		sh.keepLog(&k, &next)
		sh.minExpiry = min(sh.minExpiry, next.ExpiresAtMs)
		o.Decision.Consumed = true
	}
	if overflowLocked {
		s.overflowMu.Unlock()
	}
	sh.mu.Unlock()
	s.report(dropped)
	if refused && s.obs != nil {
		s.obs.Refused(p)
	}
	if s.obs != nil && o.Kind == limiter.Evaluated && o.Decision.Source == limiter.SourceMemoryOverflow {
		s.obs.Overflow(p.Label())
	}
}

// openSketchFor is openSketch for w: it records in w whether the state came
// from the sketch's estimate, and reports failed when the sketch's clock
// check failed. Called with overflowMu held.
func (s *Store) openSketchFor(w *spilled, p *limiter.Policy, d *limiter.SubjectDigest, nowMs int64, create bool) (st algorithm.State, failed bool) {
	st, ok := s.openSketch(&w.sp, p, d, nowMs, create)
	w.estimated = w.estimated || st.Exists
	return st, !ok
}
