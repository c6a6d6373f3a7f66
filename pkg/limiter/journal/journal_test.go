package journal

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/internal/polltest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// TestFaultShapes: a charge that the store fails in a way that may have
// left it unapplied (Unavailable, Indeterminate) is kept and, once the
// store answers, recorded exactly once; one the store refuses as invalid or
// finds incompatible is not kept (a replay cannot change the answer). The
// outcome goes up unchanged.
func TestFaultShapes(t *testing.T) {
	for _, tc := range []struct {
		name string
		fail limiter.Outcome
		kept bool
	}{
		{"unavailable", outUnavailable, true},
		{"unavailable deadline", limiter.UnavailableOutcome(0, limiter.CategoryDeadline, errDown), true},
		{"unavailable capacity", limiter.UnavailableOutcome(0, limiter.CategoryCapacity, errDown), true},
		{"indeterminate", outIndetermined, true},
		{"incompatible", outIncompatible, false},
		{"invalid request", outInvalid, false},
		{"unkeyed (the shared secret not read yet)", limiter.UnavailableOutcome(0, limiter.CategoryUnkeyed, errDown), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFaulty(t, limitertest.NewClock(t0))
			obs := newRecording()
			j := newJournal(t, f, Config{Observer: obs})
			p, sub := meter(t, "m"), subject("tenant")
			f.set(tc.fail)
			out := eval(j, limiter.Request{Policy: p, Subject: sub, Cost: 600})
			if out[0].Kind != tc.fail.Kind || out[0].Category != tc.fail.Category || out[0].Err != tc.fail.Err {
				t.Fatalf("outcome %+v, want the store's %+v", out[0], tc.fail)
			}
			want := 0
			if tc.kept {
				want = 1
			}
			if j.Len() != want || obs.journalled[kindCharge] != want {
				t.Fatalf("held %d, %s; want %d kept", j.Len(), obs, want)
			}
			f.set(limiter.Outcome{})
			for range 3 {
				j.replayOnce(context.Background())
			}
			if got, want := f.recorded(t, p, sub), int64(600*want); got != want {
				t.Fatalf("recorded %d after the store answers again, want %d", got, want)
			}
			if j.Len() != 0 || obs.replayed[kindCharge] != want || obs.entries != 0 {
				t.Fatalf("after the replay: held %d, %s", j.Len(), obs)
			}
		})
	}
}

// TestOnlySettlements: of the requests a failed store answers, only
// charges and lease releases are kept: rate requests, checks and probes of
// a charging policy, lease takes and lease returns never are.
func TestOnlySettlements(t *testing.T) {
	f := newFaulty(t, limitertest.NewClock(t0))
	j := newJournal(t, f, Config{})
	m, r := meter(t, "m"), rate(t, "r")
	lease := limitertest.LeasePolicy(t, "c", 4, time.Minute)
	sub := subject("s")
	f.set(outUnavailable)
	for _, tc := range []struct {
		name string
		req  limiter.Request
		kept bool
	}{
		{"rate", limiter.Request{Policy: r, Subject: sub, Cost: 1}, false},
		{"charge check", limiter.Request{Policy: m, Subject: sub, Cost: 1, Role: limiter.RoleCheck}, false},
		{"charge probe", limiter.Request{Policy: m, Subject: sub, Cost: 1, Role: limiter.RoleProbe}, false},
		{"lease take", limiter.Request{Policy: lease, Subject: sub, Cost: 1}, false},
		{"lease return", limiter.Request{Policy: lease, Subject: sub, Cost: 1, Lease: limiter.LeaseReturn}, false},
		{"charge", limiter.Request{Policy: m, Subject: sub, Cost: 1}, true},
		{"charge quota", limiter.Request{Policy: m, Subject: sub, Cost: 1, Role: limiter.RoleQuota}, true},
		{"charge shadow", limiter.Request{Policy: m, Subject: sub, Cost: 1, Role: limiter.RoleShadow}, true},
		{"release", limiter.Request{Policy: lease, Subject: sub, Cost: 1, Lease: limiter.LeaseRelease, Role: limiter.RoleCheck}, true},
		{"invalid charge", limiter.Request{Policy: m, Subject: sub, Cost: 0}, false},
	} {
		before := j.Len()
		eval(j, tc.req)
		if kept := j.Len() > before; kept != tc.kept {
			t.Errorf("%s: kept %v, want %v", tc.name, kept, tc.kept)
		}
	}
}

