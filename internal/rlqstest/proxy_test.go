package rlqstest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"sync"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/internal/polltest"
)

const wait = 10 * time.Second

// fakeServer is an RLQS server that records every report and sends what
// the test pushes.
type fakeServer struct {
	rlqsv3.UnimplementedRateLimitQuotaServiceServer
	gs   *grpc.Server
	addr string

	mu      sync.Mutex
	streams []*fakeStream
}

type fakeStream struct {
	out     chan *rlqsv3.RateLimitQuotaResponse
	end     chan error
	reports []*rlqsv3.RateLimitQuotaUsageReports
}

func startServer(t *testing.T) *fakeServer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeServer{gs: grpc.NewServer(), addr: lis.Addr().String()}
	rlqsv3.RegisterRateLimitQuotaServiceServer(f.gs, f)
	go func() { _ = f.gs.Serve(lis) }()
	t.Cleanup(f.gs.Stop)
	return f
}

// deadAddr is a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	return addr
}

func (f *fakeServer) StreamRateLimitQuotas(st rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasServer) error {
	fs := &fakeStream{out: make(chan *rlqsv3.RateLimitQuotaResponse, 16), end: make(chan error, 1)}
	f.mu.Lock()
	f.streams = append(f.streams, fs)
	f.mu.Unlock()
	recvErr := make(chan error, 1)
	go func() {
		for {
			r, err := st.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			f.mu.Lock()
			fs.reports = append(fs.reports, r)
			f.mu.Unlock()
		}
	}()
	for {
		select {
		case r := <-fs.out:
			if err := st.Send(r); err != nil {
				return err
			}
		case err := <-fs.end:
			return err
		case err := <-recvErr:
			return err
		}
	}
}

// reports returns the reports received, per stream.
func (f *fakeServer) reports() [][]*rlqsv3.RateLimitQuotaUsageReports {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([][]*rlqsv3.RateLimitQuotaUsageReports, len(f.streams))
	for i, s := range f.streams {
		out[i] = append([]*rlqsv3.RateLimitQuotaUsageReports(nil), s.reports...)
	}
	return out
}

// waitReports waits until n reports have arrived on every stream together
// and returns them in order.
func (f *fakeServer) waitReports(t *testing.T, n int) []*rlqsv3.RateLimitQuotaUsageReports {
	t.Helper()
	var all []*rlqsv3.RateLimitQuotaUsageReports
	polltest.Eventually(t, wait, time.Millisecond, fmt.Sprintf("%d reports", n), func() error {
		all = all[:0]
		for _, s := range f.reports() {
			all = append(all, s...)
		}
		if len(all) < n {
			return fmt.Errorf("%d reports", len(all))
		}
		return nil
	})
	return all
}

// latest returns the newest stream, waiting for one.
func (f *fakeServer) latest(t *testing.T) *fakeStream {
	t.Helper()
	var s *fakeStream
	polltest.Eventually(t, wait, time.Millisecond, "a stream", func() error {
		f.mu.Lock()
		defer f.mu.Unlock()
		if len(f.streams) == 0 {
			return errors.New("none")
		}
		s = f.streams[len(f.streams)-1]
		return nil
	})
	return s
}

// push sends actions on the newest stream.
func (f *fakeServer) push(t *testing.T, actions ...*rlqsv3.RateLimitQuotaResponse_BucketAction) {
	t.Helper()
	f.latest(t).out <- &rlqsv3.RateLimitQuotaResponse{BucketAction: actions}
}

func assign(b map[string]string, s *typev3.RateLimitStrategy, ttl *durationpb.Duration) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	return &rlqsv3.RateLimitQuotaResponse_BucketAction{
		BucketId: &rlqsv3.BucketId{Bucket: b},
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
			QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
				AssignmentTimeToLive: ttl,
				RateLimitStrategy:    s,
			},
		},
	}
}

func abandon(b map[string]string) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	return &rlqsv3.RateLimitQuotaResponse_BucketAction{
		BucketId: &rlqsv3.BucketId{Bucket: b},
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_{
			AbandonAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction{},
		},
	}
}

func blanket(r typev3.RateLimitStrategy_BlanketRule) *typev3.RateLimitStrategy {
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: r}}
}

var (
	allowAll = blanket(typev3.RateLimitStrategy_ALLOW_ALL)
	denyAll  = blanket(typev3.RateLimitStrategy_DENY_ALL)
	perTime  = &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_RequestsPerTimeUnit_{
		RequestsPerTimeUnit: &typev3.RateLimitStrategy_RequestsPerTimeUnit{RequestsPerTimeUnit: 1, TimeUnit: typev3.RateLimitUnit_SECOND}}}
)

