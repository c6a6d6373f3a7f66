package app

import (
	"bytes"
	"context"
	"io"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/internal/admin"
	"github.com/envoy-rls/envoy-rls/internal/options"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/internal/store"
)

func TestServeWithRedis(t *testing.T) {
	redistest.RedisLane(t)
	srv := redistest.Standalone(t, redistest.Local())
	rules := writeRules(t, t.TempDir(), testRules)
	env := map[string]string{options.SecretEnv: "a-shared-secret-of-32-bytes-----", "ENVOY_RLS_REDIS_ADDR": srv.Addr()}
	r := startServe(t, []string{"--config", rules, "--store", "redis", "--redis-timeout", "300ms"}, env, hooks{})

	r.wantCodes(t, "redis-user", allowed, allowed, denied)
	if code, body := r.get(t, "/readyz"); code != 200 {
		t.Fatalf("/readyz %d %q", code, body)
	}
	// The Redis store's automatic GC target is set while serving.
	if got := debug.SetGCPercent(-1); got != store.RedisGCPercent {
		t.Errorf("GC percent while serving on Redis = %d, want %d", got, store.RedisGCPercent)
	} else {
		debug.SetGCPercent(got)
	}
	_, cfg := r.get(t, "/config")
	if !strings.Contains(cfg, `"store": "redis"`) || strings.Contains(cfg, "a-shared-secret") {
		t.Fatalf("/config:\n%s", cfg)
	}

	// Redis stops answering: still ready (each policy's failure mode
	// answers), the store reported down, and calls fail closed (the
	// default).
	srv.Pause()
	waitFor(t, func() bool {
		_, body := r.get(t, "/healthz")
		return strings.Contains(body, "store redis: down since")
	})
	if code, body := r.get(t, "/readyz"); code != 200 || !strings.Contains(body, "store redis: down") {
		t.Fatalf("/readyz %d %q with Redis paused, want 200 naming the store's state", code, body)
	}
	if _, m := r.get(t, "/metrics"); !strings.Contains(m, "envoy_rls_store_up 0") {
		t.Fatalf("store_up with Redis paused:\n%s", m)
	}
	if got := r.check(t, "someone-else").OverallCode; got != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("with Redis paused: %v, want OVER_LIMIT (fail closed)", got)
	}
	srv.Resume()
	waitFor(t, func() bool { _, body := r.get(t, "/healthz"); return strings.Contains(body, "store redis: up since") })
	_, m := r.get(t, "/metrics")
	if !strings.Contains(m, "envoy_rls_store_up 1") {
		t.Fatalf("store_up once Redis answers again:\n%s", m)
	}
	if strings.Count(r.logs.String(), admin.MsgStoreDown) != 1 || strings.Count(r.logs.String(), admin.MsgStoreUp) != 1 {
		t.Fatalf("want one %q and one %q line:\n%s", admin.MsgStoreDown, admin.MsgStoreUp, r.logs)
	}
	if !strings.Contains(m, `envoy_rls_fallback_total{mode="closed"}`) || strings.Contains(m, `envoy_rls_fallback_total{mode="closed"} 0`) {
		t.Fatalf("fallbacks not counted:\n%s", m)
	}
	if strings.Contains(m, "redis-user") || strings.Contains(r.logs.String(), "redis-user") || strings.Contains(r.logs.String(), "someone-else") {
		t.Fatal("a descriptor value reached the logs or metrics")
	}
}

