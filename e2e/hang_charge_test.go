package e2e_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
)

// hangCalls is how many calls TestRedisHangChargesNothing makes while Redis
// is stopped.
const hangCalls = 40

// failureLimit is the hourly limit of both policies of failureRules.
const failureLimit = 1_000_000

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
	results := make([]result, hangCalls)
	load(hangCalls, 1, nil, func(g, _ int) { results[g] = r.call(hangDeadline, 1, subject) })
	var answered tally
	for _, res := range results {
		answered.add(res)
		if !res.over() || res.Headers["Retry-After"] == "" {
			answered.note("%v", res)
		}
	}
	if answered.over != hangCalls || answered.late != 0 {
		t.Fatalf("calls while Redis is stopped, want %d OVER_LIMIT by the failure mode in time: %s", hangCalls, &answered)
	}
	redis.Resume()

	// Decisions again (the replica's one pipelined connection carries these
	// calls after the stalled programs, so those have run).
	took := waitRedisDecides(t, r)
	t.Logf("decisions %v after SIGCONT", took)
	res := r.mustCall(t, subject)
	left, err := strconv.Atoi(res.Headers["X-RateLimit-Remaining"])
	if !res.ok() || err != nil {
		t.Fatalf("first call after the resume: %v", res)
	}
	if charged := failureLimit - 1 - left; charged != 0 {
		t.Fatalf("%d of the %d calls answered by the failure mode while Redis was stopped were charged (X-RateLimit-Remaining %d, want %d)",
			charged, hangCalls, left, failureLimit-1)
	}
}
