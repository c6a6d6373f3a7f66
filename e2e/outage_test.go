package e2e_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/envoy-rls/envoy-rls/internal/polltest"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
)

// failureLimit is the hourly limit of both policies of failureRules.
const failureLimit = 1_000_000

// failureRules: one policy per failure mode, with limits no test reaches.
var failureRules = failureModeRules(failureLimit, "closed", "open")

// outageDeadline is the gRPC deadline of the calls made while Redis fails.
const outageDeadline = 300 * time.Millisecond

// Bounds of the outage scenarios.
const (
	// recoverTimeout bounds waiting for decisions and readiness after Redis is
	// back (the issue asks for "a second or two"; the bound leaves room for
	// a loaded CI machine, the measured time is logged).
	recoverTimeout = 5 * time.Second
	// minOutageCalls is how many calls per policy must be answered while
	// Redis is down before it is restarted.
	minOutageCalls = 30
)

// phase of an outage scenario, as the load generator sees it.
// A test sets phaseChanging before it acts on Redis and the next phase once
// the action is done, so a call that started and ended in one phase saw only
// that phase.
const (
	phaseHealthy int32 = iota
	phaseDown
	phaseBack
	phaseChanging
)

// phased records results by the phase in which a call started and ended; a
// call that spans a change is only checked for errors and its deadline.
type phased struct {
	phase atomic.Int32
	// partial: only part of the keys fail while down (a Cluster master is
	// lost), so a closed-policy call may also be answered OK.
	partial bool

	all        tally
	healthy    tally
	downClosed tally
	downOpen   tally
	back       tally
}

func (p *phased) record(policy string, r result, start, end int32) {
	p.all.add(r)
	if r.Err != nil {
		p.all.note("%s: %v (phase %d..%d)", policy, r, start, end)
	}
	if r.Took > r.Deadline+deadlineTolerance {
		p.all.note("%s: outlived its deadline: %v", policy, r)
	}
	if start != end {
		return
	}
	switch {
	case start == phaseHealthy:
		p.healthy.add(r)
		if !r.ok() {
			p.healthy.note("%s: %v", policy, r)
		}
	case start == phaseDown && policy == "closed":
		p.downClosed.add(r)
		if p.partial && r.ok() {
			break
		}
		if !r.over() || r.Headers["Retry-After"] == "" {
			p.downClosed.note("%v", r)
		}
	case start == phaseDown:
		p.downOpen.add(r)
		if !r.ok() {
			p.downOpen.note("%v", r)
		}
	case start == phaseBack:
		p.back.add(r)
	}
}

// run calls both policies from n goroutines over the replicas until stop
// is closed (bounded by a call count).
func (p *phased) run(rs []*replica, n int, subjects int, stop <-chan struct{}) {
	load(n, 1_000_000, stop, func(g, i int) {
		r := rs[g%len(rs)]
		policy := "closed"
		if i%2 == 1 {
			policy = "open"
		}
		subject := entry{policy, fmt.Sprintf("s%d", (g*7+i)%subjects)}
		start := p.phase.Load()
		res := r.call(outageDeadline, 1, subject)
		p.record(policy, res, start, p.phase.Load())
		if res.Took < 5*time.Millisecond {
			// Fail-fast answers come back at once; keep the loop from
			// spinning the two cores the replicas need.
			time.Sleep(2 * time.Millisecond)
		}
	})
}

// readyz returns a replica's /readyz status code (0 on a transport error).
func readyz(r *replica) int {
	code, _, err := r.admin("/readyz")
	if err != nil {
		return 0
	}
	return code
}

// waitReadyz waits until every replica's /readyz answers want.
func waitReadyz(t *testing.T, rs []*replica, want int, timeout time.Duration) time.Duration {
	t.Helper()
	return polltest.Eventually(t, timeout, 20*time.Millisecond, fmt.Sprintf("/readyz %d on every replica", want), func() error {
		for _, r := range rs {
			if got := readyz(r); got != want {
				return fmt.Errorf("%s /readyz %d", r.name, got)
			}
		}
		return nil
	})
}