// TestChargeInABatch: a batch whose store failed every limit keeps its
// charges only, each apart; a replay records each charge on its own limit,
// whatever the batch's other limits answer.
func TestChargeInABatch(t *testing.T) {
	f := newFaulty(t, limitertest.NewClock(t0))
	j := newJournal(t, f, Config{})
	m, r := meter(t, "m"), rate(t, "r")
	a, b := subject("a"), subject("b")
	f.set(outIndetermined)
	eval(j, limiter.Request{Policy: r, Subject: a, Cost: 5},
		limiter.Request{Policy: m, Subject: a, Cost: 40},
		limiter.Request{Policy: m, Subject: b, Cost: 2, Role: limiter.RoleProbe},
		limiter.Request{Policy: m, Subject: b, Cost: 7})
	if j.Len() != 2 {
		t.Fatalf("held %d, want the 2 charges", j.Len())
	}
	f.set(limiter.Outcome{})
	drain(t, j)
	if ra, rb, rr := f.recorded(t, m, a), f.recorded(t, m, b), f.recorded(t, r, a); ra != 40 || rb != 7 || rr != 0 {
		t.Fatalf("recorded a %d b %d rate %d, want 40, 7 and 0", ra, rb, rr)
	}
}

// TestReplayOrderAndOnce: entries are replayed oldest first, over several
// batches of at most replayBatch, each sent until the store answers it and
// never again after; charges on one subject add up exactly.
func TestReplayOrderAndOnce(t *testing.T) {
	f := newFaulty(t, limitertest.NewClock(t0))
	obs := newRecording()
	j := newJournal(t, f, Config{Observer: obs})
	p, sub := meter(t, "m"), subject("s")
	const n = 3*replayBatch + 5
	f.set(outUnavailable)
	total := int64(0)
	for i := range n {
		eval(j, limiter.Request{Policy: p, Subject: sub, Cost: int64(i + 1)})
		total += int64(i + 1)
	}
	// A replay the store still fails keeps everything, in order.
	if removed, kept, _ := j.replayOnce(context.Background()); removed != 0 || kept != replayBatch {
		t.Fatalf("replay against a failing store: removed %d kept %d", removed, kept)
	}
	f.set(limiter.Outcome{})
	start := f.sentLen()
	drain(t, j)
	sent := f.sentSince(start)
	if len(sent) != n {
		t.Fatalf("%d requests replayed, want %d", len(sent), n)
	}
	for i, r := range sent {
		if r.Cost != int64(i+1) || r.Role != limiter.RoleOrdinary || r.Policy != p || r.Subject != sub {
			t.Fatalf("replay %d: %+v, want the charge of cost %d, ordinary", i, r, i+1)
		}
	}
	if f.calls-1-n >= n/replayBatch+2 {
		t.Errorf("%d store calls for %d replays: not batched", f.calls, n)
	}
	if got := f.recorded(t, p, sub); got != total {
		t.Fatalf("recorded %d, charged %d", got, total)
	}
	for range 3 {
		j.replayOnce(context.Background())
	}
	if f.sentLen() != start+n || obs.replayed[kindCharge] != n {
		t.Fatalf("sent again after the replay: %d more; %s", f.sentLen()-start-n, obs)
	}
}

