package e2e_test

import (
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
)

// knownBugsEnv, set to 1, turns the checks of known, reported bugs from logs
// into failures (see the tests that read it).
const knownBugsEnv = "E2E_KNOWN_BUGS"

// TestRedisHang: Redis stops answering (SIGSTOP) under load, then continues
// (SIGCONT). No call outlives its deadline; /readyz turns 503 and back.
//
// Two sets of replicas share the Redis: "tight" ones run with a
// --redis-timeout below the callers' deadline and must answer every call by
// the policy's failure mode (closed: OVER_LIMIT with Retry-After, open: OK).
// "default" ones keep the default --redis-timeout (500ms), longer than the
// 300ms deadline.
//
// KNOWN BUG (reported, not yet fixed): the server gives the store the whole
// caller deadline, so with a hung Redis the failure-mode answer is written
// after the caller gave up and Envoy sees DeadlineExceeded instead of the
// policy's answer; Envoy then applies its own failure_mode_deny, so a
// `closed` policy fails open behind Envoy's default. With E2E_KNOWN_BUGS=1
// the default replicas are held to the tight replicas' standard.
func TestRedisHang(t *testing.T) {
	binary(t)
	redis := redistest.Standalone(t, redistest.Local())
	cfg := replicaConfig{Store: "redis", RedisAddr: redis.Addr(), RedisMode: "standalone"}
	def := startReplicas(t, 2, failureRules, cfg)
	cfg.Args = []string{"--redis-timeout", "100ms"}
	tight := startReplicas(t, 2, failureRules, cfg)
	for _, r := range tight {
		r.name = "tight-" + r.name
	}
	all := append(append([]*replica{}, def...), tight...)
	const subjects = 8

	var pDef, pTight phased
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); pDef.run(def, 6, subjects, stop) }()
	go func() { defer wg.Done(); pTight.run(tight, 6, subjects, stop) }()
	stopped := false
	stopLoad := func() {
		if !stopped {
			stopped = true
			close(stop)
			wg.Wait()
		}
	}
	defer stopLoad()
	setPhase := func(ph int32) { pDef.phase.Store(ph); pTight.phase.Store(ph) }

	waitCount(t, &pTight.healthy, 50, 20*time.Second, "calls while healthy")
	waitCount(t, &pDef.healthy, 50, 20*time.Second, "calls while healthy")
	setPhase(phaseChanging)
	redis.Pause()
	setPhase(phaseDown)
	t.Logf("redis paused (SIGSTOP); load continues")
	took := waitReadyz(t, all, http.StatusServiceUnavailable, recoverTimeout)
	t.Logf("/readyz 503 on every replica %v after the pause", took)
	waitCount(t, &pTight.downClosed, minOutageCalls, 20*time.Second, "closed-policy calls while Redis hangs")
	waitCount(t, &pTight.downOpen, minOutageCalls, 20*time.Second, "open-policy calls while Redis hangs")
	setPhase(phaseChanging)
	redis.Resume()
	setPhase(phaseBack)
	took = waitDecisions(t, all, subjects, recoverTimeout)
	t.Logf("decisions resumed on every replica %v after SIGCONT", took)
	waitReadyz(t, all, http.StatusOK, recoverTimeout)
	waitCount(t, &pTight.back, 50, 20*time.Second, "calls after the resume")
	stopLoad()

	t.Logf("--- replicas with --redis-timeout 100ms")
	checkPhased(t, &pTight)
	t.Logf("--- replicas with the default --redis-timeout")
	if os.Getenv(knownBugsEnv) == "1" {
		checkPhased(t, &pDef)
		return
	}
	// Known bug: only the deadline bound, and answers while healthy.
	t.Logf("all calls: %v", &pDef.all)
	t.Logf("down, closed policy: %v", &pDef.downClosed)
	t.Logf("down, open policy: %v", &pDef.downOpen)
	if pDef.all.late != 0 {
		t.Errorf("calls outlived their deadline (%v + %v): %v", outageDeadline, deadlineTolerance, &pDef.all)
	}
	if len(pDef.healthy.samples) != 0 || pDef.healthy.failed() != 0 {
		t.Errorf("healthy: unexpected answers: %v", &pDef.healthy)
	}
	pDef.all.mu.Lock()
	for c, n := range pDef.all.errs {
		if c != codes.DeadlineExceeded {
			t.Errorf("%d calls failed with %v; only DeadlineExceeded is the known bug", n, c)
		}
	}
	if n := pDef.all.errs[codes.DeadlineExceeded]; n > 0 {
		t.Logf("KNOWN BUG: %d calls saw DeadlineExceeded instead of their policy's failure mode (set %s=1 to fail on it)", n, knownBugsEnv)
	}
	pDef.all.mu.Unlock()
}
