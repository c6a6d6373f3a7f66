package e2e_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
)

// localRules: 10 an hour per subject, one policy per failure mode (an hour,
// so that no window ends during the test).
var localRules = failureModeRules(10, "local", "open", "closed")

// TestLocalFallbackRedisKilled: with Redis killed, a replica started with
// --replicas-hint 2 admits exactly 5 calls of one subject to a
// failure_mode local policy of 10 an hour (with the usual headers), a
// fail-open policy admits every call and a fail-closed one none, and it
// stays ready. When Redis is back, Redis decides again and the local
// counts are dropped: a second outage starts from a full local share.
func TestLocalFallbackRedisKilled(t *testing.T) {
	redis, cfg := withStandaloneRedis(t, redistest.Local())
	cfg.Args = []string{"--replicas-hint", "2"}
	rs := startReplicas(t, 1, localRules, cfg)
	r := rs[0]
	subject := unique("subject")
	// While Redis is up, Redis decides: the whole limit of 10.
	if res := r.mustCall(t, entry{"local", unique("up")}); !res.ok() || res.Headers["X-RateLimit-Remaining"] != "9" {
		t.Fatalf("with Redis up: %v, want OK with 9 remaining", res)
	}

	redis.Kill()
	waitStoreState(t, rs, false, recoverTimeout)
	checkReadyz(t, rs, http.StatusOK, "with Redis killed")
	admitted := func(key, subject string, n int) (ok int, last result) {
		for i := 0; i < n; i++ {
			last = r.call(outageDeadline, 1, entry{key, subject})
			switch {
			case last.ok():
				if ok != i {
					t.Errorf("%s call %d: OK after a denial", key, i)
				}
				if key == "local" && last.Headers["X-RateLimit-Remaining"] != fmt.Sprint(4-i) {
					t.Errorf("%s call %d: headers %v, want X-RateLimit-Remaining %d of the local share", key, i, last.Headers, 4-i)
				}
				ok++
			case last.over():
			default:
				t.Fatalf("%s call %d: %v", key, i, last)
			}
		}
		return ok, last
	}
	if ok, last := admitted("local", subject, 8); ok != 5 || last.Headers["Retry-After"] == "" {
		t.Errorf("failure_mode local, Redis down, --replicas-hint 2: %d of 8 admitted (last %v), want exactly 5 then OVER_LIMIT with Retry-After", ok, last)
	}
	if ok, _ := admitted("open", subject, 12); ok != 12 {
		t.Errorf("failure_mode open, Redis down: %d of 12 admitted, want all", ok)
	}
	if ok, last := admitted("closed", subject, 3); ok != 0 || last.Headers["Retry-After"] == "" {
		t.Errorf("failure_mode closed, Redis down: %d of 3 admitted (last %v), want none", ok, last)
	}
	for sample, want := range map[string]float64{
		`envoy_rls_local_fallback_decisions_total{domain="e2e",policy="e2e/local",result="ok"}`:         5,
		`envoy_rls_local_fallback_decisions_total{domain="e2e",policy="e2e/local",result="over_limit"}`: 3,
		`envoy_rls_fallback_total{mode="local"}`:                                                        8,
		`envoy_rls_fallback_total{mode="open"}`:                                                         12,
		`envoy_rls_fallback_total{mode="closed"}`:                                                       3,
	} {
		if got := r.metric(sample); got != want {
			t.Errorf("%s = %v, want %v", sample, got, want)
		}
	}

	// Redis back: Redis decides (the subject has consumed nothing there).
	redis.Restart()
	took := waitRedisDecides(t, r)
	t.Logf("decisions from Redis %v after the restart", took)
	if res := r.mustCall(t, entry{"local", subject}); !res.ok() || res.Headers["X-RateLimit-Remaining"] != "9" {
		t.Errorf("Redis back: %v, want OK from Redis with 9 remaining", res)
	}
	if !r.log.contains("store decides again: local fallback state dropped") {
		t.Error("no log line for the dropped local state")
	}

	// A second outage: the local share is whole again.
	redis.Kill()
	waitStoreState(t, rs, false, recoverTimeout)
	if ok, _ := admitted("local", subject, 7); ok != 5 {
		t.Errorf("second outage: %d of 7 admitted, want 5 (the local counts of the first outage dropped)", ok)
	}
	if r.log.contains(subject) {
		t.Error("a descriptor value reached the logs")
	}
}