func tokens(maxTokens, perFill uint32, interval time.Duration) *typev3.RateLimitStrategy {
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
		MaxTokens: maxTokens, TokensPerFill: wrapperspb.UInt32(perFill), FillInterval: durationpb.New(interval)}}}
}

// setup starts a server and a proxy on it ticking only by hand, on a fake
// clock.
func setup(t *testing.T, cfg Config) (*fakeServer, *Proxy, *limitertest.Clock) {
	t.Helper()
	srv := startServer(t)
	clock := limitertest.NewClock(time.Unix(1_700_000_000, 0))
	cfg.Domain = "d"
	if cfg.Targets == nil {
		cfg.Targets = []string{srv.addr}
	}
	if cfg.Interval == 0 {
		cfg.Interval = time.Hour
	}
	if cfg.Clock == nil {
		cfg.Clock = clock
	}
	return srv, start(t, cfg), clock
}

func start(t *testing.T, cfg Config) *Proxy {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p.Start(context.Background())
	t.Cleanup(p.Stop)
	return p
}

// waitStats waits until cond holds for the proxy's stats.
func waitStats(t *testing.T, p *Proxy, what string, cond func(Stats) bool) {
	t.Helper()
	polltest.Eventually(t, wait, time.Millisecond, what, func() error {
		if s := p.Stats(); !cond(s) {
			return fmt.Errorf("stats %+v", s)
		}
		return nil
	})
}

// admit sends n requests of b and returns how many were allowed.
func admit(p *Proxy, b map[string]string, n int) int {
	got := 0
	for range n {
		if p.Request(b) {
			got++
		}
	}
	return got
}

// usage is one bucket's usage in a report, as the test checks it.
type usage struct {
	allowed, denied uint64
	elapsed         int64
}

func usages(t *testing.T, r *rlqsv3.RateLimitQuotaUsageReports) map[string]usage {
	t.Helper()
	if r.GetDomain() != "d" {
		t.Fatalf("report with domain %q, want d", r.GetDomain())
	}
	out := map[string]usage{}
	for _, u := range r.GetBucketQuotaUsages() {
		if u.GetTimeElapsed() == nil {
			t.Fatalf("usage without time_elapsed: %v", u)
		}
		out[bucketKey(u.GetBucketId().GetBucket())] = usage{u.GetNumRequestsAllowed(), u.GetNumRequestsDenied(), u.GetTimeElapsed().GetSeconds()}
	}
	return out
}

func wantUsages(t *testing.T, r *rlqsv3.RateLimitQuotaUsageReports, want map[string]usage) {
	t.Helper()
	if got := usages(t, r); !maps.Equal(got, want) {
		t.Fatalf("report usages %v, want %v", got, want)
	}
}

var (
	bucketA = map[string]string{"user": "a", "route": "/x"}
	bucketB = map[string]string{"user": "b"}
	keyA    = bucketKey(bucketA)
	keyB    = bucketKey(bucketB)
)

// TestFirstRequest: the first request of a bucket is decided by the
// no-assignment behaviour (only DENY_ALL denies) and reported at once, alone,
// with time_elapsed 0; later ones wait for the tick, which reports the
// whole seconds since.
func TestFirstRequest(t *testing.T) {
	for _, tc := range []struct {
		name string
		no   *typev3.RateLimitStrategy
		want bool
	}{
		{"unset", nil, true},
		{"allow all", allowAll, true},
		{"deny all", denyAll, false},
		{"requests per time unit", perTime, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, p, clock := setup(t, Config{NoAssignment: tc.no})
			if got := p.Request(bucketA); got != tc.want {
				t.Fatalf("first request allowed=%v, want %v", got, tc.want)
			}
			one := usage{elapsed: 0}
			if tc.want {
				one.allowed = 1
			} else {
				one.denied = 1
			}
			wantUsages(t, srv.waitReports(t, 1)[0], map[string]usage{keyA: one})

			if got := admit(p, bucketA, 2); got != 2*int(one.allowed) {
				t.Fatalf("later requests: %d allowed, want %d", got, 2*one.allowed)
			}
			clock.Advance(1500 * time.Millisecond)
			p.Tick()
			rs := srv.waitReports(t, 2)
			wantUsages(t, rs[1], map[string]usage{keyA: {2 * one.allowed, 2 * one.denied, 1}})
			clock.Advance(700 * time.Millisecond)
			p.Tick()
			rs = srv.waitReports(t, 3)
			wantUsages(t, rs[2], map[string]usage{keyA: {0, 0, 0}})
			if len(rs) != 3 || len(srv.reports()) != 1 {
				t.Fatalf("%d reports on %d streams, want 3 on 1", len(rs), len(srv.reports()))
			}
		})
	}
}

