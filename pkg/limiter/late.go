package limiter

import (
	"slices"
	"sync"
)

// LateAnswer tells what became of the requests of one call that a store
// answered Indeterminate because their answer had not come by the
// deadline, once it does come. A store that still receives such an answer
// gives each of those outcomes an Err made by Awaited, and Resolves the
// LateAnswer when the answer comes or is known lost. A caller that would
// act on an Indeterminate outcome (send the request again) can wait for it
// instead (errors.As(o.Err, &awaited)). Safe for concurrent use.
type LateAnswer struct {
	once sync.Once
	done chan struct{}
	outs []Outcome
}

// NewLateAnswer returns an unresolved LateAnswer.
func NewLateAnswer() *LateAnswer { return &LateAnswer{done: make(chan struct{})} }

// Resolve records outs, the call's outcomes in the order of its Awaited
// indices, as the store would have answered them in time: Evaluated when
// the request was decided (and so applied as its decision says),
// Unavailable when it is known not to have been applied, Indeterminate
// when its answer is lost. Only the first Resolve counts.
func (l *LateAnswer) Resolve(outs []Outcome) {
	l.once.Do(func() {
		l.outs = slices.Clone(outs)
		close(l.done)
	})
}

// Awaited returns the error of the Indeterminate outcome of the call's k-th
// request: cause, which it wraps, awaiting l.
func (l *LateAnswer) Awaited(k int, cause error) *Awaited {
	return &Awaited{late: l, k: k, cause: cause}
}

// Awaited is the error of an Indeterminate outcome whose answer its store
// still awaits (LateAnswer).
type Awaited struct {
	late  *LateAnswer
	k     int
	cause error
}

func (p *Awaited) Error() string { return p.cause.Error() }

func (p *Awaited) Unwrap() error { return p.cause }

// Resolved returns the request's outcome once its store has resolved it
// (LateAnswer.Resolve); ok is false until then.
func (p *Awaited) Resolved() (o Outcome, ok bool) {
	select {
	case <-p.late.done:
	default:
		return Outcome{}, false
	}
	if p.k < 0 || p.k >= len(p.late.outs) {
		return IndeterminateOutcome(0, p.cause), true
	}
	return p.late.outs[p.k], true
}
