package statsd

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/internal/statsd/statsdtest"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/memory"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
)

const waitFor = 10 * time.Second

func newSink(t *testing.T, cfg Config) *Sink {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	go s.Run()
	t.Cleanup(s.Stop)
	return s
}

func rule(key string) *descriptors.Rule { return &descriptors.Rule{StatKey: key} }

// TestCounters feeds observations straight in and checks the lines a
// statsd server receives, over UDP and over TCP.
func TestCounters(t *testing.T) {
	for _, proto := range []string{"udp", "tcp"} {
		t.Run(proto, func(t *testing.T) {
			srv := statsdtest.Start(t, proto)
			s := newSink(t, Config{Addr: srv.Addr, Protocol: proto, FlushInterval: time.Hour})
			r := rule("dom.key_value.user")
			// limit 10, near threshold 8.
			s.ObserveLimit(rls.LimitObservation{Rule: r, Hits: 3, Decided: true, Consumed: true, Limit: 10, Remaining: 7})
			s.ObserveLimit(rls.LimitObservation{Rule: r, Hits: 6, Decided: true, Consumed: true, Limit: 10, Remaining: 1}) // used 3→9: 1 near
			s.ObserveLimit(rls.LimitObservation{Rule: r, Hits: 1, Decided: true, Consumed: true, Limit: 10, Remaining: 0}) // 9→10: 1 near
			s.ObserveLimit(rls.LimitObservation{Rule: r, Hits: 2, Over: true, Decided: true, Limit: 10, Remaining: 0})
			s.ObserveLimit(rls.LimitObservation{Rule: r, Hits: 1, Over: true, LocalCache: true, Decided: true, Limit: 10})
			s.ObserveLimit(rls.LimitObservation{Rule: r, Hits: 2, Over: true, Penalty: true, Decided: true, Limit: 10})
			sh := rule("dom.shadow")
			s.ObserveLimit(rls.LimitObservation{Rule: sh, Hits: 4, Over: true, Shadow: true, Decided: true, Limit: 1})
			s.ObserveLimit(rls.LimitObservation{Rule: rule("dom.failing"), Hits: 1, Over: true, StoreFailed: true})
			// Probes (an explicit hits_addend of 0) add 0 hits everywhere,
			// as the reference counts them: no stat of their own either.
			s.ObserveLimit(rls.LimitObservation{Rule: r, Hits: 0, Over: true, Decided: true, Limit: 10})
			s.ObserveLimit(rls.LimitObservation{Rule: rule("dom.probed"), Hits: 0, Decided: true, Limit: 10, Remaining: 10})
			s.ObserveCall(rls.CallObservation{Code: codes.OK, Duration: time.Millisecond})
			s.ObserveCall(rls.CallObservation{Code: codes.OK, Duration: time.Millisecond, StoreFailed: true})
			s.ObserveCall(rls.CallObservation{Code: codes.InvalidArgument, Duration: time.Millisecond})
			s.Flush()
			want := map[string]int64{
				"ratelimit.service.rate_limit.dom.key_value.user.total_hits":                  15,
				"ratelimit.service.rate_limit.dom.key_value.user.within_limit":                10,
				"ratelimit.service.rate_limit.dom.key_value.user.near_limit":                  2,
				"ratelimit.service.rate_limit.dom.key_value.user.over_limit":                  5,
				"ratelimit.service.rate_limit.dom.key_value.user.over_limit_with_local_cache": 1,
				"ratelimit.service.rate_limit.dom.key_value.user.over_limit_with_penalty":     2,
				"ratelimit.service.rate_limit.dom.shadow.total_hits":                          4,
				"ratelimit.service.rate_limit.dom.shadow.over_limit":                          4,
				"ratelimit.service.rate_limit.dom.shadow.shadow_mode":                         4,
				"ratelimit.service.rate_limit.dom.failing.total_hits":                         1,
				RedisErrorStat:    1,
				ServiceErrorStat:  1,
				TotalRequestsStat: 3,
			}
			srv.WaitCounters(t, want, waitFor)
			// A second interval sends only its own counts (statsd counters
			// are deltas).
			s.ObserveLimit(rls.LimitObservation{Rule: r, Hits: 1, Decided: true, Consumed: true, Limit: 10, Remaining: 9})
			s.Flush()
			want["ratelimit.service.rate_limit.dom.key_value.user.total_hits"]++
			want["ratelimit.service.rate_limit.dom.key_value.user.within_limit"]++
			srv.WaitCounters(t, want, waitFor)
			for name := range srv.Counters() {
				if _, ok := want[name]; !ok {
					t.Errorf("unexpected stat %q", name)
				}
			}
			if got := srv.Timers()[ResponseTimeStat]; got != 3 {
				t.Errorf("response_time samples = %d, want 3", got)
			}
		})
	}
}

