package journal

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/leases"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/memory"
)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// faulty is a store that fails as a test says, in front of a memory store
// (behind the leases wrapper, as the service runs it) that holds what was
// applied. It records every request it was sent.
type faulty struct {
	inner limiter.Store
	mu    sync.Mutex
	// fail, when not zero, answers every request sent (nothing applied);
	// failIf, when set, decides per request (a zero Outcome: applied).
	fail   limiter.Outcome
	failIf func(r *limiter.Request) limiter.Outcome
	sent   []limiter.Request
	calls  int
}

func newFaulty(t testing.TB, clock limiter.Clock) *faulty {
	t.Helper()
	m, err := memory.New(memory.Config{Clock: clock, MaxEntries: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	return &faulty{inner: leases.New(m, m)}
}

func (f *faulty) Evaluate(ctx context.Context, batch []limiter.Request, out []limiter.Outcome) {
	f.mu.Lock()
	f.calls++
	f.sent = append(f.sent, batch...)
	fail, failIf := f.fail, f.failIf
	f.mu.Unlock()
	if fail.Kind != 0 {
		for i := range batch {
			out[i] = fail
		}
		return
	}
	if failIf == nil {
		f.inner.Evaluate(ctx, batch, out)
		return
	}
	var p limiter.Pending
	for i := range batch {
		out[i] = failIf(&batch[i])
	}
	p.Evaluate(ctx, batch, out, f.inner.Evaluate)
}

// set makes the store fail every request with o (the zero Outcome: heal).
func (f *faulty) set(o limiter.Outcome) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail, f.failIf = o, nil
}

// setIf makes the store fail the requests fn answers.
func (f *faulty) setIf(fn func(r *limiter.Request) limiter.Outcome) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail, f.failIf = limiter.Outcome{}, fn
}

// sentSince returns the requests sent from the n-th on.
func (f *faulty) sentSince(n int) []limiter.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.sent[n:])
}

func (f *faulty) sentLen() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.sent)
}

// recorded is what the memory store recorded for subject on p: its limit
// less what a check reads as remaining.
func (f *faulty) recorded(t testing.TB, p *limiter.Policy, subject limiter.SubjectDigest) int64 {
	t.Helper()
	out := make([]limiter.Outcome, 1)
	f.inner.Evaluate(context.Background(), []limiter.Request{{Policy: p, Subject: subject, Cost: 1, Role: limiter.RoleCheck}}, out)
	if out[0].Kind != limiter.Evaluated {
		t.Fatalf("reading %s: %v (%v)", p.ID(), out[0].Kind, out[0].Err)
	}
	return p.Limit() - out[0].Decision.Remaining
}

// Fault shapes.
var (
	errDown         = errors.New("test: store down")
	outUnavailable  = limiter.UnavailableOutcome(time.Second, limiter.CategoryNotConnected, errDown)
	outIndetermined = limiter.IndeterminateOutcome(time.Second, errDown)
	outIncompatible = limiter.IncompatibleOutcome(limiter.CategoryStateIncompatible, errDown)
	outInvalid      = limiter.UnavailableOutcome(0, limiter.CategoryInvalidRequest, errDown)
)

// meter is a charge-always fixed window of a million an hour: nothing a
// test charges is clamped.
func meter(t testing.TB, id string) *limiter.Policy {
	t.Helper()
	return limitertest.Policy(t, limiter.PolicySpec{ID: id, Algorithm: limiter.FixedWindow, Charge: limiter.ChargeAlways,
		Params: limiter.FixedWindowParams{Limit: 1_000_000, Window: time.Hour}, MaxCost: 1_000_000})
}

// rate is the same window counting admitted requests only.
func rate(t testing.TB, id string) *limiter.Policy {
	t.Helper()
	return limitertest.Policy(t, limiter.PolicySpec{ID: id, Algorithm: limiter.FixedWindow,
		Params: limiter.FixedWindowParams{Limit: 1_000_000, Window: time.Hour}, MaxCost: 1_000_000})
}

// recording is an Observer that keeps its counts.
type recording struct {
	mu         sync.Mutex
	journalled [numKinds]int
	replayed   [numKinds]int
	dropped    map[string]int // "kind/reason"
	entries    int
}

func newRecording() *recording { return &recording{dropped: map[string]int{}} }

func (r *recording) Journalled(k kind) { r.mu.Lock(); r.journalled[k]++; r.mu.Unlock() }
func (r *recording) Replayed(k kind, n int) {
	r.mu.Lock()
	r.replayed[k] += n
	r.mu.Unlock()
}
func (r *recording) Dropped(k kind, reason string, n int) {
	r.mu.Lock()
	r.dropped[k.String()+"/"+reason] += n
	r.mu.Unlock()
}
func (r *recording) Entries(n int) { r.mu.Lock(); r.entries = n; r.mu.Unlock() }

// String is the counts, for comparisons and messages.
func (r *recording) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := fmt.Sprintf("journalled %v replayed %v entries %d", r.journalled, r.replayed, r.entries)
	for _, k := range slices.Sorted(maps.Keys(r.dropped)) {
		s += fmt.Sprintf(" dropped[%s]=%d", k, r.dropped[k])
	}
	return s
}

// newJournal is a Journal over store with cfg's other fields.
func newJournal(t testing.TB, store limiter.Store, cfg Config) *Journal {
	t.Helper()
	cfg.Store = store
	j, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// eval sends one batch through j and returns its outcomes.
func eval(j *Journal, batch ...limiter.Request) []limiter.Outcome {
	out := make([]limiter.Outcome, len(batch))
	j.Evaluate(context.Background(), batch, out)
	return out
}

// drain replays until the journal is empty or a replay removes nothing.
func drain(t testing.TB, j *Journal) {
	t.Helper()
	for j.Len() > 0 {
		if removed, _, _ := j.replayOnce(context.Background()); removed == 0 {
			t.Fatalf("a replay removed nothing; %d entries left", j.Len())
		}
	}
}

func subject(s string) limiter.SubjectDigest { return limitertest.Subject(s) }
