package memory

import (
	"encoding/binary"
	"fmt"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/algorithm"
)

// Overflow sketches: how a policy's new subjects are limited when the store
// cannot give them an exact entry (see the package comment).
//
// A sketch has 4 rows of 2^bits cells. Its over-count, for a subject, is at
// most the units of the other subjects that share its cell in the row that
// has the fewest: with N units counted in the sketch's window and w cells a
// row, each cell holds N/w of other subjects' units on average, and the
// rows hash independent words of the digest, so the estimate exceeds the
// subject's own usage by more than e·N/w with probability at most e^-4
// (under 2%); conservative updates only lower it. The width is therefore
// what keeps a flooded policy limited rather than closed to its new
// subjects. Beside its minimum (2,048 cells a row), a sketch takes, when it
// is made, the widest power of two that is at most maxSketchBits a row
// (rows as wide as half of MaxEntries, rounded up: a flood that fills a
// policy's share and as much again counts about one unit a cell) and whose
// memory beyond the minimum is at most half of what the pool has left (the
// fairness rule of the entries, applied to the pool, so that the next
// flooded policy still gets a wide sketch). The pool is
// SketchPoolBytesPerEntry bytes per entry of MaxEntries, at least
// MinSketchPoolBytes; a sketch gives its part back when it is freed. All
// the sketches together hold at most MaxSketches × MinSketchBytes plus the
// pool.
const (
	sketchRows = 4
	// minSketchBits and maxSketchBits bound a row's width: 2^11 to 2^20
	// cells.
	minSketchBits = 11
	maxSketchBits = 20
	cellBytes     = 16
	// minSketchBytes is the memory of the narrowest sketch: 4 rows of
	// 2,048 cells of 16 bytes. Every sketch takes at least this.
	minSketchBytes = sketchRows << minSketchBits * cellBytes
	// sketchPoolBytesPerEntry and MinSketchPoolBytes size the pool of
	// memory the sketches may take beyond MinSketchBytes each: this many
	// bytes per entry of MaxEntries, at least MinSketchPoolBytes.
	sketchPoolBytesPerEntry = 8
	minSketchPoolBytes      = 4 << 20
	// DefaultMaxSketches bounds how many policies can be in overflow at
	// once (8 MiB of sketches at their minimum).
	DefaultMaxSketches = 64
	// madeSketchDivisor: the policies made at request time (limiter.Policy.Group
	// set) hold at most 1/madeSketchDivisor of MaxSketches, at least one,
	// each at the minimum width: the configured policies keep the rest and
	// the whole pool.
	madeSketchDivisor = 8
)

// sketchSizing derives, from the entry bound, the pool of sketch memory
// beyond MinSketchBytes each and the widest row (log2 of its cells): half
// of maxEntries rounded up to a power of two, within the bounds.
func sketchSizing(maxEntries int) (pool int64, maxBits uint8) {
	pool = max(int64(maxEntries)*sketchPoolBytesPerEntry, minSketchPoolBytes)
	maxBits = minSketchBits
	for maxBits < maxSketchBits && 1<<maxBits < maxEntries/2 {
		maxBits++
	}
	return pool, maxBits
}

// sketchBytes is the memory of a sketch of rows of 2^bits cells.
func sketchBytes(bits uint8) int64 { return int64(sketchRows) << bits * cellBytes }

// sketchKey identifies a sketch: like an exact entry, a new revision or
// algorithm starts fresh.
type sketchKey struct {
	policy   string
	revision uint32
	alg      limiter.Algorithm
}

// cell is one counter of a sketch. A window algorithm (Policy.SketchWindows
// 1 or 2): a is the units admitted in the sketch's window, b the previous
// window's (two windows). A deficit algorithm (token bucket, GCRA): a is the
// deficit (Policy.Deficit: in the policy's scaled units, a unit of cost is
// period units, amount units refill per millisecond) as of time b.
type cell struct{ a, b int64 }

// sketch is a count-min sketch of one policy's overflow subjects. Every
// subject maps to one cell per row; a cell holds, for every subject mapped
// to it, at least what that subject's exact state would hold (units
// admitted, or deficit), so the minimum over the rows is an upper bound of
// the subject's own usage: a decision from it admits only what the exact
// algorithm would admit for that subject alone. Updates are conservative
// (a cell rises only to the subject's new estimate), which keeps the bound
// and over-counts less. Guarded by Store.overflowMu.
type sketch struct {
	// The parameters the cells are in: a change restarts the sketch.
	windowMs, limit, amount, period int64
	// epoch is the window id the counts belong to (fixed and sliding),
	// epochEnd that window's end (Policy.WindowAt).
	epoch, epochEnd int64
	// lastObserved is the latest effective time that changed the sketch,
	// for the clock-regression rule; liveUntil is when every cell reads 0
	// again (nothing left to remember).
	lastObserved, liveUntil int64
	// bits is log2 of a row's width; made: the sketch of a policy made at
	// request time (it counts against madeSketchDivisor).
	bits  uint8
	made  bool
	cells []cell // sketchRows rows of 2^bits cells
}

