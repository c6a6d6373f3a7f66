package e2e_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/connectivity"

	"github.com/envoy-rls/envoy-rls/internal/binarytest"
	"github.com/envoy-rls/envoy-rls/internal/polltest"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
)

// hangCalls is how many calls TestRedisHangChargesNothing makes while Redis
// is stopped.
const hangCalls = 40

// hangDeadline is the deadline of the calls made while Redis is stopped:
// the store gives up at the default --redis-timeout (500 ms), well before
// it, so the answer by failure mode arrives in time even on a loaded
// machine.
const hangDeadline = time.Second

// TestRedisHangChargesNothing: calls of a fail-closed policy made while
// Redis is stopped (SIGSTOP) are answered by the failure mode (OVER_LIMIT
// with Retry-After) within their deadline. Their programs wait in Redis's
// socket and run after SIGCONT, past the deadline the binary gave them in
// Redis's clock, so none of them is counted: the subject's first call after
// the resume sees its whole limit but its own hit.
func TestRedisHangChargesNothing(t *testing.T) {
	binary(t)
	awayFromHourBoundary(t)
	redis, cfg := withStandaloneRedis(t, redistest.Local())
	// The default --redis-timeout (500 ms): the pause below (about that
	// long) is shorter than the 2 s after which a silent connection is
	// closed, so the stalled programs stay queued on it and do run on
	// resume.
	r := startReplicas(t, 1, failureRules, cfg)[0]
	subject := entry{"closed", unique("hang")}
	if res := r.mustCall(t, entry{"closed", unique("warm-up")}); !res.ok() {
		t.Fatalf("warm-up: %v", res)
	}

	redis.Pause()
	defer redis.Resume()
	held := &heldCalls{r: r, closed: subject, open: subject}
	held.start(hangCalls, hangDeadline)
	held.check(t, 30*time.Second)
	if t.Failed() {
		t.FailNow()
	}
	redis.Resume()

	// Decisions again (the replica's one pipelined connection carries these
	// calls after the stalled programs, so those have run).
	took := waitRedisDecides(t, r)
	t.Logf("decisions %v after SIGCONT", took)
	checkUncharged(t, r, subject)
}

// Deadlines of TestRedisHangGroupFailureModes. With --redis-timeout 2s the
// store gives up on the first two calls (sent at once, alone) at their own
// deadline less the answer reserve, about 1.45 s. The calls queued behind
// them outlive those runs (their store deadline is the 2 s timeout) and are
// sent together as one group that Redis never answers: they are answered
// about 3 s before their deadline. (Calls that leave the queue unsent at
// their deadline are pkg/limiter/redis's TestGroupHangEachCallOwnOutcome:
// here the answer reserve, 50 ms at most, is too thin a margin for dozens
// of calls at once on a loaded machine.)
const (
	groupHeadDeadline = 1500 * time.Millisecond
	groupLongDeadline = 5 * time.Second
)

// startGroupFaultReplica starts one replica of failureRules on a local
// Redis that the test stops or kills, and warms up both policies. Its
// store timeout (--redis-timeout 2s) is above the first calls' deadlines,
// so that the calls queued behind them outlive their runs; a silent
// connection is closed only after 8 s, longer than a pause.
func startGroupFaultReplica(t *testing.T) (*redistest.Server, *replica) {
	t.Helper()
	binary(t)
	awayFromHourBoundary(t)
	redis, cfg := withStandaloneRedis(t, redistest.Local())
	cfg.Args = []string{"--redis-timeout", "2s"}
	r := startReplicas(t, 1, failureRules, cfg)[0]
	for _, e := range []entry{{"closed", unique("warm-up")}, {"open", unique("warm-up")}} {
		if res := r.mustCall(t, e); !res.ok() {
			t.Fatalf("warm-up %s: %v", e.Key, res)
		}
	}
	return redis, r
}