// TestPeriodicReports: with the wall clock, every Interval reports every
// bucket, zero-usage ones included, and the counts add up to the requests.
func TestPeriodicReports(t *testing.T) {
	srv := startServer(t)
	p := start(t, Config{Domain: "d", Targets: []string{srv.addr}, Interval: MinInterval})
	admit(p, bucketA, 3)
	admit(p, bucketB, 1)
	polltest.Eventually(t, wait, 10*time.Millisecond, "reports of every request and a tick of idle buckets", func() error {
		sum := map[string]uint64{}
		idle := false
		for _, r := range srv.waitReports(t, 0) {
			us := usages(t, r)
			for k, u := range us {
				sum[k] += u.allowed + u.denied
			}
			idle = idle || maps.Equal(us, map[string]usage{keyA: {}, keyB: {}})
			if n := len(us); n != 1 && n != 2 {
				return fmt.Errorf("a report of %d buckets", n)
			}
		}
		if sum[keyA] != 3 || sum[keyB] != 1 || !idle {
			return fmt.Errorf("sums %v, idle tick seen %v", sum, idle)
		}
		return nil
	})
}

// TestTokenBucket: a token bucket assignment starts full and admits
// tokens_per_fill per fill_interval up to max_tokens, on the proxy's clock;
// the tick reports what it admitted and denied.
func TestTokenBucket(t *testing.T) {
	srv, p, clock := setup(t, Config{})
	p.Request(bucketA)
	srv.waitReports(t, 1)
	srv.push(t, assign(bucketA, tokens(5, 1, time.Second), durationpb.New(time.Minute)))
	waitStats(t, p, "assignment applied", func(s Stats) bool { return s.Assignments == 1 })

	allowed, denied := 0, 0
	for i, st := range []struct {
		advance time.Duration
		n, want int
	}{
		{0, 7, 5},                       // starts full
		{time.Second, 3, 1},             // one token a second
		{2500 * time.Millisecond, 3, 2}, // 2.5 tokens: the half stays
		{500 * time.Millisecond, 2, 1},  // the half and a half
		{30 * time.Second, 8, 5},        // no more than max_tokens
	} {
		clock.Advance(st.advance)
		if got := admit(p, bucketA, st.n); got != st.want {
			t.Fatalf("step %d: %d of %d allowed, want %d", i, got, st.n, st.want)
		}
		allowed, denied = allowed+st.want, denied+st.n-st.want
	}
	p.Tick()
	wantUsages(t, srv.waitReports(t, 2)[1], map[string]usage{keyA: {uint64(allowed), uint64(denied), 34}})
	if a, d := p.Counts(bucketA); a != uint64(allowed+1) || d != uint64(denied) {
		t.Fatalf("Counts %d, %d; want %d, %d", a, d, allowed+1, denied)
	}
}

// TestFillIntervalWholeSeconds: the fill rate divides by fill_interval
// truncated to whole seconds; under one second the bucket never empties.
func TestFillIntervalWholeSeconds(t *testing.T) {
	for _, tc := range []struct {
		name           string
		strategy       *typev3.RateLimitStrategy
		first, after1s int // allowed of 10 at once, then of 10 one second later
	}{
		{"1.5s counts as 1s", tokens(6, 3, 1500*time.Millisecond), 6, 3},
		{"2s", tokens(6, 3, 2*time.Second), 6, 1},
		{"unset tokens_per_fill is 0", &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{MaxTokens: 6, FillInterval: durationpb.New(time.Second)}}}, 6, 0},
		{"0.5s divides by zero", tokens(6, 3, 500*time.Millisecond), 10, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, p, clock := setup(t, Config{})
			p.Request(bucketA)
			srv.waitReports(t, 1)
			srv.push(t, assign(bucketA, tc.strategy, durationpb.New(time.Hour)))
			waitStats(t, p, "assignment applied", func(s Stats) bool { return s.Assignments == 1 })
			if got := admit(p, bucketA, 10); got != tc.first {
				t.Fatalf("at once: %d of 10 allowed, want %d", got, tc.first)
			}
			clock.Advance(time.Second)
			if got := admit(p, bucketA, 10); got != tc.after1s {
				t.Fatalf("1s later: %d of 10 allowed, want %d", got, tc.after1s)
			}
		})
	}
}