// newSketch makes a sketch for a policy (made at request time or not),
// taking its width from the pool (see the constants), and counts it.
// Called with overflowMu held.
func (s *Store) newSketch(made bool) *sketch {
	bits := uint8(minSketchBits)
	if !made {
		for bits < s.maxSketchBits && sketchExtra(bits+1) <= (s.sketchPool-s.sketchPoolUsed)/2 {
			bits++
		}
	}
	s.sketchPoolUsed += sketchExtra(bits)
	s.sketchBytes.Add(sketchBytes(bits))
	if made {
		s.madeSketches++
	}
	return &sketch{bits: bits, made: made, cells: make([]cell, sketchRows<<bits)}
}

// sketchExtra is what a sketch of rows of 2^bits cells takes from the pool:
// its memory beyond MinSketchBytes.
func sketchExtra(bits uint8) int64 { return sketchBytes(bits) - minSketchBytes }

// freeSketch uncounts sk, which is dropped. Called with overflowMu held.
func (s *Store) freeSketch(sk *sketch) {
	s.sketchPoolUsed -= sketchExtra(sk.bits)
	s.sketchBytes.Add(-sketchBytes(sk.bits))
	if sk.made {
		s.madeSketches--
	}
}

// rowsOf returns the cell of each row for a subject: each row hashes one
// 64-bit word of the digest (an HMAC, hence uniform and independent).
func (sk *sketch) rowsOf(d *limiter.SubjectDigest) [sketchRows]int {
	var idx [sketchRows]int
	mult := [sketchRows]uint64{0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0xD6E8FEB86659FD93}
	for r := range idx {
		w := binary.LittleEndian.Uint64(d[r*8:])
		idx[r] = r<<sk.bits + int((w*mult[r])>>(64-sk.bits))
	}
	return idx
}

// fit makes the sketch's parameters those of p, clearing it when the
// cells mean something else under them: another window or refill rate, or
// another capacity of a deficit (window counts stay counts under another
// limit, as exact states do).
func (sk *sketch) fit(p *limiter.Policy) {
	amount, period := p.Refill()
	same := sk.windowMs == p.WindowMillis() && sk.amount == amount && sk.period == period
	if same && (sk.limit == p.Limit() || algorithm.SketchWindows(p) != 0) {
		sk.limit = p.Limit()
		return
	}
	sk.windowMs, sk.limit, sk.amount, sk.period = p.WindowMillis(), p.Limit(), amount, period
	sk.restart()
}

// live reports whether any cell can read non-zero at nowMs.
func (sk *sketch) live(nowMs int64) bool { return nowMs < sk.liveUntil }

// effectiveNow applies the clock rule of algorithm.Check to the sketch: a
// small backward step clamps to lastObserved, a larger one is unsafe.
func (sk *sketch) effectiveNow(nowMs int64, p *limiter.Policy) (int64, bool) {
	if nowMs >= sk.lastObserved {
		return nowMs, true
	}
	if sk.lastObserved-nowMs > p.MaxClockRegressionMillis() {
		return 0, false
	}
	return sk.lastObserved, true
}

// rotate moves the window counts to the window of effMs (window
// algorithms; deficit cells decay lazily). A calendar window's id is its
// period's start, which grows with its periods as an index does.
func (sk *sketch) rotate(effMs int64, p *limiter.Policy) {
	windows := algorithm.SketchWindows(p)
	if windows == 0 {
		return
	}
	w, end := algorithm.WindowAt(p, effMs)
	if w >= sk.epoch {
		sk.epochEnd = end
	}
	switch {
	case w == sk.epoch:
	case w == sk.epoch+1 && windows == 2:
		for i := range sk.cells {
			sk.cells[i] = cell{b: sk.cells[i].a}
		}
	case w > sk.epoch:
		clear(sk.cells)
	}
	sk.epoch = max(sk.epoch, w)
}

// deficit is a deficit cell's deficit at effMs, refilled since its time.
func (sk *sketch) deficit(c cell, effMs int64) int64 {
	if c.a == 0 {
		return 0
	}
	elapsed := max(0, effMs-c.b)
	// Compare before multiplying: a long idle time never overflows.
	if elapsed >= algorithm.CeilDiv(c.a, sk.amount) {
		return 0
	}
	return c.a - elapsed*sk.amount
}

// state returns the state the subject whose cells are idx has at most: the
// state algorithm.Check decides with. It reads as no state when every
// estimate is 0. The sketch must have been rotated to effMs.
func (sk *sketch) state(idx *[sketchRows]int, effMs int64, p *limiter.Policy) algorithm.State {
	var lo, lo2 int64 = -1, -1
	for _, i := range idx {
		c := sk.cells[i]
		a, b := c.a, c.b
		if algorithm.SketchWindows(p) == 0 {
			a, b = sk.deficit(c, effMs), 0
		}
		if lo < 0 || a < lo {
			lo = a
		}
		if lo2 < 0 || b < lo2 {
			lo2 = b
		}
	}
	if lo == 0 && lo2 == 0 {
		return algorithm.State{}
	}
	if algorithm.SketchWindows(p) == 0 {
		return algorithm.DeficitState(p, lo, effMs)
	}
	return algorithm.State{
		Exists: true, Schema: algorithm.StateSchema, Algorithm: p.Algorithm(), PolicyID: p.ID(), Revision: p.Revision(),
		LastObservedMs: effMs, Epoch: sk.epoch, Level: lo, Carry: lo2,
	}
}

