package rlqs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/internal/rlstest"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/leases"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/memory"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
)

// testRules: a tenant's limit of 600 a minute (10/s), a concurrency limit
// RLQS refuses (failure mode closed: DENY_ALL), an unlimited key and a
// limit of 0.
const testRules = `
domain: app
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 600}
  - key: jobs
    rate_limit: {concurrency: 5, lease_ttl: 10m, failure_mode: closed}
  - key: free
    rate_limit: {unlimited: true}
  - key: banned
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: trial
    rate_limit: {unit: minute, requests_per_unit: 0}
    shadow_mode: true
`

var t0 = time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)

// harness is a Service on a memory store over an in-memory gRPC
// connection, with an RLS server on the same rules and store; the test
// drives its ticks.
type harness struct {
	svc   *Service
	conn  *grpc.ClientConn
	clock *limitertest.Clock
	snap  *descriptors.Snapshot
	store limiter.Store
}

func newHarness(t *testing.T, rules string, cfg Config) *harness {
	t.Helper()
	snap := rlstest.LoadRules(t, rlstest.WriteRules(t, t.TempDir(), rules), []byte("rlqs-test-secret-0123456789abcdef"))
	clock := limitertest.NewClock(t0)
	mem, err := memory.New(memory.Config{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	store := leases.New(mem, mem)
	cfg.Rules, cfg.Store, cfg.Clock = func() *descriptors.Snapshot { return snap }, store, clock
	svc, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m, err := rls.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	rlsSvc, err := rls.New(rls.Config{Rules: func() rls.Rules { return snap }, Store: store, Clock: clock, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	conn := rlstest.Serve(t, func(gs grpc.ServiceRegistrar) {
		rlqsv3.RegisterRateLimitQuotaServiceServer(gs, svc)
		rlsv3.RegisterRateLimitServiceServer(gs, rlsSvc)
	})
	return &harness{svc: svc, conn: conn, clock: clock, snap: snap, store: store}
}

// proxy is one raw RLQS stream.
type proxy struct {
	t      *testing.T
	stream rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient
	cancel context.CancelFunc
}

func (h *harness) proxy(t *testing.T) *proxy {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	st, err := rlqsv3.NewRateLimitQuotaServiceClient(h.conn).StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return &proxy{t: t, stream: st, cancel: cancel}
}

// usage is a bucket's report.
func usage(allowed, denied uint64, kv ...string) *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{BucketId: &rlqsv3.BucketId{Bucket: m},
		TimeElapsed: durationpb.New(0), NumRequestsAllowed: allowed, NumRequestsDenied: denied}
}

func (p *proxy) report(domain string, us ...*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage) {
	p.t.Helper()
	if err := p.stream.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: domain, BucketQuotaUsages: us}); err != nil {
		p.t.Fatalf("report: %v", err)
	}
}

// recv reads one response within 5 s; every response the service sends
// must pass the protocol's validation.
func (p *proxy) recv() (*rlqsv3.RateLimitQuotaResponse, error) {
	p.t.Helper()
	type res struct {
		r   *rlqsv3.RateLimitQuotaResponse
		err error
	}
	ch := make(chan res, 1)
	go func() {
		r, err := p.stream.Recv()
		ch <- res{r, err}
	}()
	select {
	case r := <-ch:
		if r.err == nil {
			if err := r.r.ValidateAll(); err != nil {
				p.t.Fatalf("a response that does not validate: %v\n%v", err, r.r)
			}
		}
		return r.r, r.err
	case <-time.After(5 * time.Second):
		p.t.Fatal("no response within 5s")
	}
	return nil, nil
}

// assignment reads a response and returns the assignment of its one
// bucket action.
func (p *proxy) assignment() (*typev3.RateLimitStrategy, time.Duration) {
	p.t.Helper()
	r, err := p.recv()
	if err != nil {
		p.t.Fatalf("recv: %v", err)
	}
	if len(r.BucketAction) != 1 {
		p.t.Fatalf("%d bucket actions, want 1: %v", len(r.BucketAction), r)
	}
	qa := r.BucketAction[0].GetQuotaAssignmentAction()
	if qa == nil {
		p.t.Fatalf("not an assignment: %v", r.BucketAction[0])
	}
	return qa.GetRateLimitStrategy(), qa.GetAssignmentTimeToLive().AsDuration()
}

// waitSubscribed waits until the service holds n subscriptions.
func (h *harness) waitSubscribed(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		h.svc.mu.Lock()
		got := 0
		for st := range h.svc.streams {
			got += len(st.subs)
		}
		h.svc.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d subscriptions, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestAssignsTheLimitAmongProxies: one proxy reporting a bucket is
// assigned the limit's rate (a token bucket of about 10 a second: what is
// left of the window over the time left) once a tick has read the state;
// a second proxy on the same bucket halves it, as neither has shown a
// demand yet.
func TestAssignsTheLimitAmongProxies(t *testing.T) {
	h := newHarness(t, testRules, Config{})
	a := h.proxy(t)
	a.report("app", usage(1, 0, "tenant", "rawval-acme"))
	h.waitSubscribed(t, 1)
	h.svc.Tick(context.Background())
	s, ttl := a.assignment()
	if got := strategyRate(s); got < 9_000 || got > 10_000 {
		t.Fatalf("one proxy: %v (%d mrps), want about 10/s", s, got)
	}
	if ttl < 2*time.Second {
		t.Fatalf("ttl %v, want at least 2s", ttl)
	}
	b := h.proxy(t)
	b.report("app", usage(1, 0, "tenant", "rawval-acme"))
	h.waitSubscribed(t, 2)
	h.clock.Advance(time.Second)
	h.svc.Tick(context.Background())
	sa, _ := a.assignment()
	sb, _ := b.assignment()
	ra, rb := strategyRate(sa), strategyRate(sb)
	// What is left of the minute (598 of 600) over the time left (59 s):
	// 10.13/s together.
	if ra+rb > 10_136 || ra < 4_500 || rb < 4_500 {
		t.Fatalf("two proxies: %d and %d mrps, want about 5/s each and at most 10.13/s together", ra, rb)
	}
}

// TestFixedBlankets: a bucket no rule limits and an unlimited one are
// allowed, a limit of 0 denied (but in shadow mode allowed), a
// concurrency limit (no quota) answered by its failure mode (closed:
// denied), each at once.
func TestFixedBlankets(t *testing.T) {
	h := newHarness(t, testRules, Config{})
	for _, c := range []struct {
		kv    []string
		allow bool
	}{
		{[]string{"nobody", "rawval-x"}, true},
		{[]string{"free", "rawval-x"}, true},
		{[]string{"banned", "rawval-x"}, false},
		{[]string{"jobs", "rawval-x"}, false},
		{[]string{"trial", "rawval-x"}, true}, // shadow mode never denies
	} {
		p := h.proxy(t)
		p.report("app", usage(1, 0, c.kv...))
		s, _ := p.assignment()
		if want := blanket(c.allow); s.GetBlanketRule() != want.GetBlanketRule() || s.GetTokenBucket() != nil {
			t.Errorf("%v: %v, want %v", c.kv, s, want)
		}
	}
}

// TestReportsChargeTheRLSBudget: what the proxies report admitted is
// charged to the state RLS decides from: after 590 of 600 reported, RLS
// admits 10 more.
func TestReportsChargeTheRLSBudget(t *testing.T) {
	h := newHarness(t, testRules, Config{})
	p := h.proxy(t)
	p.report("app", usage(590, 0, "tenant", "rawval-acme"))
	h.waitSubscribed(t, 1)
	h.svc.Tick(context.Background())
	c := rlsv3.NewRateLimitServiceClient(h.conn)
	req := rlstest.Request("app", rlstest.Desc("tenant", "rawval-acme"))
	codes := make([]rlsv3.RateLimitResponse_Code, 11)
	for i := range codes {
		codes[i] = rlsv3.RateLimitResponse_OK
	}
	codes[10] = rlsv3.RateLimitResponse_OVER_LIMIT
	rlstest.WantCodes(t, c, req, codes...)
	// And what RLS took is what the next assignment divides: nothing.
	p.assignment()
	h.clock.Advance(time.Second)
	h.svc.Tick(context.Background())
	if s, _ := p.assignment(); strategyRate(s) != 0 {
		t.Fatalf("after the budget is spent: %v, want nothing admitted", s)
	}
}

// TestBadStreams: a stream that breaks a rule ends with a status naming
// the bound, never a value.
func TestBadStreams(t *testing.T) {
	h := newHarness(t, testRules, Config{Limits: Limits{BucketsPerStream: 2, ReportsPerSecond: 1, ReportBurst: 3}})
	many := make([]string, 0, 34)
	for i := range 17 {
		many = append(many, "k"+string(rune('a'+i)), "rawval-v")
	}
	for name, c := range map[string]struct {
		reports [][]*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage
		domains []string
		code    codes.Code
	}{
		"no domain":       {[][]*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{usage(1, 0, "tenant", "rawval-a")}}, []string{""}, codes.InvalidArgument},
		"another domain":  {[][]*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{usage(1, 0, "tenant", "rawval-a")}, {usage(1, 0, "tenant", "rawval-a")}}, []string{"app", "rawval-other"}, codes.InvalidArgument},
		"17 entries":      {[][]*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{usage(1, 0, many...)}}, []string{"app"}, codes.InvalidArgument},
		"an empty bucket": {[][]*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{usage(1, 0)}}, []string{"app"}, codes.InvalidArgument},
		"too many buckets": {[][]*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{usage(1, 0, "tenant", "rawval-a"), usage(1, 0, "tenant", "rawval-b"), usage(1, 0, "tenant", "rawval-c")}},
			[]string{"app"}, codes.ResourceExhausted},
		"a flood": {[][]*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{usage(1, 0, "tenant", "rawval-a")}, {usage(1, 0, "tenant", "rawval-a")},
			{usage(1, 0, "tenant", "rawval-a")}, {usage(1, 0, "tenant", "rawval-a")}}, []string{"app", "", "", ""}, codes.ResourceExhausted},
	} {
		t.Run(name, func(t *testing.T) {
			p := h.proxy(t)
			for i, r := range c.reports {
				if err := p.stream.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: c.domains[i], BucketQuotaUsages: r}); err != nil {
					break
				}
			}
			for {
				_, err := p.recv()
				if err == nil {
					continue
				}
				st, _ := status.FromError(err)
				if st.Code() != c.code || strings.Contains(st.Message(), "rawval") {
					t.Fatalf("stream ended with %v, want %v without a request value", err, c.code)
				}
				return
			}
		})
	}
}

