package rls

import (
	_ "embed"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/failover"
)

// localRules: one policy per failure mode, all 10 a minute.
//
//go:embed testdata/rules/local.yaml
var localRules string

// localEnv is a realEnv whose store is wrapped by the failover store, as
// the binary wraps it, with its transitions recorded.
type localEnv struct {
	*realEnv
	transitions *transitions
}

// transitions records the failover store's local limiter transitions.
type transitions struct {
	mu               sync.Mutex
	started, dropped int
}

func (r *transitions) LocalStarted(int) { r.mu.Lock(); r.started++; r.mu.Unlock() }
func (r *transitions) LocalDropped()    { r.mu.Lock(); r.dropped++; r.mu.Unlock() }

func (r *transitions) counts() (started, dropped int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.started, r.dropped
}

// newLocalEnv is localRules served from a store that can be made to fail
// (newEnv's countingStore), wrapped by the failover store dividing by
// replicas.
func newLocalEnv(t *testing.T, local failover.Config) *localEnv {
	t.Helper()
	tr := &transitions{}
	local.Observer = tr
	e := newEnv(t, rulesOf(t, localRules), func(c *Config) {
		if local.Clock == nil {
			local.Clock = c.Clock
		}
		c.Store = failoverOver{c.Store, local}
	})
	return &localEnv{realEnv: e, transitions: tr}
}

// admitted makes n calls for one subject of key and returns how many were
// answered OK, failing the test unless they come first.
func (e *realEnv) admitted(t *testing.T, key, subject string, n int) int {
	t.Helper()
	ok := 0
	for i := 0; i < n; i++ {
		resp := e.call(t, request("loc", desc(key, subject)))
		switch resp.OverallCode {
		case rlsv3.RateLimitResponse_OK:
			if ok != i {
				t.Fatalf("%s/%s call %d: OK after a denial", key, subject, i)
			}
			ok++
		case rlsv3.RateLimitResponse_OVER_LIMIT:
		default:
			t.Fatalf("%s/%s call %d: %v", key, subject, i, resp.OverallCode)
		}
	}
	return ok
}

// wantAdmitted fails the test (saying why the count is expected) unless
// admitted makes want of n calls pass.
func (e *realEnv) wantAdmitted(t *testing.T, why, key, subject string, n, want int) {
	t.Helper()
	if got := e.admitted(t, key, subject, n); got != want {
		t.Fatalf("%s: %s/%s: %d of %d calls admitted, want %d", why, key, subject, got, n, want)
	}
}

// TestLocalFallbackDividesTheLimit: while the store is unavailable or does
// not answer, a failure_mode local policy of 10 a minute with 2 replicas
// admits 5 a minute per subject on this replica, with the usual headers,
// counted as local decisions; fail_open admits all, fail_closed denies all;
// a store mismatch (Incompatible) is answered fail closed.
func TestLocalFallbackDividesTheLimit(t *testing.T) {
	for _, kind := range []limiter.OutcomeKind{limiter.Unavailable, limiter.Indeterminate} {
		t.Run(kind.String(), func(t *testing.T) {
			e := newLocalEnv(t, failover.Config{Replicas: 2})
			e.setFail(kind)
			for i := 0; i < 5; i++ {
				resp := e.call(t, request("loc", desc("local", "a")))
				hd := headers(resp)
				if resp.OverallCode != rlsv3.RateLimitResponse_OK || hd[headerLimit] != "10, 10;w=60" || hd[headerRemaining] != strconv.Itoa(4-i) || hd[headerReset] != "50" {
					t.Fatalf("call %d: %v %v, want OK with remaining %d of the local share", i, resp.OverallCode, hd, 4-i)
				}
				if resp.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 10 {
					t.Fatalf("call %d: current_limit %v", i, resp.Statuses[0].CurrentLimit)
				}
			}
			resp := e.call(t, request("loc", desc("local", "a")))
			if hd := headers(resp); resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || hd[headerRetryAfter] != "50" || hd[headerRemaining] != "0" {
				t.Fatalf("sixth call: %v %v, want OVER_LIMIT, Retry-After 50", resp.OverallCode, hd)
			}
			// Another subject has its own share.
			e.wantAdmitted(t, "subject b", "local", "b", 7, 5)
			e.wantAdmitted(t, "fail open", "open", "a", 12, 12)
			e.wantAdmitted(t, "fail closed", "closed", "a", 3, 0)
			m := e.metrics(t)
			for series, want := range map[string]string{
				`envoy_rls_local_fallback_decisions_total{domain="loc",policy="loc/local",result="ok"}`:         "10",
				`envoy_rls_local_fallback_decisions_total{domain="loc",policy="loc/local",result="over_limit"}`: "3",
				`envoy_rls_decisions_total{domain="loc",policy="loc/local",result="ok"}`:                        "10",
				`envoy_rls_fallback_total{mode="local"}`:                                                        "13",
				`envoy_rls_fallback_total{mode="open"}`:                                                         "12",
				`envoy_rls_fallback_total{mode="closed"}`:                                                       "3",
				`envoy_rls_store_errors_total{outcome="` + kind.String() + `"}`:                                 "28",
			} {
				if got := counterValue(m, series); got != want {
					t.Errorf("%s = %q, want %s", series, got, want)
				}
			}
			if started, _ := e.transitions.counts(); started != 1 {
				t.Errorf("local limiter started %d times, want 1 (transitions only)", started)
			}
		})
	}
	t.Run("incompatible", func(t *testing.T) {
		e := newLocalEnv(t, failover.Config{Replicas: 2})
		e.setFail(limiter.Incompatible)
		e.wantAdmitted(t, "a store mismatch fails closed", "local", "a", 3, 0)
	})
}