// add records next, the state algorithm.Check computed for the subject of
// idx from state's answer, raising each of its cells to it at least.
func (sk *sketch) add(idx *[sketchRows]int, next algorithm.State, effMs int64, p *limiter.Policy) {
	sk.lastObserved = max(sk.lastObserved, effMs)
	windows := algorithm.SketchWindows(p)
	switch windows {
	case 0:
		d := algorithm.Deficit(p, next, effMs)
		for _, i := range idx {
			sk.cells[i] = cell{a: max(sk.deficit(sk.cells[i], effMs), d), b: effMs}
		}
		if d > 0 {
			sk.liveUntil = max(sk.liveUntil, effMs+algorithm.CeilDiv(d, sk.amount))
		}
	default:
		for _, i := range idx {
			sk.cells[i].a = max(sk.cells[i].a, next.Level)
		}
		ends := sk.epochEnd + (windows-1)*sk.windowMs
		sk.liveUntil = max(sk.liveUntil, ends)
	}
}

// spill is how a request whose subject has no entry uses its policy's
// sketch: sk is nil when it does not.
type spill struct {
	sk  *sketch
	idx [sketchRows]int
	// eff is the sketch's effective now, the time the request is decided at.
	eff int64
}

// now is the time to decide at: the sketch's effective now, or nowMs.
func (sp *spill) now(nowMs int64) int64 {
	if sp.sk != nil {
		return sp.eff
	}
	return nowMs
}

// openSketch looks up the sketch of p for a subject d with no entry, and
// returns the subject's state as the sketch bounds it. With create, a
// missing sketch is made (when the bound on sketches allows: sp.sk stays
// nil otherwise); without, a sketch that remembers nothing is left out.
// ok is false when the clock stepped back beyond the policy's max clock
// regression from the sketch's last change. Called with overflowMu held.
func (s *Store) openSketch(sp *spill, p *limiter.Policy, d *limiter.SubjectDigest, nowMs int64, create bool) (st algorithm.State, ok bool) {
	k := sketchKey{policy: p.ID(), revision: p.Revision(), alg: p.Algorithm()}
	sk := s.sketches[k]
	if sk == nil {
		made := p.Group() != ""
		if !create || !s.roomForSketch(made, nowMs) {
			return algorithm.State{}, true
		}
		sk = s.newSketch(made)
		s.sketches[k] = sk
		s.nSketches.Store(int32(len(s.sketches)))
	}
	sk.fit(p)
	if !sk.live(max(nowMs, sk.lastObserved)) {
		if !create {
			return algorithm.State{}, true
		}
		if nowMs < sk.lastObserved {
			sk.restart() // nothing to remember: forget its clock too
		}
	}
	eff, ok := sk.effectiveNow(nowMs, p)
	if !ok {
		return algorithm.State{}, false
	}
	sk.rotate(eff, p)
	sp.sk, sp.eff, sp.idx = sk, eff, sk.rowsOf(d)
	return sk.state(&sp.idx, eff, p), true
}

// roomForSketch reports whether one more sketch, of a policy made at
// request time or not, fits under the bounds (MaxSketches, and for the
// first kind their share of it), first dropping sketches that remember
// nothing at nowMs. Called with overflowMu held.
func (s *Store) roomForSketch(made bool, nowMs int64) bool {
	fits := func() bool {
		return len(s.sketches) < s.maxSketches && (!made || s.madeSketches < max(1, s.maxSketches/madeSketchDivisor))
	}
	if fits() {
		return true
	}
	s.dropIdleSketches(nowMs)
	return fits()
}

// dropIdleSketches drops the sketches that read 0 everywhere at nowMs.
// Called with overflowMu held.
func (s *Store) dropIdleSketches(nowMs int64) {
	for k, sk := range s.sketches {
		if !sk.live(max(nowMs, sk.lastObserved)) {
			delete(s.sketches, k)
			s.freeSketch(sk)
		}
	}
	s.nSketches.Store(int32(len(s.sketches)))
}

// restart clears the sketch, keeping its parameters.
func (sk *sketch) restart() {
	clear(sk.cells)
	sk.epoch, sk.epochEnd, sk.lastObserved, sk.liveUntil = 0, 0, 0, 0
}

// sketchClockUnsafe is the outcome of a sketch whose clock check failed.
func sketchClockUnsafe(p *limiter.Policy) limiter.Outcome {
	return limiter.UnavailableOutcome(limiter.ClockUnsafeRetryAfter, limiter.CategoryClockUnsafe,
		fmt.Errorf("memory store: policy %s overflow sketch: %w", p.ID(), limiter.ErrClockUnsafe))
}