// TestPartialReplay: a replay whose store applies some entries and fails
// others removes the applied ones and keeps the rest in their order; an
// entry the store finds incompatible or invalid on replay is dropped and
// counted.
func TestPartialReplay(t *testing.T) {
	f := newFaulty(t, limitertest.NewClock(t0))
	obs := newRecording()
	j := newJournal(t, f, Config{Observer: obs})
	p := meter(t, "m")
	down, bad, odd, ok := subject("down"), subject("bad"), subject("odd"), subject("ok")
	f.set(outUnavailable)
	for i, s := range []limiter.SubjectDigest{ok, down, bad, ok, down, odd, ok} {
		eval(j, limiter.Request{Policy: p, Subject: s, Cost: int64(i + 1)})
	}
	f.setIf(func(r *limiter.Request) limiter.Outcome {
		switch r.Subject {
		case down:
			return outIndetermined
		case bad:
			return outIncompatible
		case odd:
			return outInvalid
		}
		return limiter.Outcome{}
	})
	if removed, kept, _ := j.replayOnce(context.Background()); removed != 5 || kept != 2 {
		t.Fatalf("removed %d kept %d, want 5 and 2", removed, kept)
	}
	if got := f.recorded(t, p, ok); got != 1+4+7 {
		t.Fatalf("recorded %d on the answering subject, want 12", got)
	}
	if obs.dropped["charge/incompatible"] != 1 || obs.dropped["charge/invalid"] != 1 || obs.replayed[kindCharge] != 3 {
		t.Fatalf("%s", obs)
	}
	start := f.sentLen()
	f.set(limiter.Outcome{})
	drain(t, j)
	sent := f.sentSince(start)
	if len(sent) != 2 || sent[0].Cost != 2 || sent[1].Cost != 5 {
		t.Fatalf("the kept entries replayed as %+v, want costs 2 then 5", sent)
	}
	if got := f.recorded(t, p, down); got != 7 {
		t.Fatalf("recorded %d on the subject that failed first, want 7", got)
	}
}

// TestFull: the journal holds at most MaxEntries; a settlement beyond is
// dropped and counted, and never waits.
func TestFull(t *testing.T) {
	f := newFaulty(t, limitertest.NewClock(t0))
	obs := newRecording()
	j := newJournal(t, f, Config{Observer: obs, MaxEntries: 3})
	p, lease, sub := meter(t, "m"), limitertest.LeasePolicy(t, "c", 4, time.Minute), subject("s")
	f.set(outUnavailable)
	for range 4 {
		eval(j, limiter.Request{Policy: p, Subject: sub, Cost: 10})
	}
	eval(j, limiter.Request{Policy: lease, Subject: sub, Cost: 1, Lease: limiter.LeaseRelease, Role: limiter.RoleCheck})
	if j.Len() != 3 || obs.dropped["charge/full"] != 1 || obs.dropped["release/full"] != 1 || obs.entries != 3 {
		t.Fatalf("held %d; %s", j.Len(), obs)
	}
	f.set(limiter.Outcome{})
	drain(t, j)
	if got := f.recorded(t, p, sub); got != 30 {
		t.Fatalf("recorded %d, want the 30 held", got)
	}
}

// TestReleases: a release the store failed is replayed as a release (its
// lease is freed), unless it is older than the lease TTL: its lease has
// expired by then, and the release would free another request's lease.
func TestReleases(t *testing.T) {
	clock := limitertest.NewClock(t0)
	f := newFaulty(t, clock)
	obs := newRecording()
	j := newJournal(t, f, Config{Observer: obs, Clock: clock})
	lease, sub := limitertest.LeasePolicy(t, "c", 4, time.Minute), subject("s")
	take := limiter.Request{Policy: lease, Subject: sub, Cost: 1}
	release := limiter.Request{Policy: lease, Subject: sub, Cost: 1, Lease: limiter.LeaseRelease, Role: limiter.RoleCheck}
	for range 3 {
		if o := eval(j, take)[0]; !o.Decision.Consumed {
			t.Fatalf("take: %+v", o)
		}
	}
	f.set(outUnavailable)
	eval(j, release)
	eval(j, release)
	f.set(limiter.Outcome{})
	drain(t, j)
	if held := f.recorded(t, lease, sub); held != 1 {
		t.Fatalf("%d leases held after 3 takes and 2 replayed releases, want 1", held)
	}

	f.set(outUnavailable)
	eval(j, release)
	clock.Advance(time.Minute + time.Millisecond)
	f.set(limiter.Outcome{})
	start := f.sentLen()
	j.replayOnce(context.Background())
	if j.Len() != 0 || f.sentLen() != start || obs.dropped["release/expired"] != 1 {
		t.Fatalf("a release past the lease TTL: held %d, sent %d; %s", j.Len(), f.sentLen()-start, obs)
	}
}