// TestStopExpiresAssignments: Stop sends every bucket its assignment with
// a time to live of 0, then ends the stream (Unavailable).
func TestStopExpiresAssignments(t *testing.T) {
	h := newHarness(t, testRules, Config{})
	p := h.proxy(t)
	p.report("app", usage(1, 0, "tenant", "rawval-acme"))
	h.waitSubscribed(t, 1)
	h.svc.Tick(context.Background())
	before, _ := p.assignment()
	done := make(chan struct{})
	go func() {
		h.svc.Stop()
		close(done)
	}()
	s, ttl := p.assignment()
	if ttl != 0 || strategyRate(s) != strategyRate(before) {
		t.Fatalf("at stop: %v for %v, want the last assignment for 0s", s, ttl)
	}
	_, err := p.recv()
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("after stop: %v, want Unavailable", err)
	}
	<-done
	q := h.proxy(t)
	q.report("app", usage(1, 0, "tenant", "rawval-acme"))
	if _, err := q.recv(); status.Code(err) != codes.Unavailable && !errors.Is(err, context.Canceled) {
		t.Fatalf("a stream after stop: %v, want Unavailable", err)
	}
}

// TestIdleProxyBesideNewOneHasAQuota: a proxy that has reported no
// request since subscribing, beside one that reported once (its demand
// unknown), is still assigned a quota, not DENY_ALL: its next request
// must not be denied for a limit far from spent.
func TestIdleProxyBesideNewOneHasAQuota(t *testing.T) {
	h := newHarness(t, testRules, Config{})
	idle := h.proxy(t)
	idle.report("app", usage(0, 0, "tenant", "rawval-acme"))
	h.waitSubscribed(t, 1)
	h.clock.Advance(time.Second)
	idle.report("app", usage(0, 0, "tenant", "rawval-acme"))
	fresh := h.proxy(t)
	fresh.report("app", usage(1, 0, "tenant", "rawval-acme"))
	h.waitSubscribed(t, 2)
	deadline := time.Now().Add(5 * time.Second)
	for {
		h.svc.mu.Lock()
		reports := h.svc.reports
		h.svc.mu.Unlock()
		if reports == 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	h.svc.Tick(context.Background())
	if s, _ := idle.assignment(); strategyRate(s) < 1000 {
		t.Fatalf("the idle proxy: %v, want a quota of a request a second at least", s)
	}
	if s, _ := fresh.assignment(); strategyRate(s) < 4_000 {
		t.Fatalf("the new proxy: %v, want about the rest of 10/s", s)
	}
}

// TestDeniedReported: what the proxies of a subject reported denying
// since the last tick reaches Config.Denied (the audit sink) once, with
// the limit and what remains of it, and never a request value.
func TestDeniedReported(t *testing.T) {
	var got []Denial
	h := newHarness(t, testRules, Config{Denied: func(d Denial) { got = append(got, d) }})
	p := h.proxy(t)
	p.report("app", usage(5, 7, "tenant", "rawval-acme"))
	h.waitSubscribed(t, 1)
	h.svc.Tick(context.Background())
	h.clock.Advance(time.Second)
	h.svc.Tick(context.Background())
	if len(got) != 1 || got[0].Denied != 7 || got[0].PolicyID != "app/tenant" || got[0].Limit != 600 || got[0].Remaining != 595 {
		t.Fatalf("denials %+v, want one of 7 on app/tenant with 595 of 600 left", got)
	}
	if strings.Contains(fmt.Sprintf("%+v", got), "rawval") {
		t.Fatalf("a request value in %+v", got)
	}
}

// TestCalendarWindowAssignsTheRestOverTheTimeLeft: a calendar day's
// limit is divided as what is left of the day over the time left of it in
// its time zone: at noon UTC on a New York day that began at 05:00 UTC,
// 17 hours remain of 24,000.
func TestCalendarWindowAssignsTheRestOverTheTimeLeft(t *testing.T) {
	h := newHarness(t, `
domain: app
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 24000, calendar: true, time_zone: America/New_York}
`, Config{})
	p := h.proxy(t)
	p.report("app", usage(0, 0, "user", "rawval-u"))
	h.waitSubscribed(t, 1)
	h.svc.Tick(context.Background())
	s, _ := p.assignment()
	want := int64(24000 * 1_000_000 / (17 * 3600 * 1000)) // mrps
	if got := strategyRate(s); got > want || got < want*95/100 {
		t.Fatalf("at noon UTC: %v (%d mrps), want about %d (24,000 over the 17 hours left)", s, got, want)
	}
}
