package e2e_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/envoy-rls/envoy-rls/internal/polltest"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
)

// TestSIGTERMDrainsInFlightCalls: calls held in the server (Redis paused, so
// they wait for the store) when SIGTERM arrives all complete with a decision
// once Redis continues; /readyz says draining and /healthcheck answers 500
// meanwhile; the process exits 0.
func TestSIGTERMDrainsInFlightCalls(t *testing.T) {
	redis, cfg := withStandaloneRedis(t, redistest.Local())
	// The store waits up to 5s for Redis: the calls stay in flight while
	// it is paused. With as many program runs in progress at once as
	// there are calls, none waits in the group queue: each is sent to
	// Redis as it arrives, and the group-size histogram counts it.
	const inFlight = 20
	cfg.Args = []string{"--redis-timeout", "5s", "--redis-group-in-flight", "32"}
	rs := startReplicas(t, 1, failureRules, cfg)
	r := rs[0]
	subject := entry{"closed", unique("drain")}
	if res := r.mustCall(t, subject); !res.ok() {
		t.Fatalf("warm-up call: %v", res)
	}
	sent := func() float64 { return r.metric("envoy_rls_redis_group_requests_sum") }
	base := sent()

	redis.Pause()
	paused := true
	defer func() {
		if paused {
			redis.Resume()
		}
	}()
	results := make([]result, inFlight)
	var wg sync.WaitGroup
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = r.call(10*time.Second, 1, subject)
		}()
	}
	// Every call has reached the store (and waits on the paused Redis)
	// once the runs sent carry all of them.
	polltest.Eventually(t, 10*time.Second, 10*time.Millisecond, "every call sent to Redis", func() error {
		if n := sent() - base; n != inFlight {
			return fmt.Errorf("%v of %d calls sent", n, inFlight)
		}
		return nil
	})

	r.terminate(t)
	polltest.Eventually(t, 5*time.Second, 20*time.Millisecond, "/readyz 503 draining", func() error {
		code, body, err := r.admin("/readyz")
		if err != nil || code != http.StatusServiceUnavailable || !strings.Contains(body, "draining") {
			return fmt.Errorf("/readyz %d %q %v", code, body, err)
		}
		return nil
	})
	// The reference's probe path answers 500 while draining.
	if code, body, err := r.admin("/healthcheck"); err != nil || code != http.StatusInternalServerError {
		t.Errorf("/healthcheck while draining: %d %q %v, want 500", code, body, err)
	}
	select {
	case <-r.done:
		t.Fatalf("the process exited with calls in flight: %v", r.exitErr)
	default:
	}
	redis.Resume()
	paused = false
	wg.Wait()

	for i, res := range results {
		if !res.ok() {
			t.Errorf("in-flight call %d: %v, want OK", i, res)
		}
	}
	code, err := r.wait(stopTimeout)
	if err != nil || code != 0 {
		t.Errorf("after SIGTERM: exit %d %v, want 0", code, err)
	}
	if !r.log.contains("drained: every in-flight call finished") {
		t.Errorf("no drain line in the log")
	}
}

// TestSIGTERMUnderBurst: SIGTERM lands in the middle of a burst of
// concurrent calls. Every call is either answered (OK or OVER_LIMIT) or, if
// the server had stopped accepting, refused with Unavailable, nothing else;
// the process exits 0.
func TestSIGTERMUnderBurst(t *testing.T) {
	_, cfg := withStandaloneRedis(t)
	r := startReplicas(t, 1, exactRules, cfg)[0]
	subject := entry{"fixed", unique("burst")}

	var all tally
	start := make(chan struct{})
	answered := make(chan struct{}) // closed by the first answer
	var once sync.Once
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := 0; i < 30; i++ {
				res := r.call(callTimeout, 1, subject)
				all.add(res)
				once.Do(func() { close(answered) })
				if c := status.Code(res.Err); res.Err != nil && c != codes.Unavailable {
					all.note("%v", res)
				}
			}
		}()
	}
	close(start)
	// SIGTERM while the burst runs: once the first call is answered.
	select {
	case <-answered:
	case <-time.After(callTimeout):
		t.Fatalf("no answer to the burst within %v", callTimeout)
	}
	r.terminate(t)
	wg.Wait()
	t.Logf("burst: %v", &all)
	if len(all.samples) != 0 || all.ok+all.over == 0 {
		t.Errorf("want only answers and Unavailable refusals: %v", &all)
	}
	code, err := r.wait(stopTimeout)
	if err != nil || code != 0 {
		t.Errorf("after SIGTERM: exit %d %v, want 0", code, err)
	}
}

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
		r.checkAdmits(t, entry{policy, "up"}, 2, 3)
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