// TestLocalFallbackStateDroppedWhenStoreReturns: once the store decides a
// call again, the local counts are dropped: a later outage starts from a
// full local share.
func TestLocalFallbackStateDroppedWhenStoreReturns(t *testing.T) {
	e := newLocalEnv(t, failover.Config{Replicas: 2})
	e.setFail(limiter.Unavailable)
	e.wantAdmitted(t, "outage 1", "local", "a", 6, 5)
	e.setFail(0)
	resp := e.call(t, request("loc", desc("local", "a")))
	if hd := headers(resp); resp.OverallCode != rlsv3.RateLimitResponse_OK || hd[headerRemaining] != "9" {
		t.Fatalf("store back: %v %v, want OK from the shared store (remaining 9 of 10)", resp.OverallCode, hd)
	}
	if _, dropped := e.transitions.counts(); dropped != 1 {
		t.Fatalf("local state dropped %d times, want 1", dropped)
	}
	e.wantAdmitted(t, "store back", "local", "a", 3, 3)
	e.setFail(limiter.Unavailable)
	e.wantAdmitted(t, "outage 2 (the local state of outage 1 dropped)", "local", "a", 6, 5)
	if started, _ := e.transitions.counts(); started != 2 {
		t.Fatalf("local limiter started %d times, want 2", started)
	}
}

// TestLocalFallbackKeepsCountsDuringTheOutage: the contrast of the test above: with the
// store failing throughout, the local count is kept.
func TestLocalFallbackKeepsCountsDuringTheOutage(t *testing.T) {
	e := newLocalEnv(t, failover.Config{Replicas: 2})
	e.setFail(limiter.Unavailable)
	e.wantAdmitted(t, "the share", "local", "a", 5, 5)
	e.wantAdmitted(t, "after the share was used", "local", "a", 2, 0)
	// The local limiter runs on its own (injected) clock: the next window
	// admits again.
	e.clock.Advance(time.Minute)
	e.wantAdmitted(t, "next window", "local", "a", 6, 5)
}

// TestLocalFallbackBatchRule: a call whose other limit fails closed is
// denied and consumes nothing of the local share.
func TestLocalFallbackBatchRule(t *testing.T) {
	e := newLocalEnv(t, failover.Config{Replicas: 2})
	e.setFail(limiter.Unavailable)
	for i := 0; i < 3; i++ {
		resp := e.call(t, request("loc", desc("local", "a"), desc("closed", "a")))
		if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].Code != rlsv3.RateLimitResponse_OK {
			t.Fatalf("call %d: %v", i, resp)
		}
	}
	e.wantAdmitted(t, "after the denied calls, the whole share", "local", "a", 6, 5)
}

// TestLocalFallbackBounded: the local limiter holds at most MaxEntries
// subjects; new subjects beyond are limited by the memory store's overflow
// sketch, which never admits more than the share.
func TestLocalFallbackBounded(t *testing.T) {
	e := newLocalEnv(t, failover.Config{Replicas: 2, MaxEntries: 1})
	e.setFail(limiter.Unavailable)
	e.wantAdmitted(t, "first subject", "local", "a", 6, 5)
	const subjects = 300
	calls, total := 6, 0
	for i := range subjects {
		got := e.admitted(t, "local", fmt.Sprintf("s%d", i), 6)
		if got > 5 {
			t.Fatalf("subject %d beyond the bound: %d admitted, more than the share of 5", i, got)
		}
		calls, total = calls+6, total+got
	}
	// The sketch over-counts only on collisions: nearly every subject gets
	// its whole share (a store that refused them would admit none).
	if total < subjects*5*9/10 {
		t.Fatalf("subjects beyond the bound: %d admitted in all, want at least 90%% of %d", total, subjects*5)
	}
	if got := counterValue(e.metrics(t), `envoy_rls_fallback_total{mode="local"}`); got != strconv.Itoa(calls) {
		t.Fatalf(`fallback_total{mode="local"} %q, want %d`, got, calls)
	}
}