// waitDecisions waits until a closed-policy call (OVER_LIMIT when the store
// fails) is answered OK on every replica: Redis decides again.
func waitDecisions(t *testing.T, rs []*replica, subjects int, timeout time.Duration) time.Duration {
	t.Helper()
	return polltest.Eventually(t, timeout, 20*time.Millisecond, "decisions from Redis on every replica", func() error {
		for _, r := range rs {
			for s := 0; s < subjects; s++ {
				if res := r.call(outageDeadline, 1, entry{"closed", fmt.Sprintf("s%d", s)}); !res.ok() {
					return fmt.Errorf("%s subject s%d: %v", r.name, s, res)
				}
			}
		}
		return nil
	})
}

// waitRedisDecides waits until a call of a fresh closed-policy subject
// (OVER_LIMIT while the store fails) is answered OK by r: Redis decides
// again.
func waitRedisDecides(t *testing.T, r *replica) time.Duration {
	t.Helper()
	return polltest.Eventually(t, recoverTimeout, 20*time.Millisecond, "decisions from Redis on "+r.name, func() error {
		if res := r.call(outageDeadline, 1, entry{"closed", unique("probe")}); !res.ok() {
			return fmt.Errorf("%v", res)
		}
		return nil
	})
}

// waitCount waits until the tally holds at least n answered calls.
func waitCount(t *testing.T, c *tally, n int, timeout time.Duration, what string) {
	t.Helper()
	polltest.Eventually(t, timeout, 10*time.Millisecond, what, func() error {
		c.mu.Lock()
		defer c.mu.Unlock()
		if got := c.ok + c.over; got < n {
			return fmt.Errorf("%d calls so far", got)
		}
		return nil
	})
}

// checkPhased fails the test on any gRPC error, late call, or wrong answer
// in a phase.
func checkPhased(t *testing.T, p *phased) {
	t.Helper()
	checkPhasedAllowing(t, p, 0, 0)
}

// checkPhasedAllowing is checkPhased with up to allowDeadline calls that
// ended in DeadlineExceeded (never late beyond the tolerance) forgiven, and
// up to allowSlowHealthy answers of the healthy phase that differ from
// Redis's (a store slower than its timeout is answered by the policy's
// failure mode, which is right, but not what this phase expects).
func checkPhasedAllowing(t *testing.T, p *phased, allowDeadline, allowSlowHealthy int) {
	t.Helper()
	t.Logf("all calls: %v", &p.all)
	t.Logf("healthy: %v", &p.healthy)
	t.Logf("down, closed policy: %v", &p.downClosed)
	t.Logf("down, open policy: %v", &p.downOpen)
	t.Logf("back: %v", &p.back)
	p.all.mu.Lock()
	forgiven := min(p.all.errs[codes.DeadlineExceeded], allowDeadline)
	p.all.mu.Unlock()
	if p.all.failed()-forgiven != 0 || p.all.late != 0 {
		t.Errorf("every call must be answered before its deadline (%v + %v): %v", outageDeadline, deadlineTolerance, &p.all)
	}
	for _, c := range []struct {
		name string
		t    *tally
	}{{"healthy", &p.healthy}, {"down/closed", &p.downClosed}, {"down/open", &p.downOpen}} {
		// A forgiven DeadlineExceeded is also noted as an unexpected answer
		// of its phase: only the others fail the phase.
		c.t.mu.Lock()
		unexplained := len(c.t.samples)
		if forgiven > 0 {
			unexplained -= min(c.t.errs[codes.DeadlineExceeded], unexplained)
		}
		if c.t == &p.healthy {
			unexplained -= min(allowSlowHealthy, unexplained)
		}
		c.t.mu.Unlock()
		if unexplained != 0 {
			t.Errorf("%s: unexpected answers: %v", c.name, c.t)
		}
	}
}