// TestLateAnswers: a charge whose outcome is Indeterminate while its
// store awaits the answer (limiter.Awaited) is not replayed before the
// answer says: applied (removed, never sent again), not applied (replayed
// once), or nothing by awaitMax (replayed). A replay that is itself
// Indeterminate awaits its own answer the same way.
func TestLateAnswers(t *testing.T) {
	clock := limitertest.NewClock(t0)
	f := newFaulty(t, clock)
	obs := newRecording()
	j := newJournal(t, f, Config{Observer: obs, Clock: clock})
	p := meter(t, "m")
	ctx := context.Background()
	pending := func(sub limiter.SubjectDigest) *limiter.LateAnswer {
		t.Helper()
		late := limiter.NewLateAnswer()
		f.set(limiter.IndeterminateOutcome(time.Second, late.Awaited(0, errDown)))
		eval(j, limiter.Request{Policy: p, Subject: sub, Cost: 10})
		f.set(limiter.Outcome{})
		return late
	}
	applied, notApplied, silent, replay := subject("applied"), subject("not applied"), subject("silent"), subject("replay")
	lateApplied, lateNot, _ := pending(applied), pending(notApplied), pending(silent)

	start := f.sentLen()
	if removed, kept, awaiting := j.replayOnce(ctx); removed != 0 || kept != 3 || awaiting != 3 || f.sentLen() != start {
		t.Fatalf("before any answer: removed %d kept %d awaiting %d, %d sent", removed, kept, awaiting, f.sentLen()-start)
	}
	lateApplied.Resolve([]limiter.Outcome{limiter.EvaluatedOutcome(limiter.Decision{Allowed: true, Consumed: true})})
	lateNot.Resolve([]limiter.Outcome{limiter.UnavailableOutcome(0, limiter.CategoryDeadline, errDown)})
	if removed, kept, awaiting := j.replayOnce(ctx); removed != 2 || kept != 1 || awaiting != 1 {
		t.Fatalf("after two answers: removed %d kept %d awaiting %d", removed, kept, awaiting)
	}
	if sent := f.sentSince(start); len(sent) != 1 || sent[0].Subject != notApplied {
		t.Fatalf("sent %+v, want the charge not applied alone", sent)
	}
	if f.recorded(t, p, applied) != 0 || f.recorded(t, p, notApplied) != 10 {
		t.Fatalf("recorded %d and %d", f.recorded(t, p, applied), f.recorded(t, p, notApplied))
	}
	clock.Advance(awaitMax + time.Millisecond)
	drain(t, j)
	if f.recorded(t, p, silent) != 10 || obs.replayed[kindCharge] != 3 {
		t.Fatalf("no answer by awaitMax: recorded %d; %s", f.recorded(t, p, silent), obs)
	}

	// A replay the store answers Indeterminate, awaiting its answer.
	f.set(outUnavailable)
	eval(j, limiter.Request{Policy: p, Subject: replay, Cost: 7})
	late := limiter.NewLateAnswer()
	f.set(limiter.IndeterminateOutcome(time.Second, late.Awaited(0, errDown)))
	if removed, kept, awaiting := j.replayOnce(ctx); removed != 0 || kept != 1 || awaiting != 1 {
		t.Fatalf("a replay answered Indeterminate: removed %d kept %d awaiting %d", removed, kept, awaiting)
	}
	f.set(limiter.Outcome{})
	start = f.sentLen()
	if removed, _, awaiting := j.replayOnce(ctx); removed != 0 || awaiting != 1 || f.sentLen() != start {
		t.Fatalf("a replay awaiting its answer: removed %d awaiting %d, %d sent", removed, awaiting, f.sentLen()-start)
	}
	late.Resolve([]limiter.Outcome{limiter.EvaluatedOutcome(limiter.Decision{Allowed: true, Consumed: true})})
	if removed, _, _ := j.replayOnce(ctx); removed != 1 || f.sentLen() != start || j.Len() != 0 {
		t.Fatalf("a replay applied late: removed %d, %d sent, %d held", removed, f.sentLen()-start, j.Len())
	}
}