// TestServeRedisUnreachableAtStart: serve starts while nothing listens on
// the Redis address, answers by the failure mode (closed by default) and
// is not ready, logs each failed attempt, and uses Redis once it answers.
func TestServeRedisUnreachableAtStart(t *testing.T) {
	srv := redistest.Standalone(t, redistest.Local())
	srv.Kill()
	rules := writeRules(t, t.TempDir(), testRules)
	env := map[string]string{options.SecretEnv: "a-shared-secret-of-32-bytes-----"}
	r := startServe(t, []string{"--config", rules, "--store", "redis", "--redis-addr", srv.Addr(), "--redis-timeout", "300ms"}, env, hooks{})

	if got := r.check(t, "early-user").OverallCode; got != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("before Redis answers: %v, want OVER_LIMIT (fail closed)", got)
	}
	if code, body := r.get(t, "/readyz"); code != 200 {
		t.Fatalf("/readyz %d %q, want 200: the failure modes answer", code, body)
	}
	waitFor(t, func() bool { _, body := r.get(t, "/healthz"); return strings.Contains(body, "not connected") })
	// At least two attempts logged, each with its cause and next wait.
	waitFor(t, func() bool { return strings.Count(r.logs.String(), store.MsgRedisNotConnected) >= 2 })
	for _, want := range []string{`"level":"warn"`, `"attempt":2`, `"retry_in"`, "connection refused", `"redis_addr":"` + srv.Addr() + `"`} {
		if !strings.Contains(r.logs.String(), want) {
			t.Fatalf("logs lack %s:\n%s", want, r.logs)
		}
	}

	srv.Restart()
	waitFor(t, func() bool { _, body := r.get(t, "/healthz"); return strings.Contains(body, "store redis: up") })
	// Once connected, Redis decides.
	r.wantCodes(t, "late-user", allowed, allowed, denied)
	logs := r.logs.String()
	if strings.Count(logs, store.MsgRedisConnected) != 1 {
		t.Fatalf("want one %q line:\n%s", store.MsgRedisConnected, logs)
	}
	if strings.Contains(logs, "early-user") || strings.Contains(logs, "late-user") {
		t.Fatal("a descriptor value reached the logs")
	}
	// Connected: no more attempts are logged.
	n := strings.Count(logs, store.MsgRedisNotConnected)
	if r.stop(t) != nil || strings.Count(r.logs.String(), store.MsgRedisNotConnected) != n {
		t.Fatalf("attempts after connecting, or stop failed:\n%s", r.logs)
	}
}

// TestServeRedisModeMismatchKeepsRunning: a cause that needs an operator
// (--redis-mode cluster against a standalone server) is retried like any
// other, and logged at error level.
func TestServeRedisModeMismatchKeepsRunning(t *testing.T) {
	srv := redistest.Standalone(t)
	rules := writeRules(t, t.TempDir(), testRules)
	env := map[string]string{options.SecretEnv: "a-shared-secret-of-32-bytes-----"}
	r := startServe(t, []string{"--config", rules, "--store", "redis", "--redis-addr", srv.Addr(), "--redis-mode", "cluster"}, env, hooks{})
	waitFor(t, func() bool { return strings.Count(r.logs.String(), store.MsgRedisNotConnected) >= 2 })
	for _, want := range []string{`"level":"error"`, `"needs_operator":true`, "not a Redis Cluster"} {
		if !strings.Contains(r.logs.String(), want) {
			t.Fatalf("logs lack %s:\n%s", want, r.logs)
		}
	}
	waitFor(t, func() bool { _, body := r.get(t, "/healthz"); return strings.Contains(body, "store redis: down") })
	if got := r.check(t, "someone").OverallCode; got != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("%v, want OVER_LIMIT (fail closed)", got)
	}
}

// TestServeRedisBadConfigFailsAtOnce: configuration that can never work
// still fails start, naming the flag.
func TestServeRedisBadConfigFailsAtOnce(t *testing.T) {
	rules := writeRules(t, t.TempDir(), testRules)
	getenv := func(k string) string {
		if k == options.SecretEnv {
			return "a-shared-secret-of-32-bytes-----"
		}
		return ""
	}
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"missing password file", []string{"--redis-addr", "127.0.0.1:1", "--redis-password-file", "/nonexistent/pw"}, "--redis-password-file"},
		{"missing TLS CA", []string{"--redis-addr", "127.0.0.1:1", "--redis-tls-ca", "/nonexistent/ca.pem"}, "--redis-tls-ca"},
		{"standalone with two addresses", []string{"--redis-addr", "127.0.0.1:1,127.0.0.1:2", "--redis-mode", "standalone"}, "exactly one address"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			args := append([]string{"serve", "--config", rules, "--store", "redis", "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"}, c.args...)
			var errOut bytes.Buffer
			err := Run(ctx, args, getenv, io.Discard, &errOut)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want one naming %q\n%s", err, c.want, errOut.String())
			}
		})
	}
}