// TestTokenBucketReplaced: a different token bucket starts at the old one's
// ratio of remaining to maximum tokens; one Envoy counts as equal (it
// ignores fill_interval's seconds) keeps the tokens and the old rate; after
// a blanket rule a token bucket starts full.
func TestTokenBucketReplaced(t *testing.T) {
	srv, p, clock := setup(t, Config{})
	p.Request(bucketA)
	srv.waitReports(t, 1)
	for i, st := range []struct {
		strategy *typev3.RateLimitStrategy
		advance  time.Duration
		n, want  int
	}{
		{tokens(10, 1, 10*time.Second), 0, 6, 6},  // 4 of 10 left
		{tokens(20, 1, 10*time.Second), 0, 10, 8}, // starts at 20 × 0.4
		{tokens(20, 1, 20*time.Second), 0, 3, 0},  // equal for Envoy: empty still
		{nil, 10 * time.Second, 2, 1},             // refills at the kept 1 per 10 s
		{allowAll, 0, 3, 3},
		{tokens(4, 1, 10*time.Second), 0, 5, 4}, // after a blanket rule: full
	} {
		if st.strategy != nil {
			n := p.Stats().Assignments
			srv.push(t, assign(bucketA, st.strategy, durationpb.New(time.Hour)))
			waitStats(t, p, "assignment applied", func(s Stats) bool { return s.Assignments == n+1 })
		}
		clock.Advance(st.advance)
		if got := admit(p, bucketA, st.n); got != st.want {
			t.Fatalf("step %d: %d of %d allowed, want %d", i, got, st.n, st.want)
		}
	}
}

// TestTTL: an assignment holds for its TTL's whole seconds, then the bucket
// falls back to the no-assignment behaviour; the same assignment resent
// restarts the TTL.
func TestTTL(t *testing.T) {
	type step struct {
		push    *typev3.RateLimitStrategy
		ttl     time.Duration
		advance time.Duration
		want    bool
	}
	for _, tc := range []struct {
		name  string
		no    *typev3.RateLimitStrategy
		steps []step
	}{
		{"expires after its seconds", nil, []step{
			{push: denyAll, ttl: 2 * time.Second, want: false},
			{advance: 1999 * time.Millisecond, want: false},
			{advance: time.Millisecond, want: true},
		}},
		{"fraction of a second ignored", nil, []step{
			{push: denyAll, ttl: 1900 * time.Millisecond, want: false},
			{advance: 999 * time.Millisecond, want: false},
			{advance: time.Millisecond, want: true},
		}},
		{"back to DENY_ALL", denyAll, []step{
			{push: allowAll, ttl: 5 * time.Second, want: true},
			{advance: 5 * time.Second, want: false},
		}},
		{"resent extends", nil, []step{
			{push: denyAll, ttl: 2 * time.Second, want: false},
			{advance: 1500 * time.Millisecond, push: denyAll, ttl: 2 * time.Second, want: false},
			{advance: time.Second, want: false},
			{advance: time.Second, want: true},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, p, clock := setup(t, Config{NoAssignment: tc.no})
			p.Request(bucketA)
			srv.waitReports(t, 1)
			for i, st := range tc.steps {
				clock.Advance(st.advance)
				if st.push != nil {
					n := p.Stats().Assignments
					srv.push(t, assign(bucketA, st.push, durationpb.New(st.ttl)))
					waitStats(t, p, "assignment applied", func(s Stats) bool { return s.Assignments == n+1 })
				}
				if got := p.Request(bucketA); got != st.want {
					t.Fatalf("step %d: allowed=%v, want %v", i, got, st.want)
				}
			}
		})
	}
}

