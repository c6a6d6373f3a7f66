package e2e_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/deploytest"
	"github.com/envoy-rls/envoy-rls/internal/polltest"
)

// TestStatsdTargetDownIsLogged: started as ratelimit, statsd is on by
// default over TCP; with nothing listening at STATSD_HOST:STATSD_PORT the
// binary logs a warning naming the target (docs/observe.md: one warning
// per interval) instead of dropping the stats without a sign, and the
// warning holds no request value.
func TestStatsdTargetDownIsLogged(t *testing.T) {
	redis, _ := withStandaloneRedis(t)
	target := deploytest.FreeAddr(t)
	host, port, _ := strings.Cut(target, ":")
	env, _ := redisRuntime(t, redis, "CACHE_KEY_PREFIX="+unique("statsd")+":",
		"STATSD_HOST="+host, "STATSD_PORT="+port, "STATS_FLUSH_INTERVAL=100ms")
	r := startReplica(t, "ratelimit-statsd-down", replicaConfig{Compat: true, Env: env})
	user := unique("rawval")
	r.checkAdmits(t, entry{"user", user}, 3, 4)
	polltest.Eventually(t, 10*time.Second, 50*time.Millisecond, "the statsd warning", func() error {
		if !r.log.contains(`"msg":"statsd send failed; those stats are dropped","addr":"` + target + `","protocol":"tcp"`) {
			return errors.New("not logged yet")
		}
		return nil
	})
	if r.log.contains(user) {
		t.Fatalf("a request value in the log:\n%s", r.log.tail(4000))
	}
}
