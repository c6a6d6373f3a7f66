package failover_test

import (
	"context"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/failover"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/journal"
)

// reserveEnv is a failover store over a journal over a memory store
// (2 replicas), with a reserving budget of 1,000 an hour per failure mode
// (a local share of 500), reserving the request's cost for ten minutes.
type reserveEnv struct {
	*env
	journal *journal.Journal
	budget  map[limiter.FailureMode]*limiter.Policy
}

func newReserveEnv(t *testing.T) *reserveEnv {
	t.Helper()
	e := &reserveEnv{env: newEnv(t), budget: map[limiter.FailureMode]*limiter.Policy{}}
	var err error
	if e.journal, err = journal.New(journal.Config{Store: e.inner, Clock: e.clock}); err != nil {
		t.Fatal(err)
	}
	if e.store, err = failover.New(e.journal, failover.Config{Replicas: 2, Clock: e.clock, Observer: e.trans}); err != nil {
		t.Fatal(err)
	}
	for _, m := range []limiter.FailureMode{limiter.FailClosed, limiter.FailOpen, limiter.FailLocal} {
		e.budget[m] = limitertest.Policy(t, limiter.PolicySpec{ID: "budget/" + m.String(), Algorithm: limiter.FixedWindow,
			FailureMode: m, Params: limiter.FixedWindowParams{Limit: 1000, Window: time.Hour}, MaxCost: 1000,
			Reserve: limiter.Reserve{TTL: 10 * time.Minute}})
	}
	return e
}

var tenant = limitertest.Subject("tenant")

func (e *reserveEnv) reserve(m limiter.FailureMode, cost int64) limiter.Decision {
	return e.eval(limiter.Request{Policy: e.budget[m], Subject: tenant, Cost: cost})[0].Decision
}

// settle settles the reservation of d (a decision of the local limiter
// when its source is the fallback) with the usage actual, in the ordinary
// role (a settle never blocks).
func (e *reserveEnv) settle(m limiter.FailureMode, d limiter.Decision, actual int64) limiter.Outcome {
	return e.eval(limiter.Request{Policy: e.budget[m], Subject: tenant, Cost: actual, Lease: limiter.LeaseRelease,
		LeaseAt: d.HoldAt.UnixMilli(), LocalLease: d.Source == limiter.SourceFallback})[0]
}

// stored is what the store behind the journal recorded for the tenant on
// the failure_mode m budget.
func (e *reserveEnv) stored(t *testing.T, m limiter.FailureMode) int64 {
	t.Helper()
	out := make([]limiter.Outcome, 1)
	e.inner.Inner().Evaluate(context.Background(), []limiter.Request{{Policy: e.budget[m], Subject: tenant, Cost: 1, Role: limiter.RoleCheck}}, out)
	if out[0].Kind != limiter.Evaluated {
		t.Fatalf("reading the store: %+v", out[0])
	}
	return 1000 - out[0].Decision.Remaining
}

// heal makes the store answer again and decide a whole batch (the local
// rate states are dropped).
func (e *reserveEnv) heal(t *testing.T) {
	t.Helper()
	failWith(e.inner, 0)
	e.eval(e.req(limiter.FailLocal, "other", 1))
	if e.trans.dropped == 0 {
		t.Fatal("the local state was not dropped")
	}
}

// TestLocalReservations: during an outage a failure_mode local reserve is
// decided by the local share and holds a reservation (HoldAt); its settle,
// marked local, settles it in that local state (what was not used is
// given back to the share) and never reaches the store.
func TestLocalReservations(t *testing.T) {
	e := newReserveEnv(t)
	failWith(e.inner, limiter.Unavailable)
	d := e.reserve(limiter.FailLocal, 300)
	if !d.Consumed || d.HoldAt.IsZero() || d.Source != limiter.SourceFallback || d.Fallback != limiter.FailLocal || d.Remaining != 200 {
		t.Fatalf("local reserve: %+v, want a reservation of the share of 500", d)
	}
	_, before := e.inner.Counts()
	if o := e.settle(limiter.FailLocal, d, 100); o.Kind != limiter.Evaluated {
		t.Fatalf("local settle: %+v", o)
	}
	if _, after := e.inner.Counts(); after != before || e.journal.Len() != 0 {
		t.Fatalf("the local settle reached the store (%d requests) or the journal (%d)", after-before, e.journal.Len())
	}
	// 100 used of the share: 400 left, not 200.
	if d := e.reserve(limiter.FailLocal, 400); !d.Consumed || d.Fallback != limiter.FailLocal {
		t.Fatalf("reserve of the 400 the settle gave back: %+v", d)
	}
	if d := e.reserve(limiter.FailLocal, 1); d.Allowed {
		t.Fatalf("reserve past the share: %+v", d)
	}
	// A duplicate settle changes nothing.
	e.settle(limiter.FailLocal, d, 0)
	if d := e.reserve(limiter.FailLocal, 1); d.Allowed {
		t.Fatalf("a duplicate settle gave back: %+v", d)
	}
}

