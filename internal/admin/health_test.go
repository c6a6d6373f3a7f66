package admin

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/memory"
	"github.com/envoy-rls/envoy-rls/pkg/topk"
)

// TestStoreState: each probe records the store's state for /healthz and
// store_up; only transitions are logged.
func TestStoreState(t *testing.T) {
	reg := prometheus.NewRegistry()
	core, logs := observer.New(zapcore.InfoLevel)
	ping := &limitertest.Pinger{}
	st, err := NewStoreState("redis", ping, reg, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	if st.IsUp() || !strings.HasPrefix(st.Describe(), "store redis: unknown") {
		t.Fatalf("before a probe: up %v, %q", st.IsUp(), st.Describe())
	}
	ctx := context.Background()
	for _, step := range []struct {
		err      error
		up       bool
		describe string
	}{
		{nil, true, "store redis: up since "},
		{nil, true, "store redis: up since "},
		{errors.New("connection refused"), false, "store redis: down since "},
		{errors.New("connection refused"), false, "store redis: down since "},
		{nil, true, "store redis: up since "},
	} {
		ping.SetPing(step.err)
		st.Probe(ctx)
		if st.IsUp() != step.up || !strings.HasPrefix(st.Describe(), step.describe) {
			t.Fatalf("ping %v: up %v, %q", step.err, st.IsUp(), st.Describe())
		}
		want := 0.0
		if step.up {
			want = 1
		}
		var g dto.Metric
		if err := st.gauge.Write(&g); err != nil || g.GetGauge().GetValue() != want {
			got := g.GetGauge().GetValue()
			t.Fatalf("ping %v: store_up %v, want %v (%v)", step.err, got, want, err)
		}
		if !step.up && !strings.HasSuffix(st.Describe(), ": connection refused") {
			t.Fatalf("the cause is not on /healthz: %q", st.Describe())
		}
	}
	if n, m := logs.FilterMessage(MsgStoreDown).Len(), logs.FilterMessage(MsgStoreUp).Len(); n != 1 || m != 1 {
		t.Fatalf("%d down and %d up lines, want one of each (transitions only)", n, m)
	}
	if got := st.Unreachable(ctx); got != "" {
		t.Fatalf("Unreachable of an answering store: %q", got)
	}
	ping.SetPing(errors.New("timeout"))
	if got := st.Unreachable(ctx); got != "store unreachable: timeout" {
		t.Fatalf("Unreachable: %q", got)
	}
}

// rulesState is a Rules whose snapshot and reception a test sets.
type rulesState struct {
	snap     *descriptors.Snapshot
	received bool
}

func (r *rulesState) Current() *descriptors.Snapshot { return r.snap }

func (r *rulesState) Received() bool { return r.received }

// TestReadiness: /readyz and /healthcheck follow the rules, the drain and,
// each when asked for, the store: --readiness store moves /readyz only,
// --healthcheck-requires-store /healthcheck only; /healthz stays 200 and
// names the store's state.
func TestReadiness(t *testing.T) {
	ping := &limitertest.Pinger{}
	reg := prometheus.NewRegistry()
	st, err := NewStoreState("redis", ping, reg, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	store, err := memory.New(memory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	top, err := topk.New(topk.Config{})
	if err != nil {
		t.Fatal(err)
	}
	rules := &rulesState{}
	newServer := func(storeReadiness, requiresRules, requiresStore bool) (*Server, http.Handler) {
		s, err := New(Config{Rules: rules, Store: store, StoreState: st, Registry: reg, ConfigView: func(bool) any { return nil },
			StoreReadiness: storeReadiness, HealthcheckRequiresRules: requiresRules, HealthcheckRequiresStore: requiresStore,
			Top: top, Log: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		return s, s.Handler()
	}
	get := func(h http.Handler, path string) (int, string) {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
		return w.Code, w.Body.String()
	}
	_, plain := newServer(false, false, false)
	_, storeReady := newServer(true, false, false)
	_, strict := newServer(true, true, true)
	type step struct {
		name    string
		h       http.Handler
		path    string
		code    int
		content string
	}
	check := func(steps []step) {
		t.Helper()
		for _, st := range steps {
			if code, body := get(st.h, st.path); code != st.code || !strings.Contains(body, st.content) {
				t.Fatalf("%s: %s %d %q, want %d %q", st.name, st.path, code, body, st.code, st.content)
			}
		}
	}
	check([]step{
		{"no rules", plain, "/readyz", 503, "not ready: rules not loaded"},
		{"no rules yet, not required", plain, "/healthcheck", 200, "OK"},
		{"no rules yet, required", strict, "/healthcheck", 500, "no rules loaded"},
	})
	snap, err := descriptors.Compile(nil, descriptors.Options{Secret: []byte("a-shared-secret-of-32-bytes-----")})
	if err != nil {
		t.Fatal(err)
	}
	rules.snap, rules.received = snap, true
	ping.SetPing(errors.New("connection refused"))
	st.Probe(context.Background())
	check([]step{
		{"store down, by default", plain, "/readyz", 200, "down since"},
		{"store down, by default", plain, "/healthcheck", 200, "OK"},
		{"store down, liveness", plain, "/healthz", 200, "ok\nstore redis: down since"},
		{"store down, store readiness", storeReady, "/readyz", 503, "not ready: store unreachable: connection refused"},
		{"store down, store readiness", storeReady, "/healthcheck", 200, "OK"},
		{"store down, store readiness", storeReady, "/healthz", 200, "ok\nstore redis: down since"},
		{"store down, healthcheck requires the store", strict, "/readyz", 503, "not ready: store unreachable: connection refused"},
		{"store down, healthcheck requires the store", strict, "/healthcheck", 500, "store unreachable"},
	})
	ping.SetPing(nil)
	st.Probe(context.Background())
	s, h := newServer(true, true, true)
	if code, body := get(h, "/readyz"); code != 200 || body != "ready\n" {
		t.Fatalf("store back: /readyz %d %q", code, body)
	}
	s.SetDraining()
	if code, body := get(h, "/readyz"); code != 503 || !strings.Contains(body, "draining") {
		t.Fatalf("draining: /readyz %d %q", code, body)
	}
	if code, body := get(h, "/healthcheck"); code != 500 || !strings.Contains(body, "draining") {
		t.Fatalf("draining: /healthcheck %d %q", code, body)
	}
}
