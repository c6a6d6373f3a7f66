package journal

import (
	"context"
	"errors"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// Run replays the journal while it holds entries, until ctx is done (see
// the package doc). Start it once, in a goroutine of its own.
func (j *Journal) Run(ctx context.Context) {
	wait := j.retryMin
	for {
		if j.Len() == 0 {
			select {
			case <-ctx.Done():
				return
			case <-j.kick:
			}
			if j.Len() == 0 {
				continue
			}
			// The store has just failed: not at once.
			if !j.sleep(ctx, j.retryMin, false) {
				return
			}
			wait = j.retryMin
		}
		removed, kept, awaiting := j.replayOnce(ctx)
		switch {
		case kept == 0:
			wait = j.retryMin
			continue
		case removed > 0 || kept == awaiting:
			// The store answers some, or failed none (late answers are
			// still to come): try the rest soon.
			wait = j.retryMin
		}
		if !j.sleep(ctx, j.retryMin, false) || !j.sleep(ctx, wait-j.retryMin, true) {
			return
		}
		wait = min(2*wait, j.retryMax)
	}
}

// sleep waits d, or until ctx is done (false), or with kickable until Run
// is woken.
func (j *Journal) sleep(ctx context.Context, d time.Duration, kickable bool) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	var kick <-chan struct{}
	if kickable {
		kick = j.kick
	}
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	case <-kick:
	}
	return true
}

// stopPoll is how often Stop looks for the late answers it awaits.
const stopPoll = 10 * time.Millisecond

// verdict is what a replay made of one entry.
type verdict uint8

const (
	keep verdict = iota
	replayed
	dropIncompatible
	dropInvalid
	dropExpired
	numVerdicts
)

// reason is the Reason* of a dropping verdict.
func (v verdict) reason() string {
	switch v {
	case dropIncompatible:
		return reasonIncompatible
	case dropInvalid:
		return reasonInvalid
	}
	return reasonExpired
}

// verdictOf is what the store's outcome o of a replay makes of its entry.
func verdictOf(o *limiter.Outcome) verdict {
	switch {
	case o.Kind == limiter.Evaluated:
		return replayed
	case o.Kind == limiter.Incompatible:
		return dropIncompatible
	case o.Kind == limiter.Unavailable && o.Category == limiter.CategoryInvalidRequest:
		return dropInvalid
	}
	return keep
}

// replayOnce sends the oldest entries, up to replayBatch, to the store in
// one batch bounded by the replay timeout, and removes those it applied
// or that cannot be applied. An entry whose late answer is awaited is not
// sent: it is removed when that answer says it was applied, sent when it
// says it was not (or after awaitMax), kept meanwhile; so is an entry
// whose replay the store answers Indeterminate awaiting its answer. It
// returns how many it removed and how many it kept, of which awaiting a
// late answer.
func (j *Journal) replayOnce(ctx context.Context) (removed, kept, awaiting int) {
	j.replaying.Lock()
	defer j.replaying.Unlock()
	j.mu.Lock()
	n := min(j.q.len(), replayBatch)
	ents := make([]entry, n)
	for k := range ents {
		ents[k] = *j.q.at(k)
	}
	j.mu.Unlock()
	if n == 0 {
		return 0, 0, 0
	}
	verdicts := make([]verdict, n)
	reqs := make([]limiter.Request, 0, n)
	idx := make([]int, 0, n)
	now := j.clock.Now().UnixMilli()
	for k := range ents {
		e := &ents[k]
		if e.awaited != nil {
			o, ok := e.awaited.Resolved()
			switch {
			case !ok && now-e.awaitedSince() <= awaitMax.Milliseconds():
				verdicts[k] = keep
				awaiting++
				continue
			case ok && o.Kind != limiter.Indeterminate && !unapplied(&o):
				// Applied (Evaluated) or never applicable.
				verdicts[k] = verdictOf(&o)
				continue
			}
			e.awaited = nil // not applied, or unknown: replayed
		}
		if e.kind == kindRelease && now-e.at > e.policy.LeaseTTLMillis() {
			verdicts[k] = dropExpired
			continue
		}
		reqs = append(reqs, e.request())
		idx = append(idx, k)
	}
	if len(reqs) > 0 {
		rctx, cancel := context.WithTimeout(ctx, j.timeout)
		outs := make([]limiter.Outcome, len(reqs))
		j.store.Evaluate(rctx, reqs, outs)
		cancel()
		for m, k := range idx {
			o := &outs[m]
			verdicts[k] = verdictOf(o)
			var awaited *limiter.Awaited
			if o.Kind == limiter.Indeterminate && errors.As(o.Err, &awaited) {
				// Kept; the late answer tells whether this replay
				// applied it.
				ents[k].await(awaited, now)
				awaiting++
			}
		}
	}

	// Only a replay removes entries, and only from the front: the n front
	// entries are still ents. The kept ones move, in order, to the back of
	// that run, and the others are dropped from the front.
	var counts [numKinds][numVerdicts]int
	j.mu.Lock()
	defer j.mu.Unlock()
	w := n
	for k := n - 1; k >= 0; k-- {
		e := &ents[k]
		v := verdicts[k]
		if v == keep {
			w--
			*j.q.at(w) = *e
			continue
		}
		counts[e.kind][v]++
	}
	j.q.drop(w)
	j.held.Store(int64(j.q.len()))
	for k := range numKinds {
		for v := replayed; v < numVerdicts; v++ {
			switch c := counts[k][v]; {
			case c == 0:
			case v == replayed:
				j.observer.Replayed(k, c)
			default:
				j.observer.Dropped(k, v.reason(), c)
			}
		}
	}
	j.observer.Entries(j.q.len())
	return w, n - w, awaiting
}

// Stop replays what the journal holds until the store fails a replay or
// ctx is done; then, with Config.File, it writes what is left to the file
// and empties the journal. It returns the entries left (written to the
// file when saved) and the error that kept them from the file. Stop Run
// first: what a settlement adds after Stop stays in memory.
func (j *Journal) Stop(ctx context.Context) (left int, saved bool, err error) {
	for j.Len() > 0 && ctx.Err() == nil {
		removed, kept, awaiting := j.replayOnce(ctx)
		if removed > 0 {
			continue
		}
		if kept > awaiting || !j.sleep(ctx, stopPoll, false) {
			break // the store fails, or ctx is done
		}
	}
	if j.file == "" {
		return j.Len(), false, nil
	}
	return j.save()
}