func TestNearHits(t *testing.T) {
	s, err := New(Config{Addr: "127.0.0.1:1", NearLimitRatio: 0.8})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name                   string
		hits, limit, remaining int64
		consumed, decided      bool
		want                   uint64
	}{
		{"below", 1, 10, 3, true, true, 0},
		{"at the threshold", 1, 10, 2, true, true, 0},
		{"just above", 1, 10, 1, true, true, 1},
		{"crossing", 5, 10, 1, true, true, 1},
		{"all above", 2, 10, 0, true, true, 2},
		{"not consumed counts as if", 2, 10, 2, false, true, 2},
		{"undecided", 5, 10, 0, true, false, 0},
		{"ratio floors", 1, 3, 0, true, true, 1}, // threshold floor(2.4) = 2
	}
	for _, tc := range tests {
		got := nearHits(rls.LimitObservation{Hits: tc.hits, Limit: tc.limit, Remaining: tc.remaining, Consumed: tc.consumed, Decided: tc.decided}, s.cfg.NearLimitRatio)
		if got != tc.want {
			t.Errorf("%s: near = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestRuleBound checks that at most MaxRules stat keys are counted per
// interval, the rest going to the overflow stat, and that a flush frees
// the keys of rules that counted nothing.
func TestRuleBound(t *testing.T) {
	srv := statsdtest.Start(t, "udp")
	s := newSink(t, Config{Addr: srv.Addr, FlushInterval: time.Hour})
	for i := range MaxRules + 5 {
		s.ObserveLimit(rls.LimitObservation{Rule: rule(fmt.Sprintf("d.k_%d", i)), Hits: 2, Decided: true, Consumed: true, Limit: 100, Remaining: 98})
	}
	s.Flush()
	srv.WaitCounters(t, map[string]int64{OverflowStat: 10, "ratelimit.service.rate_limit.d.k_0.total_hits": 2}, waitFor)
	s.mu.RLock()
	n := len(s.rules)
	s.mu.RUnlock()
	if n != MaxRules {
		t.Fatalf("%d rules held after the flush, want %d (idle until the next flush)", n, MaxRules)
	}
	s.Flush()
	s.mu.RLock()
	n = len(s.rules)
	s.mu.RUnlock()
	if n != 0 {
		t.Fatalf("%d rules held after an idle interval, want 0", n)
	}
}

func TestTags(t *testing.T) {
	tags, err := parseTags("zone:eu-1, app:rate.limit ,x|y:a:b")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := SerializeTags(tags), ".__app=rate_limit.__x_y=a_b.__zone=eu-1"; got != want {
		t.Fatalf("SerializeTags = %q, want %q", got, want)
	}
	for _, bad := range []string{"novalue", "a:1,", "a:1,b"} {
		if _, err := parseTags(bad); err == nil {
			t.Errorf("parseTags(%q): no error", bad)
		}
	}
	// As the reference: the last of a key wins; empty keys or values send
	// nothing.
	tags, err = parseTags("a:1,a:2,k:,:v")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := SerializeTags(tags), ".__a=2"; got != want {
		t.Fatalf("SerializeTags = %q, want %q", got, want)
	}
	if tags, err := parseTags(""); err != nil || len(tags) != 0 {
		t.Fatalf("parseTags(\"\") = %v, %v", tags, err)
	}
	srv := statsdtest.Start(t, "udp")
	s := newSink(t, Config{Addr: srv.Addr, Tags: map[string]string{"zone": "eu"}, FlushInterval: time.Hour})
	s.ObserveCall(rls.CallObservation{Code: codes.OK})
	s.Flush()
	srv.WaitCounters(t, map[string]int64{TotalRequestsStat + ".__zone=eu": 1}, waitFor)
}

func TestSanitizeName(t *testing.T) {
	if got, want := SanitizeName("d.path_/a:b|c@d#e f\ng"), "d.path_/a_b_c_d_e_f_g"; got != want {
		t.Fatalf("SanitizeName = %q, want %q", got, want)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, cfg := range []Config{
		{},
		{Addr: "nohostport"},
		{Addr: "127.0.0.1:8125", Protocol: "sctp"},
		{Addr: "127.0.0.1:8125", FlushInterval: -time.Second},
		{Addr: "127.0.0.1:8125", NearLimitRatio: 1.5},
		{Addr: "127.0.0.1:8125", NearLimitRatio: -0.1},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v): no error", cfg)
		}
	}
}

// TestThroughServer runs a scripted sequence of calls through an rls
// server with this sink as its observer, and checks the reference's
// counter names and values; no request value appears in any stat name.
func TestThroughServer(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir+"/rules.yaml", `domain: web
descriptors:
  - key: path
    value: /login
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: user
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: tenant
    descriptors:
      - key: ip
        value_to_metric: true
        shadow_mode: true
        rate_limit: {unit: minute, requests_per_unit: 1}
`)
	snap, err := descriptors.Load(dir, descriptors.Options{Secret: []byte("0123456789abcdef-test-secret")})
	if err != nil {
		t.Fatal(err)
	}
	clock := limitertest.NewClock(time.Date(2030, 1, 1, 0, 0, 10, 0, time.UTC))
	mem, err := memory.New(memory.Config{Clock: clock, MaxEntries: 1000})
	if err != nil {
		t.Fatal(err)
	}
	m, err := rls.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	statsd := statsdtest.Start(t, "udp")
	sink := newSink(t, Config{Addr: statsd.Addr, FlushInterval: time.Hour})
	srv, err := rls.New(rls.Config{Rules: func() rls.Rules { return snap }, Store: mem, Metrics: m, Clock: clock, Observer: sink})
	if err != nil {
		t.Fatal(err)
	}
	call := func(hits uint32, kv ...string) rlsv3.RateLimitResponse_Code {
		t.Helper()
		d := &rlv3.RateLimitDescriptor{}
		for i := 0; i+1 < len(kv); i += 2 {
			d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
		}
		req := &rlsv3.RateLimitRequest{Domain: "web", Descriptors: []*rlv3.RateLimitDescriptor{d}}
		if hits > 0 {
			req.HitsAddend = hits
		}
		resp, err := srv.ShouldRateLimit(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		return resp.OverallCode
	}
	ok, over := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	// path_/login, limit 5 (near threshold 4): 3, 1, 1 hits allowed (the
	// last one near), then 2 denied.
	for i, st := range []struct {
		hits uint32
		want rlsv3.RateLimitResponse_Code
	}{{3, ok}, {1, ok}, {1, ok}, {2, over}} {
		if got := call(st.hits, "path", "/login"); got != st.want {
			t.Fatalf("path step %d: %v, want %v", i, got, st.want)
		}
	}
	// user (detailed_metric), limit 2 per value: two users, three calls
	// each.
	for _, u := range []string{"SECRET-alice", "SECRET-bob"} {
		for range 3 {
			call(0, "user", u)
		}
	}
	// tenant/ip shadow (value_to_metric): over after one, still OK.
	for range 2 {
		if got := call(0, "tenant", "SECRET-acme", "ip", "SECRET-10.1.2.3"); got != rlsv3.RateLimitResponse_OK {
			t.Fatalf("shadow: %v", got)
		}
	}
	// An invalid call.
	if _, err := srv.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{}); err == nil {
		t.Fatal("an empty request was answered")
	}
	sink.Flush()
	p := "ratelimit.service.rate_limit."
	want := map[string]int64{
		p + "web.tenant.ip.shadow_mode": 1,
		ServiceErrorStat:                1,
		TotalRequestsStat:               13,
	}
	statsdtest.AddRule(want, "web.path_/login", "", statsdtest.RuleCounts{Total: 7, Within: 5, Near: 1, Over: 2})
	statsdtest.AddRule(want, "web.user", "", statsdtest.RuleCounts{Total: 6, Within: 4, Near: 2, Over: 2})
	statsdtest.AddRule(want, "web.tenant.ip", "", statsdtest.RuleCounts{Total: 2, Within: 1, Near: 1, Over: 1})
	statsd.WaitCounters(t, want, waitFor)
	statsd.CheckNoLineContains(t, "SECRET")
	statsd.CheckOnlyCounters(t, want)
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
