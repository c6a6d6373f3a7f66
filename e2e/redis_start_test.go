package e2e_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/polltest"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
)

// startRules: one small limit per failure mode, so that decisions made by
// Redis are visible (the third call of a subject is denied).
var startRules = failureModeRules(2, "closed", "open")

// Log messages of the Redis connection (internal/app/redis.go).
const (
	logNotConnected = "redis store not connected: answering by each policy's failure mode; retrying"
	logConnected    = "redis store connected"
)

// TestRedisDownAtStart: the binary starts while nothing listens on the
// Redis address (a pod scheduled before its Redis). It keeps running and
// serving, /readyz is 200 (the failure modes answer) while /healthz reports
// the store down, a closed policy answers OVER_LIMIT with Retry-After and
// an open one OK, each failed connection attempt is logged. Once
// redis-server starts on that port, the replica connects without a
// restart: /healthz reports the store up and limits are counted in Redis.
func TestRedisDownAtStart(t *testing.T) {
	redis, cfg := withStandaloneRedis(t, redistest.Local())
	redis.Kill()
	cfg.Rules, cfg.Secret, cfg.Unready = rulesDir(t, startRules), secretFile(t), true
	r := startReplica(t, "early", cfg)

	// Several attempts fail; the process is still there and serving.
	polltest.Eventually(t, 20*time.Second, 20*time.Millisecond, "three failed attempts logged", func() error {
		if n := strings.Count(r.log.tail(logTail), logNotConnected); n < 3 {
			return fmt.Errorf("%d so far", n)
		}
		return nil
	})
	select {
	case <-r.done:
		t.Fatalf("the replica exited while Redis was down: %v", r.exitErr)
	default:
	}
	for _, want := range []string{`"level":"warn"`, `"attempt":3`, `"retry_in"`, "connection refused", `"redis_addr":"` + redis.Addr() + `"`} {
		if !r.log.contains(want) {
			t.Errorf("the attempt lines lack %s", want)
		}
	}
	if code, body := r.mustAdmin("/readyz"); code != http.StatusOK {
		t.Errorf("/readyz while Redis is down: %d %q, want 200", code, body)
	}
	if code, body := r.mustAdmin("/healthz"); code != http.StatusOK || !strings.Contains(body, "store redis: down since") || !strings.Contains(body, "not connected") {
		t.Errorf("/healthz while Redis is down: %d %q, want 200 with the store down, not connected", code, body)
	}
	for i := 0; i < 3; i++ {
		if res := r.call(outageDeadline, 1, entry{"closed", "down"}); !res.over() || res.Headers["Retry-After"] == "" {
			t.Errorf("closed policy while Redis is down, call %d: %v, want OVER_LIMIT with Retry-After", i, res)
		}
		if res := r.call(outageDeadline, 1, entry{"open", "down"}); !res.ok() {
			t.Errorf("open policy while Redis is down, call %d: %v, want OK", i, res)
		}
	}
	if got := r.metric(`envoy_rls_fallback_total{mode="closed"}`); got < 3 {
		t.Errorf(`envoy_rls_fallback_total{mode="closed"} %v, want at least 3`, got)
	}

	start := time.Now()
	redis.Restart()
	took := waitStoreState(t, []*replica{r}, true, 30*time.Second)
	t.Logf("store reported up %v after Redis answered PING (%v after the restart began)", took, time.Since(start))
	if !r.log.contains(logConnected) {
		t.Errorf("no %q line", logConnected)
	}
	// Decisions come from Redis: two calls per subject allowed, the third
	// denied, for both failure modes, and the state is in Redis.
	for _, policy := range []string{"closed", "open"} {
		for i, wantOK := range []bool{true, true, false} {
			res := r.mustCall(t, entry{policy, "up"})
			if res.ok() != wantOK {
				t.Errorf("%s policy once connected, call %d: %v, want OK %v", policy, i, res, wantOK)
			}
		}
	}
	if n, _ := redis.MustDo("DBSIZE").(int64); n < 2 {
		t.Errorf("DBSIZE %d once connected, want a state per policy", n)
	}
	if r.log.contains(`"down"`) || r.log.contains(`"up"`) {
		t.Error("a descriptor value reached the logs")
	}
	if err := r.stop(); err != nil {
		t.Errorf("stop: %v", err)
	}
}

// TestRedisDownAtStartStops: SIGTERM ends a replica that is still trying
// to connect, promptly and with exit status 0.
func TestRedisDownAtStartStops(t *testing.T) {
	binary(t)
	port, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	r := startReplica(t, "never-connected", replicaConfig{
		Rules: rulesDir(t, startRules), Store: "redis", RedisAddr: fmt.Sprintf("127.0.0.1:%d", port),
		Secret: secretFile(t), Unready: true,
	})
	polltest.Eventually(t, 20*time.Second, 20*time.Millisecond, "a failed attempt logged", func() error {
		if !r.log.contains(logNotConnected) {
			return fmt.Errorf("none yet")
		}
		return nil
	})
	start := time.Now()
	if err := r.stop(); err != nil {
		t.Fatalf("stop while connecting: %v", err)
	}
	t.Logf("exited %v after SIGTERM", time.Since(start))
}
