package rls

import (
	"fmt"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/failover"
)

// recordingObserver keeps every observation, as text.
type recordingObserver struct {
	mu     sync.Mutex
	limits []string
	calls  []string
}

func (r *recordingObserver) ObserveLimit(o LimitObservation) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.limits = append(r.limits, fmt.Sprintf("%s hits=%d over=%v shadow=%v failed=%v decided=%v limit=%d remaining=%d consumed=%v",
		o.Rule.StatKey, o.Hits, o.Over, o.Shadow, o.StoreFailed, o.Decided, o.Limit, o.Remaining, o.Consumed))
}

func (r *recordingObserver) ObserveCall(o CallObservation) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, fmt.Sprintf("%v failed=%v", o.Code, o.StoreFailed))
}

func (r *recordingObserver) take() (limits, calls []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	limits, calls = r.limits, r.calls
	r.limits, r.calls = nil, nil
	return limits, calls
}

// TestObserver scripts calls through every kind of limit the observer
// hears about, and checks what it hears, step by step.
func TestObserver(t *testing.T) {
	rec := &recordingObserver{}
	e := newRealEnv(t, func(c *Config) { c.Observer = rec })
	steps := []struct {
		run        func()
		limits     []string
		calls      []string
		failStore  bool
		storeCalls bool
	}{
		{run: func() { e.call(t, request("rls", withHits(desc("user", "alice"), 2))) },
			limits: []string{"rls.user hits=2 over=false shadow=false failed=false decided=true limit=3 remaining=1 consumed=true"},
			calls:  []string{"OK failed=false"}},
		{run: func() { e.call(t, request("rls", withHits(desc("user", "alice"), 2))) },
			limits: []string{"rls.user hits=2 over=true shadow=false failed=false decided=true limit=3 remaining=1 consumed=false"},
			calls:  []string{"OK failed=false"}},
		// A configured value is in the key; the user limit allowed but the
		// route denied, so nothing was consumed.
		{run: func() {
			e.call(t, request("rls", desc("route", "/tight")))
			e.call(t, request("rls", desc("user", "bob"), desc("route", "/tight")))
		},
			limits: []string{
				"rls.route_/tight hits=1 over=false shadow=false failed=false decided=true limit=1 remaining=0 consumed=true",
				"rls.user hits=1 over=false shadow=false failed=false decided=true limit=3 remaining=3 consumed=false",
				"rls.route_/tight hits=1 over=true shadow=false failed=false decided=true limit=1 remaining=0 consumed=false",
			},
			calls: []string{"OK failed=false", "OK failed=false"}},
		{run: func() {
			e.call(t, request("rls", desc("shadow", "x")))
			e.call(t, request("rls", desc("shadow", "x")))
		},
			limits: []string{
				"rls.shadow hits=1 over=false shadow=true failed=false decided=true limit=1 remaining=0 consumed=true",
				"rls.shadow hits=1 over=true shadow=true failed=false decided=true limit=1 remaining=0 consumed=false",
			},
			calls: []string{"OK failed=false", "OK failed=false"}},
		// Never fits: no decision. Unlimited, unmatched: nothing.
		{run: func() { e.call(t, request("rls", desc("blocked", "x"), desc("internal", "y"), desc("nothing", "z"))) },
			limits: []string{"rls.blocked hits=1 over=true shadow=false failed=false decided=false limit=0 remaining=0 consumed=false"},
			calls:  []string{"OK failed=false"}},
		{failStore: true, run: func() { e.call(t, request("rls", desc("fail_closed", "x"))) },
			limits: []string{"rls.fail_closed hits=1 over=true shadow=false failed=true decided=false limit=0 remaining=0 consumed=false"},
			calls:  []string{"OK failed=true"}},
		{run: func() { _, _ = e.client.ShouldRateLimit(t.Context(), request("")) },
			calls: []string{codes.InvalidArgument.String() + " failed=false"}},
	}
	for i, st := range steps {
		e.store.mu.Lock()
		e.store.fail = 0
		if st.failStore {
			e.store.fail = limiter.Unavailable
		}
		e.store.mu.Unlock()
		st.run()
		limits, calls := rec.take()
		if fmt.Sprint(limits) != fmt.Sprint(st.limits) {
			t.Errorf("step %d: limits\n got %q\nwant %q", i, limits, st.limits)
		}
		if fmt.Sprint(calls) != fmt.Sprint(st.calls) {
			t.Errorf("step %d: calls %q, want %q", i, calls, st.calls)
		}
	}
}

// TestObserverLocalFallback: a call decided by the local fallback while the
// store fails is a store failure for the call, and a decision for the limit.
func TestObserverLocalFallback(t *testing.T) {
	rec := &recordingObserver{}
	e := newLocalEnv(t, failover.Config{Replicas: 2})
	e.srv.observer = rec
	e.setFail(limiter.Unavailable)
	e.call(t, request("loc", desc("local", "a")))
	limits, calls := rec.take()
	if want := []string{"loc.local hits=1 over=false shadow=false failed=false decided=true limit=5 remaining=4 consumed=true"}; fmt.Sprint(limits) != fmt.Sprint(want) {
		t.Errorf("limits\n got %q\nwant %q", limits, want)
	}
	if want := []string{"OK failed=true"}; fmt.Sprint(calls) != fmt.Sprint(want) {
		t.Errorf("calls %q, want %q", calls, want)
	}
}