// waitHeadRuns waits until runs() is base+2: the slot's two runs in flight
// (the default --redis-group-in-flight) sent.
func waitHeadRuns(t *testing.T, runs func() float64, base float64) {
	t.Helper()
	polltest.Eventually(t, 10*time.Second, 5*time.Millisecond, "the first two runs sent", func() error {
		if got := runs() - base; got != 2 {
			return fmt.Errorf("%v runs", got)
		}
		return nil
	})
}

// failureModeAnswer checks that res is what the policy named key answers
// without Redis: OVER_LIMIT with Retry-After for "closed", OK for "open",
// never a gRPC error.
func failureModeAnswer(key string, res result) error {
	switch {
	case res.Err != nil:
		return fmt.Errorf("%v", res)
	case key == "closed" && (!res.over() || res.Headers["Retry-After"] == ""):
		return fmt.Errorf("%v, want OVER_LIMIT with Retry-After", res)
	case key == "open" && !res.ok():
		return fmt.Errorf("%v, want OK", res)
	}
	return nil
}

// heldCalls are calls made while Redis does not answer, alternately of
// the subjects closed and open.
type heldCalls struct {
	r            *replica
	closed, open entry
	wg           sync.WaitGroup
	mu           sync.Mutex
	calls        []*heldCall
}

// heldCall is one of them and, once it returned, its answer.
type heldCall struct {
	e   entry
	res result
}

// start makes n more calls with deadline, each from a goroutine of its
// own.
func (h *heldCalls) start(n int, deadline time.Duration) {
	for i := range n {
		c := &heldCall{e: h.closed}
		if i%2 == 1 {
			c.e = h.open
		}
		h.mu.Lock()
		h.calls = append(h.calls, c)
		h.mu.Unlock()
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			res := h.r.call(deadline, 1, c.e)
			h.mu.Lock()
			c.res = res
			h.mu.Unlock()
		}()
	}
}

