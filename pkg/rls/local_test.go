package rls

import (
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
const localRules = `domain: loc
descriptors:
  - key: local
    rate_limit: {unit: minute, requests_per_unit: 10, failure_mode: local}
  - key: closed
    rate_limit: {unit: minute, requests_per_unit: 10, failure_mode: closed}
  - key: open
    rate_limit: {unit: minute, requests_per_unit: 10, failure_mode: open}
  - key: bucket
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: token_bucket, failure_mode: local}
`

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
		fo, err := failover.New(c.Store, local)
		if err != nil {
			t.Fatal(err)
		}
		c.Store = fo
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
				if resp.OverallCode != rlsv3.RateLimitResponse_OK || hd[HeaderLimit] != "10, 10;w=60" || hd[HeaderRemaining] != strconv.Itoa(4-i) || hd[HeaderReset] != "50" {
					t.Fatalf("call %d: %v %v, want OK with remaining %d of the local share", i, resp.OverallCode, hd, 4-i)
				}
				if resp.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 10 {
					t.Fatalf("call %d: current_limit %v", i, resp.Statuses[0].CurrentLimit)
				}
			}
			resp := e.call(t, request("loc", desc("local", "a")))
			if hd := headers(resp); resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || hd[HeaderRetryAfter] != "50" || hd[HeaderRemaining] != "0" {
				t.Fatalf("sixth call: %v %v, want OVER_LIMIT, Retry-After 50", resp.OverallCode, hd)
			}
			// Another subject has its own share.
			if got := e.admitted(t, "local", "b", 7); got != 5 {
				t.Fatalf("subject b: %d admitted, want 5", got)
			}
			if got := e.admitted(t, "open", "a", 12); got != 12 {
				t.Fatalf("fail open: %d of 12 admitted", got)
			}
			if got := e.admitted(t, "closed", "a", 3); got != 0 {
				t.Fatalf("fail closed: %d of 3 admitted", got)
			}
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
		if got := e.admitted(t, "local", "a", 3); got != 0 {
			t.Fatalf("%d admitted on a store mismatch, want 0 (fail closed)", got)
		}
	})
}

// TestLocalFallbackStateDroppedWhenStoreReturns: once the store decides a
// call again, the local counts are dropped: a later outage starts from a
// full local share.
func TestLocalFallbackStateDroppedWhenStoreReturns(t *testing.T) {
	e := newLocalEnv(t, failover.Config{Replicas: 2})
	e.setFail(limiter.Unavailable)
	if got := e.admitted(t, "local", "a", 6); got != 5 {
		t.Fatalf("outage 1: %d admitted, want 5", got)
	}
	e.setFail(0)
	resp := e.call(t, request("loc", desc("local", "a")))
	if hd := headers(resp); resp.OverallCode != rlsv3.RateLimitResponse_OK || hd[HeaderRemaining] != "9" {
		t.Fatalf("store back: %v %v, want OK from the shared store (remaining 9 of 10)", resp.OverallCode, hd)
	}
	if _, dropped := e.transitions.counts(); dropped != 1 {
		t.Fatalf("local state dropped %d times, want 1", dropped)
	}
	if got := e.admitted(t, "local", "a", 3); got != 3 {
		t.Fatalf("store back: %d of 3 admitted", got)
	}
	e.setFail(limiter.Unavailable)
	if got := e.admitted(t, "local", "a", 6); got != 5 {
		t.Fatalf("outage 2: %d admitted, want 5 (the local state of outage 1 dropped)", got)
	}
	if started, _ := e.transitions.counts(); started != 2 {
		t.Fatalf("local limiter started %d times, want 2", started)
	}
}

// TestLocalFallbackKeepsCountsDuringTheOutage: the contrast of the test above: with the
// store failing throughout, the local count is kept.
func TestLocalFallbackKeepsCountsDuringTheOutage(t *testing.T) {
	e := newLocalEnv(t, failover.Config{Replicas: 2})
	e.setFail(limiter.Unavailable)
	if got := e.admitted(t, "local", "a", 5); got != 5 {
		t.Fatalf("%d admitted, want 5", got)
	}
	if got := e.admitted(t, "local", "a", 2); got != 0 {
		t.Fatalf("%d admitted after the share was used, want 0", got)
	}
	// The local limiter runs on its own (injected) clock: the next window
	// admits again.
	e.clock.Advance(time.Minute)
	if got := e.admitted(t, "local", "a", 6); got != 5 {
		t.Fatalf("next window: %d admitted, want 5", got)
	}
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
	if got := e.admitted(t, "local", "a", 6); got != 5 {
		t.Fatalf("%d admitted after the denied calls, want the whole share of 5", got)
	}
}

// TestLocalFallbackBounded: the local limiter holds at most MaxEntries
// subjects; new subjects beyond are limited by the memory store's overflow
// sketch, which never admits more than the share.
func TestLocalFallbackBounded(t *testing.T) {
	e := newLocalEnv(t, failover.Config{Replicas: 2, MaxEntries: 1})
	e.setFail(limiter.Unavailable)
	if got := e.admitted(t, "local", "a", 6); got != 5 {
		t.Fatalf("first subject: %d admitted, want the share of 5", got)
	}
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
