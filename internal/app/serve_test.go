package app

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	"github.com/envoy-rls/envoy-rls/internal/admin"
	"github.com/envoy-rls/envoy-rls/internal/store"
)

func TestServeEndToEnd(t *testing.T) {
	dir := t.TempDir()
	rules := writeRules(t, dir, testRules)
	// --config from the environment, the rest from flags.
	r := startServe(t, nil, map[string]string{"ENVOY_RLS_CONFIG": rules}, hooks{})

	r.wantCodes(t, "zed-the-user", allowed, allowed, denied)

	if code, body := r.get(t, "/healthz"); code != 200 || !strings.Contains(body, "ok") {
		t.Fatalf("/healthz %d %q", code, body)
	}
	if code, body := r.get(t, "/readyz"); code != 200 {
		t.Fatalf("/readyz %d %q", code, body)
	}
	code, metrics := r.get(t, "/metrics")
	if code != 200 || !strings.Contains(metrics, `envoy_rls_decisions_total{domain="app",policy=`) || !strings.Contains(metrics, `envoy_rls_config_reloads_total{result="success"} 1`) {
		t.Fatalf("/metrics %d:\n%s", code, metrics)
	}
	if strings.Contains(metrics, "zed-the-user") || strings.Contains(r.logs.String(), "zed-the-user") {
		t.Fatal("a descriptor value reached /metrics or the logs")
	}
	if doc := r.config(t); len(doc.Domains) != 1 || doc.Domains[0].Domain != "app" || !doc.LastReload.OK || doc.Store != "memory" {
		t.Fatalf("/config: %+v", doc)
	}

	// gRPC health and reflection.
	hr, err := healthpb.NewHealthClient(r.conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: "envoy.service.ratelimit.v3.RateLimitService"})
	if err != nil || hr.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", hr, err)
	}
	stream, err := reflectionpb.NewServerReflectionClient(r.conn).ServerReflectionInfo(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	rr, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range rr.GetListServicesResponse().GetService() {
		names = append(names, s.Name)
	}
	if !strings.Contains(strings.Join(names, " "), "envoy.service.ratelimit.v3.RateLimitService") {
		t.Fatalf("reflection lists %v", names)
	}
	_ = stream.CloseSend()

	if err := r.stop(t); err != nil {
		t.Fatalf("serve returned %v, want nil (exit 0)", err)
	}
	if !strings.Contains(r.logs.String(), `"level":"warn"`) || !strings.Contains(r.logs.String(), "random per-process secret") {
		t.Fatalf("the random secret was not logged:\n%s", r.logs)
	}
}

func TestReloadKeepsPreviousOnFailure(t *testing.T) {
	dir, rules := linkedRules(t)
	r := startServe(t, []string{"--config", rules}, nil, hooks{})
	before := r.config(t)

	writeRules(t, dir, badUnitRules)
	r.sighup(t)
	if _, m := r.get(t, "/metrics"); !strings.Contains(m, `envoy_rls_config_reloads_total{result="failure"} 1`) {
		t.Fatalf("failed reload not counted:\n%s", m)
	}
	doc := r.config(t)
	if doc.LastReload.OK || len(doc.LastReload.Problems) == 0 || doc.LastReload.Problems[0].Line != 4 {
		t.Fatalf("last reload: %+v", doc.LastReload)
	}
	if doc.Fingerprint != before.Fingerprint || doc.Fingerprint == "" {
		t.Fatal("a failed reload replaced the rules")
	}
	r.wantCodes(t, "u", allowed)

	writeRules(t, dir, strings.Replace(testRules, "requests_per_unit: 2", "requests_per_unit: 1", 1))
	r.sighup(t)
	if _, m := r.get(t, "/metrics"); !strings.Contains(m, `envoy_rls_config_reloads_total{result="success"} 2`) {
		t.Fatalf("successful reload not counted:\n%s", m)
	}
	// The new limit of 1 is in force.
	r.wantCodes(t, "v", allowed, denied)
}

func TestReloadOnFileChange(t *testing.T) {
	dir := t.TempDir()
	r := startWatching(t, dir)
	writeRules(t, dir, strings.Replace(testRules, "requests_per_unit: 2", "requests_per_unit: 1", 1))
	// A write can be seen in parts (the truncation, then the content): wait
	// for the attempt that counts the new rules.
	r.awaitReload(t, "a reload of the rewritten rule file", func() bool {
		_, m := r.get(t, "/metrics")
		return !strings.Contains(m, `envoy_rls_config_reloads_total{result="success"} 1`)
	})
	_, cfg := r.get(t, "/config")
	if !strings.Contains(cfg, `"trigger": "watch"`) {
		t.Fatalf("/config last reload:\n%s", cfg)
	}
	// The changed limit of 1 is in force.
	r.wantCodes(t, "w", allowed, denied)
}

