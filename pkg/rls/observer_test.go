package rls

import (
	"context"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/failover"
)

// lines records text lines; safe for concurrent use.
type lines struct {
	mu    sync.Mutex
	lines []string
}

func (l *lines) addf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

// take returns the lines recorded since the last take.
func (l *lines) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.lines
	l.lines = nil
	return out
}

// recordingObserver keeps every observation, as text.
type recordingObserver struct{ limits, calls lines }

func (r *recordingObserver) ObserveLimit(o LimitObservation) {
	r.limits.addf("%s hits=%d over=%v shadow=%v failed=%v decided=%v limit=%d remaining=%d consumed=%v",
		o.Rule.StatKey, o.Hits, o.Over, o.Shadow, o.StoreFailed, o.Decided, o.Limit, o.Remaining, o.Consumed)
}

func (r *recordingObserver) ObserveCall(o CallObservation) {
	r.calls.addf("%v failed=%v", o.Code, o.StoreFailed)
}

func (r *recordingObserver) take() (limits, calls []string) { return r.limits.take(), r.calls.take() }

// TestObserver scripts calls through every kind of limit the observer
// hears about, and checks what it hears, step by step.
func TestObserver(t *testing.T) {
	rec := &recordingObserver{}
	e := newRealEnv(t, func(c *Config) { c.Observer = rec })
	steps := []struct {
		run    func()
		limits []string
		calls  []string
		fail   limiter.OutcomeKind
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
		{fail: limiter.Unavailable, run: func() { e.call(t, request("rls", desc("fail_closed", "x"))) },
			limits: []string{"rls.fail_closed hits=1 over=true shadow=false failed=true decided=false limit=0 remaining=0 consumed=false"},
			calls:  []string{"OK failed=true"}},
		{run: func() { _, _ = e.client.ShouldRateLimit(t.Context(), request("")) },
			calls: []string{codes.InvalidArgument.String() + " failed=false"}},
	}
	for i, st := range steps {
		e.setFail(st.fail)
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

// recordingAuditor keeps every denial, as text and as given.
type recordingAuditor struct {
	denials lines
	mu      sync.Mutex
	raw     []Denial
}

func (r *recordingAuditor) Denied(d Denial) {
	r.denials.addf("%s %s cost=%d limit=%d remaining=%d retry=%v shadow=%v failure=%v mode=%q id=%q",
		d.Domain, d.PolicyID, d.Cost, d.Limit, d.Remaining, d.RetryAfter, d.Shadow, d.StoreFailed, d.FailureMode, d.RequestID)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.raw = append(r.raw, d)
}

func (r *recordingAuditor) take() []string { return r.denials.take() }

// TestAuditorHearsDenialsOnly scripts calls through every kind of limit and
// checks that the auditor hears exactly the denials (shadow ones flagged),
// step by step.
func TestAuditorHearsDenialsOnly(t *testing.T) {
	rec := &recordingAuditor{}
	e := newRealEnv(t, func(c *Config) { c.Auditor = rec })
	steps := []struct {
		run  func()
		want []string
		fail limiter.OutcomeKind
	}{
		{run: func() {
			for range 3 {
				e.call(t, request("rls", desc("user", "alice")))
			}
		}},
		{run: func() { e.call(t, request("rls", withHits(desc("user", "alice"), 2))) },
			want: []string{`rls rls:per-user cost=2 limit=3 remaining=0 retry=50s shadow=false failure=false mode="" id=""`}},
		// Shadow: answered OK, audited as a shadow denial.
		{run: func() {
			e.call(t, request("rls", desc("shadow", "x")))
			e.call(t, request("rls", desc("shadow", "x")))
		},
			want: []string{`rls rls/shadow cost=1 limit=1 remaining=0 retry=50s shadow=true failure=false mode="" id=""`}},
		// Quota mode: one descriptor over while the other allows is no
		// denial.
		{run: func() {
			e.call(t, request("rls", desc("quota_a", "q"), desc("quota_b", "q")))
			e.call(t, request("rls", desc("quota_a", "q"), desc("quota_b", "q")))
		}},
		// Never fits; unlimited and unmatched say nothing.
		{run: func() { e.call(t, request("rls", desc("blocked", "x"), desc("internal", "y"), desc("nothing", "z"))) },
			want: []string{`rls rls/blocked cost=1 limit=0 remaining=0 retry=59m50s shadow=false failure=false mode="" id=""`}},
		// A failed store: fail open is no denial, fail closed is one.
		{fail: limiter.Unavailable, run: func() { e.call(t, request("rls", desc("fail_open", "x"), desc("fail_closed", "x"))) },
			want: []string{`rls rls/fail_closed cost=1 limit=5 remaining=0 retry=2.5s shadow=false failure=true mode="closed" id=""`}},
	}
	for i, st := range steps {
		e.setFail(st.fail)
		st.run()
		if got := rec.take(); fmt.Sprint(got) != fmt.Sprint(st.want) {
			t.Errorf("step %d: denials\n got %q\nwant %q", i, got, st.want)
		}
	}
}

// TestAuditorRequestIDAndPrivacy: the denial carries the x-request-id
// metadata and the subject digest, never the raw descriptor value.
func TestAuditorRequestIDAndPrivacy(t *testing.T) {
	rec := &recordingAuditor{}
	e := newRealEnv(t, func(c *Config) { c.Auditor = rec })
	const raw = "raw-user-value-7f3a"
	ctx, cancel := context.WithTimeout(metadataContext("x-request-id", "req-42"), 5*time.Second)
	defer cancel()
	for range 4 {
		if _, err := e.client.ShouldRateLimit(ctx, request("rls", desc("user", raw))); err != nil {
			t.Fatal(err)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.raw) != 1 {
		t.Fatalf("%d denials, want 1: %q", len(rec.raw), rec.take())
	}
	d := rec.raw[0]
	if d.RequestID != "req-42" {
		t.Errorf("request id %q, want req-42", d.RequestID)
	}
	if d.Subject == (limiter.SubjectDigest{}) {
		t.Error("no subject digest")
	}
	if !d.Time.Equal(t0) {
		t.Errorf("time %v, want the store clock's %v", d.Time, t0)
	}
	all := fmt.Sprintf("%+v %s", d, hex.EncodeToString(d.Subject[:]))
	if strings.Contains(all, raw) {
		t.Errorf("the denial carries the raw value: %s", all)
	}
}

// TestRequestIDDescriptor: with RequestIDKey set, a descriptor of that one
// key carries the request id: it is never matched (here a rule would limit
// it), and its value wins over the x-request-id metadata.
func TestRequestIDDescriptor(t *testing.T) {
	rec := &recordingAuditor{}
	e := newRealEnv(t, func(c *Config) { c.Auditor = rec; c.RequestIDKey = "user" })
	ctx, cancel := context.WithTimeout(metadataContext("x-request-id", "from-metadata"), 5*time.Second)
	defer cancel()
	long := strings.Repeat("r", 200)
	for i, id := range []string{"from-descriptor", "again", "and-again", "fourth", long} {
		resp, err := e.client.ShouldRateLimit(ctx, request("rls", desc("user", id), desc("blocked", "x")))
		if err != nil {
			t.Fatal(err)
		}
		if st := resp.Statuses[0]; st.Code.String() != "OK" || st.CurrentLimit != nil {
			t.Fatalf("call %d: the request id descriptor was answered %v", i, st)
		}
	}
	got := rec.take()
	if len(got) != 5 {
		t.Fatalf("%d denials, want 5: %q", len(got), got)
	}
	if !strings.HasSuffix(got[0], `id="from-descriptor"`) || !strings.HasSuffix(got[4], `id="`+long[:128]+`"`) {
		t.Errorf("denials %q", got)
	}
	// Without the descriptor, the metadata.
	e.call(t, request("rls", desc("blocked", "x")))
	if _, err := e.client.ShouldRateLimit(ctx, request("rls", desc("blocked", "x"))); err != nil {
		t.Fatal(err)
	}
	if got := rec.take(); len(got) != 2 || !strings.HasSuffix(got[0], `id=""`) || !strings.HasSuffix(got[1], `id="from-metadata"`) {
		t.Errorf("denials %q", got)
	}
}

// hits_total adds each decision's cost whatever its result, at most the
// limit (a probe adds 0), and the duration histograms carry the configured
// domain or "unknown".
func TestHitsAndDurationMetrics(t *testing.T) {
	e := newRealEnv(t)
	e.call(t, request("rls", withHits(desc("user", "volume"), 2)))
	e.call(t, request("rls", withHits(desc("user", "volume"), 5))) // above the limit of 3: denied without asking the store, counted as 3
	e.call(t, request("rls", withHits(desc("user", "volume"), 0))) // a probe
	e.call(t, request("not-configured", desc("user", "volume")))
	m := e.metrics(t)
	for series, want := range map[string]string{
		`envoy_rls_hits_total{domain="rls",policy="rls:per-user"}`:                          "5",
		`envoy_rls_decisions_total{domain="rls",policy="rls:per-user",result="ok"}`:         "2",
		`envoy_rls_decisions_total{domain="rls",policy="rls:per-user",result="over_limit"}`: "1",
		`envoy_rls_call_duration_seconds_count{domain="rls"}`:                               "3",
		`envoy_rls_call_duration_seconds_count{domain="unknown"}`:                           "1",
		`envoy_rls_store_duration_seconds_count{domain="rls"}`:                              "2",
	} {
		if got := counterValue(m, series); got != want {
			t.Errorf("%s = %q, want %s", series, got, want)
		}
	}
}
