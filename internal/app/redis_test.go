package app

import (
	"bytes"
	"context"
	"io"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
)

func TestServeWithRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("Redis lane")
	}
	srv := redistest.Standalone(t, redistest.Local())
	rules := writeRules(t, t.TempDir(), testRules)
	env := map[string]string{SecretEnv: "a-shared-secret-of-32-bytes-----", "ENVOY_RLS_REDIS_ADDR": srv.Addr()}
	r := startServe(t, []string{"--config", rules, "--store", "redis", "--redis-timeout", "300ms"}, env, hooks{})

	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		if got := r.check(t, "redis-user").OverallCode; got != want {
			t.Fatalf("call %d: %v, want %v", i, got, want)
		}
	}
	if code, body := r.get(t, "/readyz"); code != 200 {
		t.Fatalf("/readyz %d %q", code, body)
	}
	// The Redis store's automatic GC target is set while serving.
	if got := debug.SetGCPercent(-1); got != RedisGCPercent {
		t.Errorf("GC percent while serving on Redis = %d, want %d", got, RedisGCPercent)
	} else {
		debug.SetGCPercent(got)
	}
	_, cfg := r.get(t, "/config")
	if !strings.Contains(cfg, `"store": "redis"`) || strings.Contains(cfg, "a-shared-secret") {
		t.Fatalf("/config:\n%s", cfg)
	}

	// Redis stops answering: not ready, and calls fail closed (the default).
	srv.Pause()
	waitFor(t, func() bool {
		code, body := r.get(t, "/readyz")
		return code == 503 && strings.Contains(body, "store unreachable")
	})
	if got := r.check(t, "someone-else").OverallCode; got != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("with Redis paused: %v, want OVER_LIMIT (fail closed)", got)
	}
	srv.Resume()
	waitFor(t, func() bool { code, _ := r.get(t, "/readyz"); return code == 200 })
	_, m := r.get(t, "/metrics")
	if !strings.Contains(m, `envoy_rls_fallback_total{mode="closed"}`) || strings.Contains(m, `envoy_rls_fallback_total{mode="closed"} 0`) {
		t.Fatalf("fallbacks not counted:\n%s", m)
	}
	if strings.Contains(m, "redis-user") || strings.Contains(r.logs.String(), "redis-user") || strings.Contains(r.logs.String(), "someone-else") {
		t.Fatal("a descriptor value reached the logs or metrics")
	}
}

func TestServeRedisUnreachableAtStart(t *testing.T) {
	port, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	rules := writeRules(t, t.TempDir(), testRules)
	var errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = Run(ctx, []string{"serve", "--config", rules, "--store", "redis", "--redis-addr", "127.0.0.1:" + itoa(port),
		"--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"},
		func(k string) string {
			if k == SecretEnv {
				return "a-shared-secret-of-32-bytes-----"
			}
			return ""
		}, io.Discard, &errOut)
	if err == nil || !strings.Contains(err.Error(), "redis store") {
		t.Fatalf("err %v, want a redis store connection error", err)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