// TestRunKickedWhenStoreAnswers: Run replays as soon as a request through
// the journal is answered by the store, not after its backoff (here an
// hour).
func TestRunKickedWhenStoreAnswers(t *testing.T) {
	f := newFaulty(t, limitertest.NewClock(t0))
	j := newJournal(t, f, Config{})
	j.retryMin, j.retryMax = time.Millisecond, time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); j.Run(ctx) }()
	defer func() { cancel(); <-done }()

	p, sub := meter(t, "m"), subject("s")
	f.set(outUnavailable)
	eval(j, limiter.Request{Policy: p, Subject: sub, Cost: 9})
	// Let Run fail a few replays, so that its wait has grown long.
	waitFor(t, func() bool { return f.sentLen() >= 4 }, "replays against the failing store")
	f.set(limiter.Outcome{})
	eval(j, limiter.Request{Policy: rate(t, "r"), Subject: sub, Cost: 1})
	waitFor(t, func() bool { return j.Len() == 0 }, "the replay after the store answered")
	if got := f.recorded(t, p, sub); got != 9 {
		t.Fatalf("recorded %d, want 9", got)
	}
}

// TestRunEndsWithContext: Run returns once its context ends, whether it
// waits for work or backs off.
func TestRunEndsWithContext(t *testing.T) {
	for _, failing := range []bool{false, true} {
		f := newFaulty(t, limitertest.NewClock(t0))
		j := newJournal(t, f, Config{})
		j.retryMin, j.retryMax = time.Millisecond, time.Hour
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); j.Run(ctx) }()
		if failing {
			f.set(outUnavailable)
			eval(j, limiter.Request{Policy: meter(t, "m"), Subject: subject("s"), Cost: 1})
			waitFor(t, func() bool { return f.sentLen() >= 4 }, "replays against the failing store")
		}
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("failing %v: Run still running 5s after its context ended", failing)
		}
	}
}

// TestConcurrentCharges: charges from many goroutines while the store
// fails half the time and Run replays: once Run has emptied the journal,
// the store has recorded every charge exactly once.
func TestConcurrentCharges(t *testing.T) {
	f := newFaulty(t, limitertest.NewClock(t0))
	j := newJournal(t, f, Config{})
	j.retryMin, j.retryMax = time.Millisecond, 10*time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); j.Run(ctx) }()
	defer func() { cancel(); <-done }()
	p, sub := meter(t, "m"), subject("s")
	const workers, each = 8, 200
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				if w == 0 && i%20 == 0 {
					if i%40 == 0 {
						f.set(outIndetermined)
					} else {
						f.set(limiter.Outcome{})
					}
				}
				eval(j, limiter.Request{Policy: p, Subject: sub, Cost: int64(1 + (w+i)%7)})
			}
		})
	}
	wg.Wait()
	f.set(limiter.Outcome{})
	eval(j, limiter.Request{Policy: rate(t, "r"), Subject: sub, Cost: 1})
	waitFor(t, func() bool { return j.Len() == 0 }, "an empty journal")
	want := int64(0)
	for w := range workers {
		for i := range each {
			want += int64(1 + (w+i)%7)
		}
	}
	if got := f.recorded(t, p, sub); got != want {
		t.Fatalf("recorded %d, charged %d", got, want)
	}
}

// waitFor polls cond every millisecond for up to 10 s.
func waitFor(t testing.TB, cond func() bool, what string) {
	t.Helper()
	polltest.Eventually(t, 10*time.Second, time.Millisecond, what, func() error {
		if !cond() {
			return errors.New("not yet")
		}
		return nil
	})
}

// TestSuiteOverMemory: with a store that answers, the journal is
// transparent: the store suite's batches, timed cases and lease scripts
// pass through it. (Resets go to the store itself, not through the
// journal.)
func TestSuiteOverMemory(t *testing.T) {
	cfg := limitertest.Config{Prefix: "journal"}
	t.Run("batch", func(t *testing.T) {
		limitertest.Run(t, newJournal(t, newFaulty(t, limiter.SystemClock{}), Config{}), cfg)
	})
	t.Run("timed", func(t *testing.T) {
		limitertest.RunTimed(t, func(t *testing.T, clock *limitertest.Clock) limiter.Store {
			return newJournal(t, newFaulty(t, clock), Config{Clock: clock})
		}, cfg)
	})
	t.Run("leases", func(t *testing.T) {
		limitertest.RunLeases(t, newJournal(t, newFaulty(t, limiter.SystemClock{}), Config{}), cfg)
	})
}