// TestRedisOutage: Redis is killed under load and restarted on its port.
// While it is down, `closed` policies answer OVER_LIMIT with Retry-After,
// `open` policies OK, no call outlives its deadline; /readyz stays 200 on
// the replicas with the default --readiness (rules) while /healthz and
// envoy_rls_store_up report the store down, and is 503 on the replica with
// --readiness store. Once Redis is back, decisions resume, the store is
// reported up and /readyz is 200 everywhere.
func TestRedisOutage(t *testing.T) {
	redis, cfg := withStandaloneRedis(t, redistest.Local())
	def := startReplicas(t, 2, failureRules, cfg)
	cfg.Args = []string{"--readiness", "store"}
	storeReady := startReplicas(t, 1, failureRules, cfg)
	storeReady[0].name = "readiness-store"
	rs := append(append([]*replica{}, def...), storeReady...)
	const subjects = 8

	var p phased
	stopLoad := startLoad(func(stop <-chan struct{}) { p.run(rs, 12, subjects, stop) })
	defer stopLoad()

	waitCount(t, &p.healthy, 100, 20*time.Second, "calls while healthy")
	fallbacksBefore := rs[0].metric(`envoy_rls_fallback_total{mode="closed"}`)

	p.phase.Store(phaseChanging)
	redis.Kill()
	p.phase.Store(phaseDown)
	t.Logf("redis killed (pid gone); load continues")
	took := waitReadyz(t, storeReady, http.StatusServiceUnavailable, recoverTimeout)
	t.Logf("/readyz 503 on the --readiness store replica %v after the kill", took)
	if _, body := storeReady[0].mustAdmin("/readyz"); !strings.Contains(body, "store unreachable") {
		t.Errorf("/readyz with --readiness store while Redis is down: %q, want the reason (store unreachable)", body)
	}
	took = waitStoreState(t, def, false, recoverTimeout)
	t.Logf("store reported down on /healthz and store_up %v after the kill", took)
	checkReadyz(t, def, http.StatusOK, "while Redis is down")
	waitCount(t, &p.downClosed, minOutageCalls, 20*time.Second, "closed-policy calls while Redis is down")
	waitCount(t, &p.downOpen, minOutageCalls, 20*time.Second, "open-policy calls while Redis is down")
	checkReadyz(t, def, http.StatusOK, "after the outage calls")
	if got := rs[0].metric(`envoy_rls_fallback_total{mode="closed"}`); got <= fallbacksBefore {
		t.Errorf(`envoy_rls_fallback_total{mode="closed"} %v, want more than %v`, got, fallbacksBefore)
	}

	p.phase.Store(phaseChanging)
	redis.Restart()
	p.phase.Store(phaseBack)
	took = waitDecisions(t, rs, subjects, recoverTimeout)
	t.Logf("decisions resumed on every replica %v after Redis answered PING again", took)
	took = waitReadyz(t, rs, http.StatusOK, recoverTimeout)
	t.Logf("/readyz 200 on every replica %v after that", took)
	waitStoreState(t, rs, true, recoverTimeout)
	waitCount(t, &p.back, 100, 20*time.Second, "calls after the restart")
	stopLoad()
	checkPhased(t, &p)
}

