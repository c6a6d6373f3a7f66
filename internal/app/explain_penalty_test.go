package app

import (
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
)

const penaltyRules = `domain: app
descriptors:
  - key: login
    rate_limit:
      unit: hour
      requests_per_unit: 2
      penalty: {duration: 10m}
`

// TestExplainBlocked: a subject over a penalty policy's limit is blocked,
// and explain says so with the block's remaining time, without consuming.
func TestExplainBlockedMemory(t *testing.T) {
	r, c := startExplainServerWith(t, penaltyRules, "memory", nil)
	checkExplainBlocked(t, r, c)
}

func TestExplainBlockedRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("Redis lane")
	}
	srv := redistest.Standalone(t, redistest.Local())
	env := map[string]string{SecretEnv: "a-shared-secret-of-32-bytes-----", "ENVOY_RLS_REDIS_ADDR": srv.Addr()}
	r, c := startExplainServerWith(t, penaltyRules, "redis", env, "--redis-timeout", "2s")
	checkExplainBlocked(t, r, c)
}

func checkExplainBlocked(t *testing.T, r *running, c *explainClient) {
	const raw = "rawval-login-3"
	explain := func() limitDoc {
		var ans explainAnswer
		c.decode("POST", "/v1/explain", explainBody("login", raw), &ans)
		if len(ans.Descriptors) != 1 || len(ans.Descriptors[0].Limits) != 1 {
			t.Fatalf("explain: %+v", ans)
		}
		return ans.Descriptors[0].Limits[0]
	}
	if l := explain(); l.Blocked == nil || *l.Blocked || l.BlockedMs != nil {
		t.Fatalf("before any hit: blocked %v %v, want false and no time", l.Blocked, l.BlockedMs)
	}
	for i := range 3 {
		want := rlsv3.RateLimitResponse_OK
		if i == 2 {
			want = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if code := rlsHit(t, r, "login", raw); code != want {
			t.Fatalf("hit %d: %v, want %v", i+1, code, want)
		}
	}
	for range 2 { // explain consumes nothing: the same answer twice
		l := explain()
		if l.Blocked == nil || !*l.Blocked || l.BlockedMs == nil || *l.BlockedMs <= 9*60*1000 || *l.BlockedMs > 10*60*1000 || *l.Allowed {
			t.Fatalf("after the offence: blocked %v for %v ms, allowed %v; want blocked for about 10m", deref(l.Blocked), deref(l.BlockedMs), deref(l.Allowed))
		}
	}
	for _, b := range c.bodies {
		if strings.Contains(b, raw) {
			t.Fatalf("the raw value in an answer: %s", b)
		}
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}
