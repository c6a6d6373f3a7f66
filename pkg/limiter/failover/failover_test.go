package failover_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/failover"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/memory"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// failWith makes d answer every request with a failure of kind k (0: the
// store's own decisions): the fault shapes of a shared store that cannot be
// reached, does not answer, or holds an incompatible state.
func failWith(d *limitertest.Double, k limiter.OutcomeKind) {
	f := limitertest.Fault{Kind: k, Err: errors.New("store failure")}
	if k == limiter.Unavailable {
		f.RetryAfter = 2500 * time.Millisecond // a hint longer than the floor
	}
	d.Set(f)
}

// transitions records the local limiter's transitions.
type transitions struct {
	mu               sync.Mutex
	started, dropped int
}

func (r *transitions) LocalStarted(int) { r.mu.Lock(); r.started++; r.mu.Unlock() }
func (r *transitions) LocalDropped()    { r.mu.Lock(); r.dropped++; r.mu.Unlock() }

type env struct {
	reg    *prometheus.Registry
	store  *failover.Store
	inner  *limitertest.Double
	clock  *limitertest.Clock
	trans  *transitions
	byMode map[limiter.FailureMode]*limiter.Policy
}

// newEnv wraps a memory store, shared by "2 replicas", with one policy of
// 10 a minute per failure mode.
func newEnv(t *testing.T) *env {
	t.Helper()
	clock := limitertest.NewClock(t0)
	e := &env{reg: prometheus.NewRegistry(), inner: limitertest.NewDouble(t, nil, clock), clock: clock, trans: &transitions{}, byMode: map[limiter.FailureMode]*limiter.Policy{}}
	m, err := failover.NewMetrics(e.reg)
	if err != nil {
		t.Fatal(err)
	}
	if e.store, err = failover.New(e.inner, failover.Config{Replicas: 2, Clock: clock, Observer: e.trans, Metrics: m}); err != nil {
		t.Fatal(err)
	}
	for _, m := range []limiter.FailureMode{limiter.FailClosed, limiter.FailOpen, limiter.FailLocal} {
		e.byMode[m] = limitertest.Policy(t, limiter.PolicySpec{ID: "p/" + m.String(), Algorithm: limiter.FixedWindow,
			FailureMode: m, Params: limiter.FixedWindowParams{Limit: 10, Window: time.Minute}})
	}
	return e
}

func (e *env) req(m limiter.FailureMode, subject string, cost int64) limiter.Request {
	return limiter.Request{Policy: e.byMode[m], Subject: limitertest.Subject(subject), Cost: cost}
}

func (e *env) eval(reqs ...limiter.Request) []limiter.Outcome {
	out := make([]limiter.Outcome, len(reqs))
	e.store.Evaluate(context.Background(), reqs, out)
	return out
}

// admitted sends n single-limit batches and counts the allowed ones.
func (e *env) admitted(t *testing.T, r limiter.Request, n int) int {
	t.Helper()
	ok := 0
	for range n {
		o := e.eval(r)[0]
		if o.Kind != limiter.Evaluated {
			t.Fatalf("outcome %v, want a decision", o.Kind)
		}
		if o.Decision.Allowed {
			ok++
		}
	}
	return ok
}

