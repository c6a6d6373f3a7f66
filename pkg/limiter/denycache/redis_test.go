package denycache

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/redis"
)

// newRedis starts a Redis server and returns it with a store on it, closed
// when the test ends.
func newRedis(t *testing.T) (*redistest.Server, *redis.Store) {
	t.Helper()
	srv := redistest.Standalone(t, redistest.Local())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := redis.New(ctx, redis.Config{Addrs: []string{srv.Addr()}, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return srv, st
}

// TestSuiteOverRedis runs the batch table and resets on a cache over the
// Redis store (standalone).
func TestSuiteOverRedis(t *testing.T) {
	_, st := newRedis(t)
	limitertest.RunSuite(t, limitertest.Suite{
		Store: func(t *testing.T) limiter.Store { return newCache(t, st, nil) },
	}, limitertest.Config{Prefix: limitertest.Prefix()})
}

// evalCalls is the number of EVALSHA and EVAL calls in INFO commandstats.
func evalCalls(t *testing.T, srv *redistest.Server) int64 {
	t.Helper()
	info, _ := srv.MustDo("INFO", "commandstats").(string)
	var n int64
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (name != "cmdstat_evalsha" && name != "cmdstat_eval") {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if k, v, _ := strings.Cut(f, "="); k == "calls" {
				c, _ := strconv.ParseInt(v, 10, 64)
				n += c
			}
		}
	}
	return n
}

// TestHotKeyOnRedis: one subject hammered far over its limit costs Redis at
// most 0.05 calls per denied request, and exactly the limit is admitted.
func TestHotKeyOnRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server")
	}
	srv, st := newRedis(t)
	hits := &hitCounter{}
	c, err := New(Config{Store: st, Observer: hits})
	if err != nil {
		t.Fatal(err)
	}
	for _, alg := range []limiter.Algorithm{limiter.FixedWindow, limiter.TokenBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			const limit, workers, calls = 20, 8, 250
			p := policy(t, "hot."+alg.String(), alg, limit, time.Hour)
			s := subject("hot-" + alg.String())
			before := evalCalls(t, srv)
			allowed, denied := hammer(t, c, p, s, workers, calls)
			redisCalls := evalCalls(t, srv) - before
			if allowed != limit {
				t.Fatalf("admitted %d, limit %d", allowed, limit)
			}
			// Every Redis call counts, the allowed ones included.
			perDenied := float64(redisCalls) / float64(denied)
			t.Logf("%d denied, %d Redis calls (%d allowed): %.4f Redis calls per denied request", denied, redisCalls, limit, perDenied)
			if perDenied > 0.05 {
				t.Fatalf("%.4f Redis calls per denied request, want ≤ 0.05", perDenied)
			}
		})
	}
}