// Putting the files back to the rules in service after a failed reload
// clears the failure on /config.
func TestConfigClearsFailureOnRevert(t *testing.T) {
	dir := t.TempDir()
	r := startWatching(t, dir)
	// lastReload waits for the watcher's attempts until /config shows a
	// reload by the watcher with ok.
	lastReload := func(ok bool) reloadDoc {
		t.Helper()
		var l reloadDoc
		r.awaitReload(t, fmt.Sprintf("/config last_reload ok=%v", ok), func() bool {
			l = r.config(t).LastReload
			return l.OK == ok && l.Trigger == "watch"
		})
		return l
	}
	writeRules(t, dir, badUnitRules)
	failed := lastReload(false)
	writeRules(t, dir, testRules)
	back := lastReload(true)
	if back.Error != "" || len(back.Problems) != 0 || back.Fingerprint != failed.Fingerprint {
		t.Fatalf("after the revert: %+v, want ok with the fingerprint in service %s", back, failed.Fingerprint)
	}
}

// TestReadyzAndGracefulDrain: with --readiness store, /readyz follows the
// store's ping and /healthcheck stays a liveness signal; with
// --healthcheck-requires-store too, /healthcheck follows the store; a stop
// request makes /readyz say draining while an in-flight call finishes.
func TestReadyzAndGracefulDrain(t *testing.T) {
	other, obs := startBlocked(t, "--readiness", "store")
	obs.SetPing(errors.New("connection refused"))
	if code, body := other.get(t, "/readyz"); code != 503 || !strings.Contains(body, "store unreachable: connection refused") {
		t.Fatalf("--readiness store alone: /readyz %d %q, want 503 store unreachable", code, body)
	}
	if code, body := other.get(t, "/healthcheck"); code != 200 || body != "OK\n" {
		t.Fatalf("--readiness store alone: /healthcheck %d %q while the store is down, want 200 OK", code, body)
	}

	r, bs := startBlocked(t, "--readiness", "store", "--healthcheck-requires-store")

	if code, _ := r.get(t, "/readyz"); code != 200 {
		t.Fatalf("/readyz %d, want 200", code)
	}
	bs.SetPing(errors.New("connection refused"))
	if code, body := r.get(t, "/readyz"); code != 503 || !strings.Contains(body, "store unreachable: connection refused") {
		t.Fatalf("/readyz %d %q, want 503 store unreachable", code, body)
	}
	// Asked for, the reference's probe follows the store too (its
	// REDIS_HEALTH_CHECK_ACTIVE_CONNECTION).
	if code, body := r.get(t, "/healthcheck"); code != 500 || !strings.Contains(body, "store unreachable") {
		t.Fatalf("/healthcheck %d %q, want 500 store unreachable", code, body)
	}
	bs.SetPing(nil)
	if code, _ := r.get(t, "/readyz"); code != 200 {
		t.Fatalf("/readyz %d after the store came back", code)
	}
	if code, _ := r.get(t, "/healthcheck"); code != 200 {
		t.Fatalf("/healthcheck %d after the store came back", code)
	}

	// An in-flight call survives the stop request.
	result := make(chan *rlsv3.RateLimitResponse, 1)
	go func() { result <- r.check(t, "inflight") }()
	<-bs.Entered
	r.cancel()
	waitFor(t, func() bool {
		code, body := r.get(t, "/readyz")
		return code == 503 && strings.Contains(body, "draining")
	})
	hr, err := healthpb.NewHealthClient(r.conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err == nil && hr.Status == healthpb.HealthCheckResponse_SERVING {
		t.Fatal("gRPC health still SERVING while draining")
	}
	select {
	case err := <-r.done:
		t.Fatalf("serve returned (%v) before the in-flight call finished", err)
	case <-time.After(100 * time.Millisecond):
	}
	bs.Release()
	if resp := <-result; resp.OverallCode != allowed {
		t.Fatalf("in-flight call: %v", resp.OverallCode)
	}
	select {
	case err := <-r.done:
		close(r.done)
		if err != nil {
			t.Fatalf("serve returned %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not return after the drain")
	}
}

func TestDrainTimeoutCutsOffStuckCalls(t *testing.T) {
	r, bs := startBlocked(t, "--drain-timeout", "200ms")
	defer bs.Release()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = rlsv3.NewRateLimitServiceClient(r.conn).ShouldRateLimit(ctx, userRequest("x"))
	}()
	<-bs.Entered
	start := time.Now()
	r.cancel()
	waitFor(t, func() bool { return strings.Contains(r.logs.String(), "drain timeout") })
	if time.Since(start) > 5*time.Second {
		t.Fatal("drain took far longer than --drain-timeout")
	}
}

// TestReadinessIgnoresTheStoreByDefault: /readyz stays 200 while the store
// does not answer its ping (each policy's failure mode answers), and the
// store's state shows on /healthz, the store_up gauge and one log line per
// transition.
func TestReadinessIgnoresTheStoreByDefault(t *testing.T) {
	r, bs := startBlocked(t)
	bs.Release()
	waitFor(t, func() bool { _, body := r.get(t, "/healthz"); return strings.Contains(body, "store memory: up since") })
	bs.SetPing(errors.New("connection refused"))
	waitFor(t, func() bool {
		_, body := r.get(t, "/healthz")
		return strings.Contains(body, "store memory: down since") && strings.Contains(body, "connection refused")
	})
	if code, body := r.get(t, "/healthz"); code != 200 || !strings.HasPrefix(body, "ok\n") {
		t.Fatalf("/healthz %d %q, want 200 ok", code, body)
	}
	if code, body := r.get(t, "/readyz"); code != 200 || !strings.Contains(body, "down since") {
		t.Fatalf("/readyz %d %q, want 200 naming the store's state", code, body)
	}
	if _, m := r.get(t, "/metrics"); !strings.Contains(m, "envoy_rls_store_up 0") {
		t.Fatalf("store_up while the ping fails:\n%s", m)
	}
	bs.SetPing(nil)
	waitFor(t, func() bool { _, m := r.get(t, "/metrics"); return strings.Contains(m, "envoy_rls_store_up 1") })
	if code, body := r.get(t, "/readyz"); code != 200 || body != "ready\n" {
		t.Fatalf("/readyz %d %q once the store answers", code, body)
	}
	logs := r.logs.String()
	if strings.Count(logs, admin.MsgStoreDown) != 1 || strings.Count(logs, admin.MsgStoreUp) != 1 {
		t.Fatalf("want one %q and one %q line (transitions only):\n%s", admin.MsgStoreDown, admin.MsgStoreUp, logs)
	}
}

// --pprof serves the profiles on the admin address; without it they do
// not exist.
func TestPprofOnlyWithFlag(t *testing.T) {
	dir := t.TempDir()
	rules := writeRules(t, dir, testRules)
	off := startServe(t, []string{"--config", rules}, nil, hooks{})
	if code, _ := off.get(t, "/debug/pprof/"); code != http.StatusNotFound {
		t.Fatalf("/debug/pprof/ without --pprof: %d, want 404", code)
	}
	on := startServe(t, []string{"--config", rules, "--pprof"}, nil, hooks{})
	if code, body := on.get(t, "/debug/pprof/"); code != 200 || !strings.Contains(body, "goroutine") {
		t.Fatalf("/debug/pprof/ with --pprof: %d %q", code, body)
	}
}

// TestLocalCache: a repeated denial is answered by the local deny cache
// (on by default) and counted; --local-cache=false sends it to the store.
func TestLocalCache(t *testing.T) {
	dir := t.TempDir()
	rules := writeRules(t, dir, testRules)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--config", rules}, "envoy_rls_local_cache_hits_total 2"},
		{[]string{"--config", rules, "--local-cache=false"}, "envoy_rls_local_cache_hits_total 0"},
	} {
		r := startServe(t, tc.args, nil, hooks{})
		for i, want := range []rlsv3.RateLimitResponse_Code{allowed, allowed, denied, denied, denied} {
			resp := r.check(t, "hot-user")
			if resp.OverallCode != want {
				t.Fatalf("%v: call %d: %v, want %v", tc.args, i, resp.OverallCode, want)
			}
			if want == denied && len(resp.ResponseHeadersToAdd) == 0 {
				t.Fatalf("%v: call %d: a denial without headers", tc.args, i)
			}
		}
		if _, m := r.get(t, "/metrics"); !strings.Contains(m, tc.want) {
			t.Fatalf("%v: /metrics lacks %q", tc.args, tc.want)
		}
	}
}

