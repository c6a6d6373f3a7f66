package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/internal/rlstest"
	"github.com/envoy-rls/envoy-rls/pkg/audit"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/denycache"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/memory"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/redis"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
	"github.com/envoy-rls/envoy-rls/pkg/topk"
)

const testToken = "admin-test-token-0123456789"

// setup is what a harness serves.
type setup struct {
	rules string // the rule file
	redis bool   // the Redis store on a local redis-server, else memory
	auth  bool   // a token file with testToken
	pprof bool
	// audit, when set, is the audit sink of the rate-limit service and of
	// the admin calls.
	audit *audit.Sink
	// now, when set, is the admin server's clock.
	now func() time.Time
}

// harness serves the admin surface over real rules, a real store behind
// the local deny cache, a top tracker and a real rate-limit service that
// sends the hits, as serve assembles them.
type harness struct {
	t    *testing.T
	url  string
	svc  rlsv3.RateLimitServiceClient
	reg  *prometheus.Registry
	logs *observer.ObservedLogs
	// token is sent as the bearer token ("" for none).
	token string
	// bodies keeps every answer, for the privacy checks.
	bodies []string
	adm    *Server
}

func newHarness(t *testing.T, opts ...func(*setup)) *harness {
	t.Helper()
	su := setup{rules: "testdata/rules.yaml", auth: true}
	for _, o := range opts {
		o(&su)
	}
	snap := rlstest.LoadRules(t, su.rules, []byte("a-shared-secret-of-32-bytes-----"))
	log, logs := rlstest.Logger()
	reg := prometheus.NewRegistry()
	m, err := rls.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	store, kind := openStore(t, su.redis), "memory"
	if su.redis {
		kind = "redis"
	}
	cache, err := denycache.New(denycache.Config{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	top, err := topk.Start(&topk.Flags{}, reg)
	if err != nil {
		t.Fatal(err)
	}
	cfg := rls.Config{Rules: func() rls.Rules { return snap }, Store: cache, Metrics: m, Logger: log, Observer: topFeed{top}}
	if su.audit != nil {
		cfg.Auditor = auditFeed{su.audit}
	}
	svc, err := rls.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var auth *Auth
	if su.auth {
		tokens := filepath.Join(t.TempDir(), "tokens")
		if err := os.WriteFile(tokens, []byte("ops:"+testToken+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if auth, err = NewAuth(AuthConfig{Path: tokens, Log: log, Registerer: reg}); err != nil {
			t.Fatal(err)
		}
	}
	state, err := NewStoreState(kind, nil, reg, log)
	if err != nil {
		t.Fatal(err)
	}
	acfg := Config{
		Rules: staticRules{snap}, Store: cache, StoreState: state, Registry: reg,
		ConfigView: func(full bool) any { return map[string]any{"store": kind, "full": full} },
		Pprof:      su.pprof, Auth: auth, Top: top, Log: log, Now: su.now,
	}
	if su.audit != nil {
		acfg.Audit, acfg.AuditSink = su.audit, "file"
	}
	adm, err := New(acfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(adm.Handler())
	t.Cleanup(srv.Close)
	// The rate-limit service as the binary serves it: its codec and its
	// method handler.
	conn := rlstest.Serve(t, svc.Register, grpc.ForceServerCodecV2(rls.Codec{}))
	return &harness{t: t, url: srv.URL, svc: rlsv3.NewRateLimitServiceClient(conn), reg: reg, logs: logs, token: testToken, adm: adm}
}

// openStore is the store of a harness: memory, or Redis on a local
// redis-server.
func openStore(t *testing.T, withRedis bool) limiter.Store {
	t.Helper()
	if !withRedis {
		st, err := memory.New(memory.Config{})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	srv := redistest.Standalone(t, redistest.Local())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := redis.New(ctx, redis.Config{Addrs: []string{srv.Addr()}, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return st
}

// staticRules serves one snapshot.
type staticRules struct{ snap *descriptors.Snapshot }

func (r staticRules) Current() *descriptors.Snapshot { return r.snap }

func (r staticRules) Received() bool { return r.snap != nil }

// withRedis, withoutAuth, withPprof and withRules change a harness's setup.
func withRedis(su *setup) {
	su.redis = true
}

func withoutAuth(su *setup) { su.auth = false }

func withPprof(su *setup) { su.pprof = true }

func withClock(now func() time.Time) func(*setup) {
	return func(su *setup) { su.now = now }
}

func withAudit(sink *audit.Sink) func(*setup) {
	return func(su *setup) { su.audit = sink }
}

// auditSink is an audit sink that writes JSON lines to w, closed when the
// test ends. Close waits for its writer: once it returned, w is the test's
// to read.
func auditSink(t *testing.T, w io.Writer) *audit.Sink {
	t.Helper()
	m, err := audit.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	sink, err := audit.New(audit.Config{Writer: audit.NewJSONLines(w, false), Metrics: m, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sink.Close(time.Second) })
	return sink
}

func withRules(path string) func(*setup) {
	return func(su *setup) { su.rules = path }
}

// onEveryStore runs check on a harness over the memory store and, unless
// -short, over Redis.
func onEveryStore(t *testing.T, check func(*testing.T, *harness), opts ...func(*setup)) {
	t.Run("memory", func(t *testing.T) { check(t, newHarness(t, opts...)) })
	t.Run("redis", func(t *testing.T) {
		redistest.RedisLane(t)
		check(t, newHarness(t, append(opts, withRedis)...))
	})
}

// do sends method path (with body) with the harness's token.
func (h *harness) do(method, path, body string) (int, string) {
	h.t.Helper()
	req, err := http.NewRequest(method, h.url+path, strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	if h.token != "" {
		req.Header.Set("Authorization", "Bearer "+h.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	h.bodies = append(h.bodies, string(b))
	return resp.StatusCode, string(b)
}

// decode sends method path, wants 200 and decodes the answer into v.
func (h *harness) decode(method, path, body string, v any) {
	h.t.Helper()
	code, text := h.do(method, path, body)
	if code != http.StatusOK {
		h.t.Fatalf("%s %s: %d %s", method, path, code, text)
	}
	if err := json.Unmarshal([]byte(text), v); err != nil {
		h.t.Fatalf("%s %s: %v in %s", method, path, err, text)
	}
}

// hit sends one ShouldRateLimit of domain app with one entry.
func (h *harness) hit(key, value string) rlsv3.RateLimitResponse_Code {
	h.t.Helper()
	return rlstest.Call(h.t, h.svc, rlstest.Request("app", rlstest.Desc(key, value))).OverallCode
}

// hits sends n hits of key=value: the first allowed must be OK, the rest
// OVER_LIMIT.
func (h *harness) hits(key, value string, n, allowed int) {
	h.t.Helper()
	want := make([]rlsv3.RateLimitResponse_Code, n)
	for i := range want {
		want[i] = rlsv3.RateLimitResponse_OK
		if i >= allowed {
			want[i] = rlsv3.RateLimitResponse_OVER_LIMIT
		}
	}
	rlstest.WantCodes(h.t, h.svc, rlstest.Request("app", rlstest.Desc(key, value)), want...)
}

// noRawValue fails the test if an answer, a log line or extra text holds
// a value starting with prefix.
func (h *harness) noRawValue(prefix string, extra ...string) {
	h.t.Helper()
	texts := append(append([]string(nil), h.bodies...), extra...)
	for _, e := range h.logs.All() {
		texts = append(texts, e.Message)
		for k, v := range e.ContextMap() {
			texts = append(texts, k+"="+fmt.Sprint(v))
		}
	}
	for _, text := range texts {
		if strings.Contains(text, prefix) {
			h.t.Fatalf("a raw value (%s...) in:\n%s", prefix, text)
		}
	}
}

// logged reports whether an admin call with action was logged.
func (h *harness) logged(action string) bool {
	for _, e := range h.logs.FilterMessage("admin call").All() {
		if e.ContextMap()["action"] == action {
			return true
		}
	}
	return false
}

func explainBody(key, value string) string {
	return fmt.Sprintf(`{"domain":"app","descriptors":[{"entries":[{"key":%q,"value":%q}]}]}`, key, value)
}

// topFeed feeds the tracker with every decided limit, as the binary does.
type topFeed struct{ t *topk.Tracker }

func (f topFeed) ObserveLimit(l rls.LimitObservation) {
	if l.Rule == nil || l.Rule.Policy == nil {
		return
	}
	f.t.Record(topk.Observation{Domain: l.Rule.Domain, Policy: l.Rule.Policy.ID(), Key: l.Rule.Key, Subject: l.Subject,
		Hits: l.Hits, Denied: l.Over && !l.Shadow, ShadowDenied: l.Over && l.Shadow,
		Reserved: l.Reserved, Used: l.Used, Settle: l.Settled})
}

func (topFeed) ObserveCall(rls.CallObservation) {}

// auditFeed offers the server's denials to the audit sink, as the binary
// does.
type auditFeed struct{ sink *audit.Sink }

func (f auditFeed) Denied(d rls.Denial) {
	outcome := audit.OutcomeOverLimit
	if d.StoreFailed {
		outcome = audit.OutcomeFailureMode
	}
	f.sink.Offer(audit.Event{Time: d.Time, Domain: d.Domain, PolicyID: d.PolicyID, Subject: d.Subject, Cost: d.Cost, Limit: d.Limit,
		Remaining: d.Remaining, RetryAfter: d.RetryAfter, RequestID: d.RequestID, Shadow: d.Shadow, Outcome: outcome, FailureMode: d.FailureMode})
}

// reserve sends one ShouldRateLimit of domain app with key=value and
// hits_addend hits: a reserve, or with a marker the settle it names. It
// returns the answer's marker.
func (h *harness) reserve(key, value string, hits uint64, marker string) string {
	h.t.Helper()
	d := rlstest.Desc(key, value)
	if marker != "" {
		d = rlstest.Desc(key, value, "lease", marker)
	}
	d.HitsAddend = wrapperspb.UInt64(hits)
	resp := rlstest.Call(h.t, h.svc, rlstest.Request("app", d))
	if resp.OverallCode != rlsv3.RateLimitResponse_OK {
		h.t.Fatalf("%s with %d hits: %s", key, hits, resp.OverallCode)
	}
	return resp.GetDynamicMetadata().GetFields()["lease"].GetStringValue()
}