// check waits up to timeout for every call's answer, fails t for each one
// not answered by its policy's failure mode (failureModeAnswer) before its
// deadline, and returns the calls.
func (h *heldCalls) check(t *testing.T, timeout time.Duration) []*heldCall {
	t.Helper()
	done := make(chan struct{})
	go func() {
		h.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(timeout):
		t.Fatalf("calls still running %v after Redis stopped answering", timeout)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	nClosed, nOpen := 0, 0
	for i, c := range h.calls {
		err := failureModeAnswer(c.e.Key, c.res)
		if err == nil && c.res.Took > c.res.Deadline+deadlineTolerance {
			err = fmt.Errorf("%v: outlived its deadline", c.res)
		}
		switch {
		case err != nil:
			t.Errorf("call %d (%s): %v", i, c.e.Key, err)
		case c.e.Key == "closed":
			nClosed++
		default:
			nOpen++
		}
	}
	t.Logf("while Redis did not answer: %d closed-policy calls OVER_LIMIT, %d open-policy calls OK", nClosed, nOpen)
	return slices.Clone(h.calls)
}

// checkUncharged: the first call of e once Redis answers again is OK with
// the whole limit but its own hit: nothing of the calls answered by the
// failure mode meanwhile was charged.
func checkUncharged(t *testing.T, r *replica, e entry) {
	t.Helper()
	res := r.mustCall(t, e)
	left, err := strconv.Atoi(res.Headers["X-RateLimit-Remaining"])
	if !res.ok() || err != nil {
		t.Fatalf("first %s call once Redis answers: %v", e.Key, res)
	}
	if charged := failureLimit - 1 - left; charged != 0 {
		t.Errorf("%s policy: %d hits of the calls answered by the failure mode while Redis did not answer were charged (X-RateLimit-Remaining %d, want %d)",
			e.Key, charged, left, failureLimit-1)
	}
}

// TestRedisHangGroupFailureModes: Redis stops (SIGSTOP) while the binary
// has runs in flight and 32 calls of a fail-closed and a fail-open policy
// queued behind them, then sent together as one group run that gets no
// answer. Each call gets its own policy's answer within its deadline:
// OVER_LIMIT with Retry-After for the closed policy, OK for the open one,
// never a gRPC error. /metrics shows that a
// run carried more than one call. After SIGCONT nothing of it was
// counted: each subject's first call sees its whole limit but its own hit.
func TestRedisHangGroupFailureModes(t *testing.T) {
	redis, r := startGroupFaultReplica(t)
	closed, open := entry{"closed", unique("group-hang")}, entry{"open", unique("group-hang")}
	runs := func() float64 { return r.metric("envoy_rls_redis_group_requests_count") }
	carried := func() float64 { return r.metric("envoy_rls_redis_group_requests_sum") }
	base, baseCarried := runs(), carried()

	redis.Pause()
	defer redis.Resume()
	held := &heldCalls{r: r, closed: closed, open: open}
	// The slot's two runs in flight (the default --redis-group-in-flight),
	// stalled: one call of each policy.
	held.start(2, groupHeadDeadline)
	waitHeadRuns(t, runs, base)
	held.start(32, groupLongDeadline)
	calls := held.check(t, 30*time.Second)
	grouped := runs() - r.metric(`envoy_rls_redis_group_requests_bucket{le="1"}`)
	if grouped < 1 {
		t.Errorf("no run carried more than one call (%v runs after the warm-up)", runs()-base)
	}
	t.Logf("%v runs since the warm-up, %v of them of more than one call", runs()-base, grouped)
	// The two first calls alone, then every queued call of both policies
	// in one run.
	if n, c := runs()-base, carried()-baseCarried; n != 3 || c != float64(len(calls)) {
		t.Errorf("%v runs carried %v calls, want 3 runs of %d calls", n, c, len(calls))
	}
	redis.Resume()

	took := waitRedisDecides(t, r)
	t.Logf("decisions %v after SIGCONT", took)
	checkUncharged(t, r, closed)
	checkUncharged(t, r, open)
}

// TestRedisKilledGroupFailureModes: Redis is killed (SIGKILL, while
// stopped, so that it answers nothing) with two runs of the binary in
// flight and 32 calls of a fail-closed and a fail-open policy queued or
// arriving behind them. Each call is answered by its own policy
// (OVER_LIMIT with Retry-After, or OK), never a gRPC error, long before its
// deadline: the lost connection fails the runs, not the deadline. Redis is
// restarted on the same port: the binary decides with it again, and 32
// concurrent calls of one subject are counted exactly once each.
func TestRedisKilledGroupFailureModes(t *testing.T) {
	redis, r := startGroupFaultReplica(t)
	closed, open := entry{"closed", unique("group-kill")}, entry{"open", unique("group-kill")}
	runs := func() float64 { return r.metric("envoy_rls_redis_group_requests_count") }
	base := runs()

	redis.Pause()
	const deadline = 5 * time.Second
	held := &heldCalls{r: r, closed: closed, open: open}
	held.start(2, deadline)
	waitHeadRuns(t, runs, base)
	held.start(32, deadline)
	pid := redis.PID()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL %d: %v", pid, err)
	}
	redis.Kill() // waits until the process is gone
	for i, c := range held.check(t, 30*time.Second) {
		if c.res.Took > deadline/2 {
			t.Errorf("call %d (%s): answered after %v: it waited for its deadline, not for the lost connection", i, c.e.Key, c.res.Took)
		}
	}

	redis.Restart()
	took := waitRedisDecides(t, r)
	t.Logf("decisions %v after the restart", took)
	// Each attempt on a subject of its own, so that a call that still met
	// the lost connection (answered by the failure mode) leaves no doubt
	// about the count of the attempt that passes.
	attempt := 0
	polltest.Eventually(t, 20*time.Second, 20*time.Millisecond, "32 concurrent calls decided by Redis", func() error {
		attempt++
		subject := entry{"closed", unique("after")}
		got := make([]result, 32)
		load(len(got), 1, nil, func(g, _ int) { got[g] = r.call(callTimeout, 1, subject) })
		for _, res := range got {
			if !res.ok() {
				return fmt.Errorf("attempt %d: %v", attempt, res)
			}
		}
		res := r.mustCall(t, subject)
		left, err := strconv.Atoi(res.Headers["X-RateLimit-Remaining"])
		if !res.ok() || err != nil {
			return fmt.Errorf("attempt %d, the call after: %v", attempt, res)
		}
		if want := failureLimit - len(got) - 1; left != want {
			t.Fatalf("X-RateLimit-Remaining %d after %d calls, want %d", left, len(got)+1, want)
		}
		return nil
	})
	t.Logf("32 concurrent calls all decided at attempt %d after the restart", attempt)
}