// TestShortTTL: an assignment with a TTL under one second, unset included,
// expires at once: the next request already has the no-assignment
// behaviour.
func TestShortTTL(t *testing.T) {
	srv, p, _ := setup(t, Config{})
	p.Request(bucketA)
	srv.waitReports(t, 1)
	for i, ttl := range []*durationpb.Duration{nil, durationpb.New(0), durationpb.New(900 * time.Millisecond)} {
		srv.push(t, assign(bucketA, denyAll, ttl))
		waitStats(t, p, "assignment applied", func(s Stats) bool { return s.Assignments == i+1 && s.ShortTTL == i+1 })
		if a, ok := p.Assignment(bucketA); !ok || a.TTL != ttl.AsDuration() || a.Strategy.GetBlanketRule() != typev3.RateLimitStrategy_DENY_ALL {
			t.Fatalf("ttl %v: Assignment %+v, %v", ttl, a, ok)
		}
		if !p.Request(bucketA) {
			t.Fatalf("ttl %v: a request was denied by an expired DENY_ALL", ttl)
		}
	}
}

// TestAbandon: an abandon action erases the bucket; the tick then reports
// no bucket, and the next request re-creates it and reports at once.
func TestAbandon(t *testing.T) {
	srv, p, clock := setup(t, Config{})
	p.Request(bucketA)
	srv.waitReports(t, 1)
	srv.push(t, assign(bucketA, denyAll, durationpb.New(time.Hour)))
	waitStats(t, p, "assignment applied", func(s Stats) bool { return s.Assignments == 1 })
	if p.Request(bucketA) {
		t.Fatal("DENY_ALL allowed a request")
	}
	srv.push(t, abandon(bucketA))
	waitStats(t, p, "abandon applied", func(s Stats) bool { return s.Abandons == 1 && s.Buckets == 0 })
	if _, ok := p.Assignment(bucketA); ok {
		t.Fatal("an abandoned bucket still has its assignment")
	}
	clock.Advance(3 * time.Second)
	p.Tick()
	wantUsages(t, srv.waitReports(t, 2)[1], map[string]usage{})
	if !p.Request(bucketA) {
		t.Fatal("the re-created bucket denied its first request")
	}
	wantUsages(t, srv.waitReports(t, 3)[2], map[string]usage{keyA: {1, 0, 0}})
}