// TestHealthcheck: the reference service's probe answers 200 OK while
// serving and 500 once the process drains.
func TestHealthcheck(t *testing.T) {
	r, bs := startBlocked(t)
	if code, body := r.get(t, "/healthcheck"); code != 200 || body != "OK\n" {
		t.Fatalf("/healthcheck %d %q, want 200 OK", code, body)
	}
	// Keep a call in flight so that the drain lasts until released.
	result := make(chan error, 1)
	go func() { result <- callWith(t, r.grpcAddr, insecure.NewCredentials()) }()
	<-bs.Entered
	r.cancel()
	waitFor(t, func() bool {
		code, body := r.get(t, "/healthcheck")
		return code == 500 && strings.Contains(body, "draining")
	})
	bs.Release()
	if err := <-result; err != nil {
		t.Fatalf("in-flight call: %v", err)
	}
}

// TestShadowModeFlag: with --shadow-mode no rule denies; the denials are
// counted as shadow_over_limit.
func TestShadowModeFlag(t *testing.T) {
	rules := writeRules(t, t.TempDir(), testRules) // 2 a minute
	r := startServe(t, []string{"--config", rules, "--shadow-mode"}, nil, hooks{})
	r.wantCodes(t, "alice", allowed, allowed, allowed)
	if _, body := r.get(t, "/metrics"); !strings.Contains(body, `result="shadow_over_limit"} 1`) {
		t.Errorf("no shadow_over_limit decision counted:\n%s", body)
	}
}