// TestDroppedLocalReservation: a local reservation whose local state was
// dropped (the store answered again) is settled by charging its usage to
// the store, once: a duplicate charges nothing, nor does a settle after the
// reservation expired; a store that fails the charge has it journalled
// and applied when it answers.
func TestDroppedLocalReservation(t *testing.T) {
	e := newReserveEnv(t)
	failWith(e.inner, limiter.Indeterminate)
	a, b, c := e.reserve(limiter.FailLocal, 300), e.reserve(limiter.FailLocal, 100), e.reserve(limiter.FailLocal, 50)
	for _, d := range []limiter.Decision{a, b, c} {
		if d.HoldAt.IsZero() || d.Fallback != limiter.FailLocal {
			t.Fatalf("local reserve: %+v", d)
		}
	}
	e.heal(t)
	if o := e.settle(limiter.FailLocal, a, 250); o.Kind != limiter.Evaluated || o.Decision.Source != limiter.SourceMemory {
		t.Fatalf("settle of a dropped local reservation: %+v, want the store's answer", o)
	}
	if got := e.stored(t, limiter.FailLocal); got != 250 {
		t.Fatalf("the store recorded %d, want the 250 used", got)
	}
	e.settle(limiter.FailLocal, a, 250)
	if got := e.stored(t, limiter.FailLocal); got != 250 {
		t.Fatalf("a duplicate settle: the store recorded %d, want 250", got)
	}
	// The store fails the charge: the journal keeps it.
	failWith(e.inner, limiter.Unavailable)
	if o := e.settle(limiter.FailLocal, b, 70); o.Decision.Source != limiter.SourceFallback || e.journal.Len() != 1 {
		t.Fatalf("settle through a failing store: %+v; journal holds %d", o.Decision, e.journal.Len())
	}
	failWith(e.inner, 0)
	if left, _, err := e.journal.Stop(context.Background()); left != 0 || err != nil {
		t.Fatalf("journal replay: %d left, %v", left, err)
	}
	if got := e.stored(t, limiter.FailLocal); got != 320 {
		t.Fatalf("the store recorded %d after the replay, want 250 + 70", got)
	}
	e.clock.Set(c.HoldAt)
	e.settle(limiter.FailLocal, c, 40)
	if got := e.stored(t, limiter.FailLocal); got != 320 {
		t.Fatalf("a settle after the reservation expired: the store recorded %d, want 320", got)
	}
}

// TestStoreReservationSettledByTheStore: a settle of the store's
// reservation during an outage is not decided locally (the local share
// holds nothing of it): it is answered by the failure mode and journalled,
// and the store settles it once when it answers.
func TestStoreReservationSettledByTheStore(t *testing.T) {
	e := newReserveEnv(t)
	d := e.reserve(limiter.FailLocal, 300)
	if d.Source != limiter.SourceMemory || d.HoldAt.IsZero() {
		t.Fatalf("store reserve: %+v", d)
	}
	failWith(e.inner, limiter.Unavailable)
	o := e.settle(limiter.FailLocal, d, 100)
	if o.Decision.Source != limiter.SourceFallback || o.Decision.Fallback == limiter.FailLocal || e.journal.Len() != 1 {
		t.Fatalf("settle of the store's reservation in an outage: %+v, journal %d; want the failure mode's answer, journalled", o.Decision, e.journal.Len())
	}
	// The local share is untouched: a reserve of all of it passes.
	if d := e.reserve(limiter.FailLocal, 500); !d.Consumed || d.Fallback != limiter.FailLocal {
		t.Fatalf("local reserve of the whole share: %+v", d)
	}
	failWith(e.inner, 0)
	if left, _, err := e.journal.Stop(context.Background()); left != 0 || err != nil {
		t.Fatalf("journal replay: %d left, %v", left, err)
	}
	if got := e.stored(t, limiter.FailLocal); got != 100 {
		t.Fatalf("the store recorded %d, want the 100 used", got)
	}
}

// TestReserveFailureModes: during an outage failure_mode closed denies a
// reserve, and open admits it without a reservation (no HoldAt, so no
// marker and no settle).
func TestReserveFailureModes(t *testing.T) {
	e := newReserveEnv(t)
	failWith(e.inner, limiter.Unavailable)
	if d := e.reserve(limiter.FailClosed, 10); d.Allowed || !d.HoldAt.IsZero() || d.Fallback != limiter.FailClosed || d.RetryAfter < time.Second {
		t.Fatalf("closed reserve: %+v", d)
	}
	if d := e.reserve(limiter.FailOpen, 10); !d.Allowed || !d.HoldAt.IsZero() || d.Fallback != limiter.FailOpen {
		t.Fatalf("open reserve: %+v", d)
	}
}