// TestRedisHang: Redis stops answering (SIGSTOP) under load, then continues
// (SIGCONT). No call outlives its deadline; /readyz stays 200 while
// /healthz reports the store down, then up.
//
// Two sets of replicas share the Redis: "tight" ones run with a
// --redis-timeout below the callers' deadline and must answer every call by
// the policy's failure mode (closed: OVER_LIMIT with Retry-After, open: OK).
// "default" ones keep the default --redis-timeout (500ms), longer than the
// 300ms deadline: they too must answer by failure mode in time, because the
// server keeps a reserve of the caller's deadline from the store (an earlier
// version spent the whole deadline waiting, so Envoy saw DeadlineExceeded and
// its own failure_mode_deny decided instead of the policy).
func TestRedisHang(t *testing.T) {
	redis, cfg := withStandaloneRedis(t, redistest.Local())
	def := startReplicas(t, 2, failureRules, cfg)
	cfg.Args = []string{"--redis-timeout", "100ms"}
	tight := startReplicas(t, 2, failureRules, cfg)
	for _, r := range tight {
		r.name = "tight-" + r.name
	}
	all := append(append([]*replica{}, def...), tight...)
	const subjects = 8

	var pDef, pTight phased
	stopLoad := startLoad(
		func(stop <-chan struct{}) { pDef.run(def, 6, subjects, stop) },
		func(stop <-chan struct{}) { pTight.run(tight, 6, subjects, stop) },
	)
	defer stopLoad()
	setPhase := func(ph int32) { pDef.phase.Store(ph); pTight.phase.Store(ph) }

	waitCount(t, &pTight.healthy, 50, 20*time.Second, "calls while healthy")
	waitCount(t, &pDef.healthy, 50, 20*time.Second, "calls while healthy")
	setPhase(phaseChanging)
	redis.Pause()
	setPhase(phaseDown)
	t.Logf("redis paused (SIGSTOP); load continues")
	took := waitStoreState(t, all, false, recoverTimeout)
	t.Logf("store reported down on every replica %v after the pause", took)
	checkReadyz(t, all, http.StatusOK, "while Redis hangs")
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
	// A loaded two-core machine now and then takes Redis past 100 ms while
	// healthy: those calls are answered by the failure mode (still in
	// time, still no error); at most 5 % of the healthy phase is forgiven.
	pTight.healthy.mu.Lock()
	healthy := pTight.healthy.ok + pTight.healthy.over
	pTight.healthy.mu.Unlock()
	checkPhasedAllowing(t, &pTight, 0, healthy/20)
	t.Logf("--- replicas with the default --redis-timeout")
	// These replicas answer 50ms before the 300ms deadline (the answer
	// reserve). A full -race suite on two cores can stall a process for
	// longer than that now and then, so a few DeadlineExceeded (at most 2 %)
	// are forgiven here; without the reserve every call while Redis hangs
	// failed, which this still catches.
	pDef.all.mu.Lock()
	total := pDef.all.ok + pDef.all.over
	for _, n := range pDef.all.errs {
		total += n
	}
	pDef.all.mu.Unlock()
	checkPhasedAllowing(t, &pDef, total/50, 0)
}

// checkReadyz fails the test unless every replica's /readyz answers want.
func checkReadyz(t *testing.T, rs []*replica, want int, when string) {
	t.Helper()
	for _, r := range rs {
		if code, body, err := r.admin("/readyz"); err != nil || code != want {
			t.Errorf("%s /readyz %s: %d %q %v, want %d", r.name, when, code, body, err, want)
		}
	}
}

// waitStoreState waits until every replica reports its Redis store up (or
// down) on /healthz, then checks envoy_rls_store_up once (it is set with the
// /healthz state). It polls /healthz only, every 50ms: the replicas are
// under load and /metrics costs them more.
func waitStoreState(t *testing.T, rs []*replica, up bool, timeout time.Duration) time.Duration {
	t.Helper()
	line, gauge := "store redis: down since", 0.0
	if up {
		line, gauge = "store redis: up since", 1
	}
	took := polltest.Eventually(t, timeout, 50*time.Millisecond, fmt.Sprintf("%q on every replica", line), func() error {
		for _, r := range rs {
			code, body, err := r.admin("/healthz")
			if err != nil || code != http.StatusOK || !strings.Contains(body, line) {
				return fmt.Errorf("%s /healthz %d %q %v", r.name, code, body, err)
			}
		}
		return nil
	})
	for _, r := range rs {
		if g := r.metric("envoy_rls_store_up"); g != gauge {
			t.Errorf("%s envoy_rls_store_up %v with /healthz %q", r.name, g, line)
		}
	}
	return took
}

// failoverTimeout bounds waiting for a replica to be promoted and every
// subject to be decided by Redis again (cluster-node-timeout is 1s).
const failoverTimeout = 30 * time.Second