// The memory store's automatic GC target comes with a soft memory limit
// when GOMEMLIMIT is not set, and leaves the runtime's settings as they
// were when serve returns; GOGC, --gc-percent or GOMEMLIMIT leave the limit
// alone.
func TestMemoryStoreGCTarget(t *testing.T) {
	_, rules := linkedRules(t)
	before := debug.SetMemoryLimit(-1)
	gcBefore := debug.SetGCPercent(-1)
	debug.SetGCPercent(gcBefore)
	for _, tc := range []struct {
		name      string
		args      []string
		env       map[string]string
		wantLimit int64 // while serving; 0: unchanged
		wantGC    int   // while serving; 0: unchanged
	}{
		{"automatic", nil, nil, store.MemoryHeapLimit(store.DefaultMemoryMaxEntries), store.MemoryGCPercent},
		{"entry bound", []string{"--memory-max-entries", "1000"}, nil, store.MemoryHeapLimit(1000), store.MemoryGCPercent},
		{"GOGC", nil, map[string]string{"GOGC": "100"}, 0, 0},
		{"flag", []string{"--gc-percent", "150"}, nil, 0, 150},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := startServe(t, append([]string{"--config", rules}, tc.args...), tc.env, hooks{})
			gc := debug.SetGCPercent(-1)
			debug.SetGCPercent(gc)
			limit := debug.SetMemoryLimit(-1)
			want, wantGC := tc.wantLimit, tc.wantGC
			if want == 0 {
				want = before
			}
			if wantGC == 0 {
				wantGC = gcBefore
			}
			if limit != want || gc != wantGC {
				t.Errorf("while serving: memory limit %d, GC percent %d; want %d, %d\nlogs:\n%s", limit, gc, want, wantGC, r.logs)
			}
			if err := r.stop(t); err != nil {
				t.Fatal(err)
			}
			gc = debug.SetGCPercent(-1)
			debug.SetGCPercent(gc)
			if got := debug.SetMemoryLimit(-1); got != before || gc != gcBefore {
				t.Errorf("after serve: memory limit %d, GC percent %d; want %d, %d as before", got, gc, before, gcBefore)
			}
		})
	}
	t.Run("GOMEMLIMIT", func(t *testing.T) {
		const set = 256 << 20 // as the chart sets it
		debug.SetMemoryLimit(set)
		defer debug.SetMemoryLimit(before)
		r := startServe(t, []string{"--config", rules}, nil, hooks{})
		if got := debug.SetMemoryLimit(-1); got != set {
			t.Errorf("while serving under GOMEMLIMIT: memory limit %d, want %d", got, set)
		}
		if err := r.stop(t); err != nil {
			t.Fatal(err)
		}
	})
}