// TestHealthyStoreUnchanged: while the store decides, the wrapper answers
// exactly what it answers: the store suite's batch table, but for its cases
// where the store fails (answered by the failure mode instead, see
// TestAnswers), and its timed cases.
func TestHealthyStoreUnchanged(t *testing.T) {
	mem, err := memory.New(memory.Config{MaxEntries: 10_000})
	if err != nil {
		t.Fatal(err)
	}
	st, err := failover.New(mem, failover.Config{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := limitertest.Config{Prefix: limitertest.Prefix()}
	ran := 0
cases:
	for _, tc := range limitertest.Cases() {
		for _, step := range tc.Steps {
			for _, w := range step.Want {
				if w.Failed {
					continue cases
				}
			}
		}
		t.Run(tc.Name, func(t *testing.T) { limitertest.RunCase(t, st, cfg, tc) })
		ran++
	}
	if ran < 8 {
		t.Fatalf("%d cases without failures, want the table's", ran)
	}
	t.Run("timed", func(t *testing.T) {
		limitertest.RunTimed(t, func(t *testing.T, clock *limitertest.Clock) limiter.Store {
			mem, err := memory.New(memory.Config{Clock: clock, MaxEntries: 10_000})
			if err != nil {
				t.Fatal(err)
			}
			st, err := failover.New(mem, failover.Config{Clock: clock})
			if err != nil {
				t.Fatal(err)
			}
			return st
		}, cfg)
	})
}

// TestAnswers: each failure kind is answered by the policy's failure mode,
// with the failure kept for metrics and logs, and counted by its kind and
// by the mode that answered.
func TestAnswers(t *testing.T) {
	for _, kind := range []limiter.OutcomeKind{limiter.Unavailable, limiter.Indeterminate, limiter.Incompatible} {
		t.Run(kind.String(), func(t *testing.T) {
			e := newEnv(t)
			failWith(e.inner, kind)
			out := e.eval(e.req(limiter.FailClosed, "a", 1), e.req(limiter.FailOpen, "a", 1), e.req(limiter.FailLocal, "a", 1))
			for i, o := range out {
				if o.Kind != limiter.Evaluated || o.Decision.Source != limiter.SourceFallback || o.Failed != kind {
					t.Fatalf("outcome %d: kind %v source %v failed %v, want a fallback decision answering %v", i, o.Kind, o.Decision.Source, o.Failed, kind)
				}
			}
			closed, open, local := out[0].Decision, out[1].Decision, out[2].Decision
			wantRetry := time.Second
			if kind == limiter.Unavailable {
				wantRetry = 2500 * time.Millisecond // the store's hint, longer than the floor
			}
			if closed.Allowed || closed.Fallback != limiter.FailClosed || closed.RetryAfter != wantRetry || closed.Known() {
				t.Errorf("closed: %+v, want denied for %v, state unknown", closed, wantRetry)
			}
			if !open.Allowed || open.Fallback != limiter.FailOpen || open.Known() {
				t.Errorf("open: %+v, want allowed, state unknown", open)
			}
			modes := map[string]int{"closed": 1, "open": 1, "local": 1}
			if kind == limiter.Incompatible {
				modes = map[string]int{"closed": 2, "open": 1, "local": 0}
			}
			m := limitertest.Exposition(t, e.reg)
			for mode, n := range modes {
				if want := fmt.Sprintf(`envoy_rls_fallback_total{mode="%s"} %d`, mode, n); !strings.Contains(m, want+"\n") {
					t.Errorf("want %s in\n%s", want, m)
				}
			}
			if want := fmt.Sprintf(`envoy_rls_store_errors_total{outcome="%s"} 3`, kind); !strings.Contains(m, want+"\n") {
				t.Errorf("want %s in\n%s", want, m)
			}
			if kind == limiter.Incompatible {
				// A mismatch is no outage: the local limiter does not decide.
				if local.Allowed || local.Fallback != limiter.FailClosed {
					t.Errorf("local on a mismatch: %+v, want answered closed", local)
				}
				return
			}
			// The closed limit denies, so the call consumes nothing: the
			// local limit is only checked.
			if !local.Allowed || local.Fallback != limiter.FailLocal || !local.Known() || local.Consumed || local.Limit != 5 || local.Remaining != 5 {
				t.Errorf("local: %+v, want the share's check: allowed, not consumed, 5 of 5 left", local)
			}
		})
	}
}

// TestLocalShare: a failure_mode local limit of 10 with 2 replicas admits 5
// per subject while the store fails; the store's recovery drops the local
// state, so the next outage starts from a full share.
func TestLocalShare(t *testing.T) {
	e := newEnv(t)
	failWith(e.inner, limiter.Unavailable)
	if got := e.admitted(t, e.req(limiter.FailLocal, "a", 1), 7); got != 5 {
		t.Fatalf("outage 1: %d admitted, want the share of 5", got)
	}
	if got := e.admitted(t, e.req(limiter.FailLocal, "b", 1), 7); got != 5 {
		t.Fatalf("another subject: %d admitted, want its own share of 5", got)
	}
	e.clock.Advance(time.Minute)
	if got := e.admitted(t, e.req(limiter.FailLocal, "a", 1), 7); got != 5 {
		t.Fatalf("next window: %d admitted, want 5", got)
	}
	failWith(e.inner, 0)
	if got := e.admitted(t, e.req(limiter.FailLocal, "a", 1), 1); got != 1 {
		t.Fatalf("store back: %d admitted, want 1", got)
	}
	failWith(e.inner, limiter.Unavailable)
	if got := e.admitted(t, e.req(limiter.FailLocal, "a", 1), 7); got != 5 {
		t.Fatalf("outage 2: %d admitted, want 5 (the local state of outage 1 dropped)", got)
	}
	e.trans.mu.Lock()
	defer e.trans.mu.Unlock()
	if e.trans.started != 2 || e.trans.dropped != 1 {
		t.Fatalf("transitions: %d started, %d dropped, want 2 and 1", e.trans.started, e.trans.dropped)
	}
}

// TestLocalBatchRule: the local limits of a batch commit with the store's
// other answers, all or nothing: a batch that another limit denies consumes
// nothing of the share, and a cost above the share is denied without asking
// and blocks the batch's other local limits.
func TestLocalBatchRule(t *testing.T) {
	e := newEnv(t)
	failWith(e.inner, limiter.Unavailable)
	for range 3 {
		out := e.eval(e.req(limiter.FailLocal, "a", 1), e.req(limiter.FailClosed, "a", 1))
		if d := out[0].Decision; !d.Allowed || d.Consumed {
			t.Fatalf("local beside a closed denial: %+v, want allowed but not consumed", d)
		}
	}
	for range 2 {
		out := e.eval(e.req(limiter.FailLocal, "a", 1), e.req(limiter.FailLocal, "b", 6))
		if a, b := out[0].Decision, out[1].Decision; !a.Allowed || a.Consumed || b.Allowed || b.RetryAfter != time.Minute {
			t.Fatalf("beside a cost above the share: %+v / %+v, want a checked, b denied for a minute", a, b)
		}
	}
	if got := e.admitted(t, e.req(limiter.FailLocal, "a", 1), 7); got != 5 {
		t.Fatalf("%d admitted after the denied batches, want the whole share of 5", got)
	}
	// A fail-open failure takes no part: the local limit beside it consumes.
	out := e.eval(e.req(limiter.FailLocal, "c", 1), e.req(limiter.FailOpen, "c", 1))
	if d := out[0].Decision; !d.Consumed || d.Remaining != 4 {
		t.Fatalf("local beside an open failure: %+v, want consumed, 4 left", d)
	}
}

// TestLocalDeadline: a batch whose caller has gone is not decided locally
// either: it is answered closed.
func TestLocalDeadline(t *testing.T) {
	e := newEnv(t)
	failWith(e.inner, limiter.Indeterminate)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	out := make([]limiter.Outcome, 1)
	e.store.Evaluate(ctx, []limiter.Request{e.req(limiter.FailLocal, "a", 1)}, out)
	if d := out[0].Decision; out[0].Kind != limiter.Evaluated || d.Allowed || d.Fallback != limiter.FailClosed || out[0].Failed != limiter.Unavailable {
		t.Fatalf("%+v, want denied (closed), the local limiter's failure kept", out[0])
	}
}

// TestConfigBounds: replicas outside [1, MaxReplicas], a negative bound and
// a missing store are refused.
func TestConfigBounds(t *testing.T) {
	mem, err := memory.New(memory.Config{MaxEntries: 10})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		store limiter.Store
		cfg   failover.Config
	}{
		{"replicas below 1", mem, failover.Config{Replicas: -1}},
		{"replicas above the bound", mem, failover.Config{Replicas: failover.MaxReplicas + 1}},
		{"negative entries", mem, failover.Config{MaxEntries: -1}},
		{"no store", nil, failover.Config{}},
	} {
		if _, err := failover.New(tc.store, tc.cfg); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
}

// TestLocalBeyondMaxEntries: with more subjects than MaxEntries during an
// outage, the subjects beyond are neither denied outright nor admitted
// beyond the share: the memory store's overflow sketch limits them.
func TestLocalBeyondMaxEntries(t *testing.T) {
	clock := limitertest.NewClock(t0)
	inner := limitertest.NewDouble(t, nil, clock)
	st, err := failover.New(inner, failover.Config{Replicas: 2, MaxEntries: 8, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	p := limitertest.Policy(t, limiter.PolicySpec{ID: "p/local", Algorithm: limiter.FixedWindow,
		FailureMode: limiter.FailLocal, Params: limiter.FixedWindowParams{Limit: 10, Window: time.Minute}})
	failWith(inner, limiter.Unavailable)
	sketched := 0
	for i := range 40 {
		admitted := 0
		for range 7 {
			out := make([]limiter.Outcome, 1)
			st.Evaluate(context.Background(), []limiter.Request{{Policy: p, Subject: limitertest.Subject(fmt.Sprint("s", i)), Cost: 1}}, out)
			if out[0].Kind != limiter.Evaluated {
				t.Fatalf("subject %d: outcome %v, want a decision", i, out[0].Kind)
			}
			if out[0].Decision.Allowed {
				admitted++
			}
			if out[0].Decision.Certainty == limiter.Approximate {
				sketched++
			}
		}
		if admitted < 1 || admitted > 5 {
			t.Errorf("subject %d of 40 (8 held exactly): %d admitted, want 1 to the share of 5", i, admitted)
		}
	}
	if sketched == 0 {
		t.Error("no decision came from the overflow sketch")
	}
}

// TestLocalDecidesWithinTheCallersDeadline: a store that hangs until its
// deadline leaves the local limiter the answer reserve of the caller's
// deadline: a failure_mode local limit is decided locally at every usual
// Envoy timeout, not answered closed for want of time.
func TestLocalDecidesWithinTheCallersDeadline(t *testing.T) {
	e := newEnv(t)
	e.inner.Set(limitertest.Fault{Hang: true})
	for _, d := range []time.Duration{20 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond} {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		out := make([]limiter.Outcome, 1)
		e.store.Evaluate(ctx, []limiter.Request{e.req(limiter.FailLocal, "deadline "+d.String(), 1)}, out)
		err := ctx.Err()
		cancel()
		if o := out[0]; o.Kind != limiter.Evaluated || !o.Decision.Allowed || o.Decision.Fallback != limiter.FailLocal || o.Failed != limiter.Indeterminate {
			t.Errorf("deadline %v: %v %+v (failed %v: %v), want the local share's decision", d, o.Kind, o.Decision, o.Failed, o.Err)
		}
		if err != nil {
			t.Errorf("deadline %v: answered after the caller's deadline", d)
		}
	}
}

// leaseEnv is a failover store over a memory store, 2 replicas, with a
// failure_mode local concurrency policy of 2: a local share of 1.
func leaseEnv(t *testing.T) (*env, *limiter.Policy) {
	t.Helper()
	e := newEnv(t)
	spec := limitertest.LeasePolicy(t, "inflight", 2, time.Hour).Spec()
	spec.FailureMode = limiter.FailLocal
	return e, limitertest.Policy(t, spec)
}

func take(p *limiter.Policy) limiter.Request {
	return limiter.Request{Policy: p, Subject: limitertest.Subject("tenant"), Cost: 1}
}

// release gives back the leases of a take's decision d: the store's, or the
// local limiter's when the local limiter decided the take.
func release(p *limiter.Policy, d limiter.Decision) limiter.Request {
	return limiter.Request{Policy: p, Subject: limitertest.Subject("tenant"), Cost: 1, Role: limiter.RoleCheck,
		Lease: limiter.LeaseRelease, LeaseAt: d.ResetAt.UnixMilli(), LocalLease: d.Source == limiter.SourceFallback}
}

// TestLeasesHaveAnOwner: a lease the local fallback took is given back
// only by a release marked local, which never reaches the store; a release
// of the store's lease during an outage frees nothing locally; and local
// leases outlive the store's return, so that they still count in the next
// outage.
func TestLeasesHaveAnOwner(t *testing.T) {
	e, p := leaseEnv(t)
	// The store holds one lease.
	stored := e.eval(take(p))[0].Decision
	if !stored.Consumed || stored.Source != limiter.SourceMemory {
		t.Fatalf("store take: %+v", stored)
	}
	// Outage: the share (a limit of 2 over 2 replicas: 1) admits locally.
	failWith(e.inner, limiter.Indeterminate)
	local := e.eval(take(p))[0].Decision
	if !local.Consumed || local.Source != limiter.SourceFallback || local.Fallback != limiter.FailLocal {
		t.Fatalf("local take: %+v", local)
	}
	if d := e.eval(take(p))[0].Decision; d.Allowed {
		t.Fatalf("second local take beyond the share of 1: %+v", d)
	}
	// The store's lease is released during the outage: nothing local is freed.
	if o := e.eval(release(p, stored))[0]; o.Decision.Source != limiter.SourceFallback || o.Decision.Fallback == limiter.FailLocal {
		t.Fatalf("release of the store's lease in an outage: %+v, want the failure mode's answer", o.Decision)
	}
	if d := e.eval(take(p))[0].Decision; d.Allowed {
		t.Fatalf("a store release freed the local lease: %+v", d)
	}
	// The store answers again: the local lease stays held by the local
	// limiter, and its release does not touch the store's lease.
	failWith(e.inner, 0)
	if d := e.eval(release(p, local))[0].Decision; !d.Allowed || d.Remaining != 1 {
		t.Fatalf("local release: %+v, want the share's lease given back", d)
	}
	if d := e.eval(take(p))[0].Decision; !d.Consumed || d.Remaining != 0 {
		t.Fatalf("store take after the local release: %+v, want 1 lease left to take (the store's first still held)", d)
	}
	// A local lease taken in one outage still counts in the next.
	failWith(e.inner, limiter.Unavailable)
	held := e.eval(take(p))[0].Decision
	failWith(e.inner, 0)
	e.eval(limiter.Request{Policy: e.byMode[limiter.FailLocal], Subject: limitertest.Subject("other"), Cost: 1})
	failWith(e.inner, limiter.Unavailable)
	if d := e.eval(take(p))[0].Decision; d.Allowed || d.Fallback != limiter.FailLocal {
		t.Fatalf("next outage with the share held: %+v, want the share full", d)
	}
	failWith(e.inner, 0)
	e.eval(release(p, held))
	failWith(e.inner, limiter.Unavailable)
	if d := e.eval(take(p))[0].Decision; !d.Consumed {
		t.Fatalf("after the local release: %+v, want a local lease", d)
	}
}