// hangSequentialDeadline is the deadline of each call of
// TestRedisHangSequentialCalls: Envoy's default timeout for the rate-limit
// filter's call is 20 ms; 100 ms is what deployments that raise it use.
const hangSequentialDeadline = 100 * time.Millisecond

// TestRedisHangSequentialCalls: Redis is stopped (SIGSTOP) as soon as the
// replica is ready, then 40 calls are made one after the other, each with a
// 100 ms deadline over a new gRPC connection, as Envoy instances that
// connect afresh would (connected before the call, so that the deadline is
// the server's to keep, not the client's dial). Every one is answered by its policy's failure mode
// before its deadline, and after SIGCONT none of them was charged. Run
// twice: with no call before the pause (the store's connection was never
// used), with a warm connection, and with group commit off.
func TestRedisHangSequentialCalls(t *testing.T) {
	for _, tc := range []struct {
		name string
		warm bool
		args []string
	}{
		{name: "cold"},
		{name: "warm", warm: true},
		{name: "warm, group commit off", warm: true, args: []string{"--redis-group-max-keys", "1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			binary(t)
			awayFromHourBoundary(t)
			redis, cfg := withStandaloneRedis(t, redistest.Local())
			// The binary as users run it, without the race detector, whose
			// slowdown would eat the 20 ms answer reserve of a 100 ms call
			// (data races in the binary are the other tests' to catch).
			cfg.Bin = binarytest.Build(t)
			cfg.Args = tc.args
			r := startReplicas(t, 1, failureRules, cfg)[0]
			if tc.warm {
				if res := r.mustCall(t, entry{"closed", unique("warm-up")}); !res.ok() {
					t.Fatalf("warm-up: %v", res)
				}
			}
			closed, open := entry{"closed", unique("seq-hang")}, entry{"open", unique("seq-hang")}
			redis.Pause()
			defer redis.Resume()
			answered := 0
			for i := range hangCalls {
				e := closed
				if i%2 == 1 {
					e = open
				}
				res := connected(t, r.fresh(t, nil)).call(hangSequentialDeadline, 1, e)
				err := failureModeAnswer(e.Key, res)
				if err == nil && res.Took > res.Deadline+deadlineTolerance {
					err = fmt.Errorf("%v: outlived its deadline", res)
				}
				if err != nil {
					t.Errorf("call %d (%s) ended %s: %v", i, e.Key, time.Now().UTC().Format("15:04:05.000000"), err)
					continue
				}
				answered++
			}
			t.Logf("%d of %d calls answered by the failure mode while Redis was stopped", answered, hangCalls)
			redis.Resume()
			took := waitRedisDecides(t, r)
			t.Logf("decisions %v after SIGCONT", took)
			checkUncharged(t, r, closed)
			checkUncharged(t, r, open)
		})
	}
}

// connected waits until r's connection is ready (at most callTimeout) and
// returns r.
func connected(t *testing.T, r *replica) *replica {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	r.conn.Connect()
	for st := r.conn.GetState(); st != connectivity.Ready; st = r.conn.GetState() {
		if !r.conn.WaitForStateChange(ctx, st) {
			t.Fatalf("e2e: connection to %s not ready within %v: %v", r.name, callTimeout, st)
		}
	}
	return r
}