// TestRedisClusterMasterKilled: three replicas on a local six-node Redis
// Cluster (--redis-mode cluster); a master is killed under load. The keys it
// served are answered by their policies' failure modes (closed: OVER_LIMIT
// with Retry-After; open: OK) until its replica is promoted, no call outlives
// its deadline or fails, and then Redis decides every subject again.
func TestRedisClusterMasterKilled(t *testing.T) {
	binary(t)
	c := redistest.StartCluster(t)
	rs := startReplicas(t, 3, failureRules, replicaConfig{
		Store: "redis", RedisAddr: strings.Join(c.Addrs(), ","), RedisMode: "cluster",
	})
	// Enough subjects that every master serves some of them.
	const subjects = 48

	p := phased{partial: true}
	stopLoad := startLoad(func(stop <-chan struct{}) { p.run(rs, 12, subjects, stop) })
	defer stopLoad()

	waitCount(t, &p.healthy, 200, 20*time.Second, "calls while the cluster is healthy")
	var victim *redistest.Server
	for _, n := range c.Nodes {
		if role, err := c.Role(n); err == nil && role == "master" {
			victim = n
			break
		}
	}
	if victim == nil {
		t.Fatal("no master in the cluster")
	}
	p.phase.Store(phaseChanging)
	victim.Kill()
	p.phase.Store(phaseDown)
	t.Logf("master %s killed", victim.Addr())

	// Failure-mode answers while the slot range has no master.
	polltest.Eventually(t, failoverTimeout, 10*time.Millisecond, "closed-policy fallback answers during the failover", func() error {
		p.downClosed.mu.Lock()
		defer p.downClosed.mu.Unlock()
		if p.downClosed.over == 0 {
			return fmt.Errorf("none yet (%d OK)", p.downClosed.ok)
		}
		return nil
	})
	took := waitDecisions(t, rs, subjects, failoverTimeout)
	t.Logf("every subject decided by Redis on every replica %v after the kill was noticed", took)
	p.phase.Store(phaseBack)
	waitCount(t, &p.back, 200, 20*time.Second, "calls after the failover")
	stopLoad()
	checkPhased(t, &p)
	if p.downOpen.ok == 0 {
		t.Errorf("no open-policy call answered during the failover: %v", &p.downOpen)
	}
}

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

// TestHealthEndpointsDuringRedisOutage: Redis is killed under replicas with
// each health setting. /healthz stays 200 on every one. --readiness store
// turns /readyz 503 and leaves /healthcheck 200, so that a liveness probe
// on it (as reference deployments have) does not restart the pods; the
// binary started as ratelimit with REDIS_HEALTH_CHECK_ACTIVE_CONNECTION=true
// answers /healthcheck 500 as the reference does, and /readyz 503; by
// default both stay 200. Redis back, every endpoint answers 200.
func TestHealthEndpointsDuringRedisOutage(t *testing.T) {
	redis, cfg := withStandaloneRedis(t, redistest.Local())
	cfg.Rules, cfg.Secret = rulesDir(t, startRules), secretFile(t)
	def := startReplica(t, "default", cfg)
	cfg.Args = []string{"--readiness", "store"}
	storeReady := startReplica(t, "readiness-store", cfg)
	env, _ := redisRuntime(t, redis, "USE_STATSD=false", "CACHE_KEY_PREFIX="+unique("health")+":", "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION=true")
	reference := startReplica(t, "reference-health", replicaConfig{Compat: true, Env: env})

	type want struct{ readyz, healthcheck int }
	check := func(when string, wants map[*replica]want) {
		t.Helper()
		polltest.Eventually(t, recoverTimeout, 20*time.Millisecond, "health endpoints "+when, func() error {
			for r, w := range wants {
				for path, code := range map[string]int{"/healthz": http.StatusOK, "/readyz": w.readyz, "/healthcheck": w.healthcheck} {
					if got, body, err := r.admin(path); err != nil || got != code {
						return fmt.Errorf("%s %s: %d %q %v, want %d", r.name, path, got, body, err, code)
					}
				}
			}
			return nil
		})
	}
	up := want{http.StatusOK, http.StatusOK}
	check("with Redis up", map[*replica]want{def: up, storeReady: up, reference: up})
	redis.Kill()
	waitStoreState(t, []*replica{def, storeReady, reference}, false, recoverTimeout)
	check("with Redis down", map[*replica]want{
		def:        up,
		storeReady: {http.StatusServiceUnavailable, http.StatusOK},
		reference:  {http.StatusServiceUnavailable, http.StatusInternalServerError},
	})
	if _, body, _ := reference.admin("/healthcheck"); !strings.Contains(body, "store unreachable") {
		t.Errorf("/healthcheck with REDIS_HEALTH_CHECK_ACTIVE_CONNECTION=true while Redis is down: %q, want the reason", body)
	}
	redis.Restart()
	check("with Redis back", map[*replica]want{def: up, storeReady: up, reference: up})
}