// TestIgnoredActions: requests_per_time_unit and strategy-less assignments,
// and actions for no bucket or an unknown one, change nothing.
func TestIgnoredActions(t *testing.T) {
	srv, p, _ := setup(t, Config{})
	p.Request(bucketA)
	srv.waitReports(t, 1)
	srv.push(t, assign(bucketA, denyAll, durationpb.New(time.Hour)))
	waitStats(t, p, "assignment applied", func(s Stats) bool { return s.Assignments == 1 })
	srv.push(t,
		assign(bucketA, perTime, durationpb.New(time.Hour)),
		assign(bucketA, nil, durationpb.New(time.Hour)),
		assign(bucketB, allowAll, durationpb.New(time.Hour)),
		assign(nil, allowAll, durationpb.New(time.Hour)),
	)
	waitStats(t, p, "actions skipped", func(s Stats) bool { return s.Ignored == 4 })
	if p.Request(bucketA) {
		t.Fatal("a skipped action replaced DENY_ALL")
	}
	if a, _ := p.Assignment(bucketA); a.Strategy.GetBlanketRule() != typev3.RateLimitStrategy_DENY_ALL {
		t.Fatalf("Assignment %v, want the DENY_ALL", a.Strategy)
	}
	if s := p.Stats(); s.Assignments != 1 || s.Buckets != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// TestReconnect: when the server ends the stream, assignments hold; the
// next tick opens a new stream and reports every bucket on it, usage since
// the last report included.
func TestReconnect(t *testing.T) {
	srv, p, _ := setup(t, Config{})
	p.Request(bucketA)
	p.Request(bucketB)
	srv.waitReports(t, 2)
	srv.push(t, assign(bucketA, denyAll, durationpb.New(time.Hour)))
	waitStats(t, p, "assignment applied", func(s Stats) bool { return s.Assignments == 1 })
	srv.latest(t).end <- status.Error(codes.Unavailable, "restarting")
	waitStats(t, p, "stream closed", func(s Stats) bool { return s.StreamsClosed == 1 })
	if p.Request(bucketA) {
		t.Fatal("the assignment did not outlive the stream")
	}
	admit(p, bucketB, 2)
	p.Tick()
	polltest.Eventually(t, wait, time.Millisecond, "a report on a second stream", func() error {
		if rs := srv.reports(); len(rs) != 2 || len(rs[1]) == 0 {
			return fmt.Errorf("%d streams", len(rs))
		}
		return nil
	})
	wantUsages(t, srv.reports()[1][0], map[string]usage{keyA: {0, 1, 0}, keyB: {2, 0, 0}})
	if s := p.Stats(); s.StreamsOpened != 2 {
		t.Fatalf("%d streams opened, want 2", s.StreamsOpened)
	}
}

// TestFailover: a stream opens on the first target that answers; when that
// server dies, the next tick moves to the next one; with none left the
// tick's report is dropped.
func TestFailover(t *testing.T) {
	a, b := startServer(t), startServer(t)
	p := start(t, Config{Domain: "d", Targets: []string{deadAddr(t), a.addr, b.addr}, Interval: time.Hour})
	p.Request(bucketA)
	wantUsages(t, a.waitReports(t, 1)[0], map[string]usage{keyA: {1, 0, 0}})
	if s := p.Stats(); s.OpenFailures != 1 || s.StreamsOpened != 1 {
		t.Fatalf("stats %+v, want 1 failure then 1 stream", s)
	}
	a.gs.Stop()
	waitStats(t, p, "stream closed", func(s Stats) bool { return s.StreamsClosed == 1 })
	p.Request(bucketA)
	p.Tick()
	wantUsages(t, b.waitReports(t, 1)[0], map[string]usage{keyA: {1, 0, 0}})
	if s := p.Stats(); s.OpenFailures != 2 || s.StreamsOpened != 2 {
		t.Fatalf("stats %+v, want 2 failures and 2 streams", s)
	}
	b.gs.Stop()
	waitStats(t, p, "stream closed", func(s Stats) bool { return s.StreamsClosed == 2 })
	dropped := p.Stats().ReportsDropped
	p.Tick()
	if s := p.Stats(); s.OpenFailures != 5 || s.ReportsDropped != dropped+1 || s.OpenError == "" {
		t.Fatalf("stats %+v, want 5 failures and one more report dropped", s)
	}
}

// TestMaxBuckets: beyond MaxBuckets a new bucket's request is decided by
// the no-assignment behaviour and never reported.
func TestMaxBuckets(t *testing.T) {
	srv, p, _ := setup(t, Config{MaxBuckets: 2, NoAssignment: denyAll})
	for _, b := range []map[string]string{bucketA, bucketB, {"user": "c"}} {
		if p.Request(b) {
			t.Fatalf("bucket %v: DENY_ALL allowed", b)
		}
	}
	srv.waitReports(t, 2)
	p.Tick()
	rs := srv.waitReports(t, 3)
	wantUsages(t, rs[2], map[string]usage{keyA: {}, keyB: {}})
	if s := p.Stats(); s.Buckets != 2 || s.Unbucketed != 1 || s.Denied != 3 || len(rs) != 3 {
		t.Fatalf("stats %+v, %d reports", s, len(rs))
	}
}

// TestConcurrentRequests: requests from many goroutines share one token
// bucket exactly.
func TestConcurrentRequests(t *testing.T) {
	srv, p, _ := setup(t, Config{})
	p.Request(bucketA)
	srv.waitReports(t, 1)
	srv.push(t, assign(bucketA, tokens(100, 1, time.Minute), durationpb.New(time.Hour)))
	waitStats(t, p, "assignment applied", func(s Stats) bool { return s.Assignments == 1 })
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { admit(p, bucketA, 50) })
	}
	wg.Wait()
	if a, d := p.Counts(bucketA); a != 101 || d != 300 {
		t.Fatalf("Counts %d, %d; want 101, 300", a, d)
	}
}

func TestNew(t *testing.T) {
	ok := Config{Domain: "d", Targets: []string{"127.0.0.1:1"}}
	for _, tc := range []struct {
		name    string
		edit    func(*Config)
		wantErr bool
	}{
		{"ok", func(*Config) {}, false},
		{"no domain", func(c *Config) { c.Domain = "" }, true},
		{"no targets", func(c *Config) { c.Targets = nil }, true},
		{"short interval", func(c *Config) { c.Interval = MinInterval - 1 }, true},
		{"negative max buckets", func(c *Config) { c.MaxBuckets = -1 }, true},
		{"token bucket no-assignment", func(c *Config) { c.NoAssignment = tokens(1, 1, time.Second) }, true},
		{"deny all no-assignment", func(c *Config) { c.NoAssignment = denyAll }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ok
			tc.edit(&cfg)
			_, err := New(cfg)
			if (err != nil) != tc.wantErr || err != nil && !errors.Is(err, ErrInvalid) {
				t.Fatalf("New: %v, want error %v", err, tc.wantErr)
			}
		})
	}
}
