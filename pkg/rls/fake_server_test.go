package rls

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/failover"
)

// These tests drive the server's own logic with fake rules and a memory
// store behind a limitertest.Double, whose faults can be chosen: failure
// outcomes of each kind and panics.

var fakeNow = time.Date(2030, 1, 1, 0, 0, 10, 0, time.UTC)

// fakeHarness serves fakeRules (a per-user limit of 2 a minute, changed by
// mut) from a memory store at fakeNow, behind the Double it returns.
func fakeHarness(t *testing.T, mut func(*fakeRules), opts ...harnessOpt) (*harness, *limitertest.Double) {
	t.Helper()
	clock := limitertest.NewClock(fakeNow)
	store := limitertest.NewDouble(t, nil, clock)
	fr := &fakeRules{domain: "d", rules: map[string]*descriptors.Rule{
		"user": fakeRule("per-user", 2, descriptors.UnitMinute),
	}}
	if mut != nil {
		mut(fr)
	}
	return newHarness(t, func() Rules { return fr }, store, clock, opts...), store
}

func TestFakeOKThenOverLimit(t *testing.T) {
	h, store := fakeHarness(t, nil)
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		resp := h.call(t, request("d", desc("user", "alice")))
		if resp.OverallCode != want {
			t.Fatalf("step %d: overall %v, want %v", i, resp.OverallCode, want)
		}
		st := resp.Statuses[0]
		if st.CurrentLimit.GetRequestsPerUnit() != 2 || st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE || st.CurrentLimit.GetName() != "per-user" {
			t.Fatalf("step %d: current_limit %v", i, st.CurrentLimit)
		}
		if got := st.DurationUntilReset.AsDuration(); got != 50*time.Second {
			t.Fatalf("step %d: duration_until_reset %v, want 50s", i, got)
		}
		hd := headers(resp)
		if hd[headerLimit] != "2, 2;w=60" || hd[headerReset] != "50" {
			t.Fatalf("step %d: headers %v", i, hd)
		}
		if i == 2 {
			if hd[headerRetryAfter] != "50" || hd[headerRemaining] != "0" {
				t.Fatalf("over: headers %v", hd)
			}
			if string(resp.RawBody) != `{"error":"rate_limited","policy":"per-user","retry_after_seconds":50}` {
				t.Fatalf("body %s", resp.RawBody)
			}
		} else if _, ok := hd[headerRetryAfter]; ok || resp.RawBody != nil {
			t.Fatalf("step %d: Retry-After or body on OK", i)
		}
	}
	if batches, _ := store.Counts(); batches != 3 {
		t.Fatalf("store called %d times, want 3", batches)
	}
}

func TestFakeFailureModes(t *testing.T) {
	for _, kind := range []limiter.OutcomeKind{limiter.Unavailable, limiter.Indeterminate, limiter.Incompatible} {
		for _, mode := range []limiter.FailureMode{limiter.FailClosed, limiter.FailOpen} {
			t.Run(kind.String()+"/"+mode.String(), func(t *testing.T) {
				h, store := fakeHarness(t, func(fr *fakeRules) {
					p, _ := limiter.NewPolicy(limiter.PolicySpec{ID: "p", Algorithm: limiter.FixedWindow,
						Params: limiter.FixedWindowParams{Limit: 5, Window: time.Second}, FailureMode: mode})
					fr.rules["user"] = &descriptors.Rule{Policy: p, Unit: descriptors.UnitSecond, RequestsPerUnit: 5}
				})
				store.Set(limitertest.Fault{Kind: kind, RetryAfter: 3 * time.Second})
				resp := h.call(t, request("d", desc("user", "bob")))
				hd := headers(resp)
				if mode == limiter.FailClosed {
					if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || hd[headerRetryAfter] == "" {
						t.Fatalf("closed: %v %v", resp.OverallCode, hd)
					}
					if kind == limiter.Unavailable && hd[headerRetryAfter] != "3" {
						t.Fatalf("Retry-After %q, want the store's hint 3", hd[headerRetryAfter])
					}
				} else if resp.OverallCode != rlsv3.RateLimitResponse_OK || len(hd) != 0 {
					t.Fatalf("open: %v %v", resp.OverallCode, hd)
				}
				m := h.metrics(t)
				if v := counterValue(m, `envoy_rls_store_errors_total{outcome="`+kind.String()+`"}`); v != "1" {
					t.Fatalf("store_errors_total = %q", v)
				}
				if v := counterValue(m, `envoy_rls_fallback_total{mode="`+mode.String()+`"}`); v != "1" {
					t.Fatalf("fallback_total = %q", v)
				}
				if h.logs.FilterMessage(msgStoreFailure).Len() != 1 {
					t.Fatalf("store failure not logged: %v", h.logs.All())
				}
			})
		}
	}
}

// A store that stops answering must not use up the caller's deadline: the
// answer by failure mode has to reach Envoy before Envoy gives up.
func TestHungStoreStillAnswersByFailureModeBeforeTheDeadline(t *testing.T) {
	// The deadline is generous (the reserve is then 50ms) so that a busy
	// machine under -race still answers in time: this checks the mechanism,
	// not a latency.
	for _, deadline := range []time.Duration{500 * time.Millisecond} {
		t.Run(deadline.String(), func(t *testing.T) {
			// The failover wrapper keeps the answer reserve, as the binary
			// wires it.
			clock := limitertest.NewClock(fakeNow)
			hanging := limitertest.NewDouble(t, nil, clock)
			hanging.Set(limitertest.Fault{Hang: true, RetryAfter: time.Second})
			hung, err := failover.New(hanging, failover.Config{})
			if err != nil {
				t.Fatal(err)
			}
			fr := &fakeRules{domain: "d", rules: map[string]*descriptors.Rule{"user": fakeRule("per-user", 2, descriptors.UnitMinute)}}
			h := newHarness(t, func() Rules { return fr }, hung, clock)
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			resp, err := h.client.ShouldRateLimit(ctx, request("d", desc("user", "bob")))
			if err != nil {
				t.Fatalf("hung store: %v, want the closed policy's OVER_LIMIT", err)
			}
			if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || headers(resp)[headerRetryAfter] == "" {
				t.Fatalf("hung store: %v %v, want OVER_LIMIT with Retry-After", resp.OverallCode, headers(resp))
			}
		})
	}
}

func TestFakePanicIsInternal(t *testing.T) {
	h, store := fakeHarness(t, nil)
	store.Set(limitertest.Fault{Panic: "fake store: boom"})
	_, err := h.client.ShouldRateLimit(context.Background(), request("d", desc("user", "carol")))
	if status.Code(err) != codes.Internal {
		t.Fatalf("err %v, want Internal", err)
	}
	if strings.Contains(err.Error(), "carol") {
		t.Fatalf("error leaks the descriptor value: %v", err)
	}
	// The process still serves.
	store.Set(limitertest.Fault{})
	if resp := h.call(t, request("d", desc("user", "carol"))); resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("after panic: %v", resp.OverallCode)
	}
	if v := counterValue(h.metrics(t), `envoy_rls_calls_total{code="Internal"}`); v != "1" {
		t.Fatalf("calls_total{Internal} = %q", v)
	}
}

func TestFakeNoRulesIsUnavailable(t *testing.T) {
	h := newHarness(t, func() Rules { return nil }, limitertest.NewDouble(t, nil, nil), nil)
	_, err := h.client.ShouldRateLimit(context.Background(), request("d", desc("user", "x")))
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("err %v, want Unavailable", err)
	}
}

// cutAdmission admits every call until refuse is set: then the calls
// starting are those it cut, and counted, before they started.
type cutAdmission struct{ refuse atomic.Bool }

func (a *cutAdmission) Admit(context.Context) bool { return !a.refuse.Load() }

func (a *cutAdmission) Received(context.Context) {}

// A call the Admission refuses (cut, and counted by Metrics.CountCut,
// before it started) is answered DEADLINE_EXCEEDED and counted once; an
// admitted call is counted by its handler as ever.
func TestCallCutBeforeItStartedIsCountedOnce(t *testing.T) {
	adm := &cutAdmission{}
	var calls *Metrics
	h, store := fakeHarness(t, nil, func(c *Config) { c.Admission, calls = adm, c.Metrics })
	resp := h.call(t, request("d", desc("user", "alice")))
	if resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("admitted call: %v", resp.OverallCode)
	}
	adm.refuse.Store(true)
	calls.CountCut(time.Millisecond) // as the receive guard does when it cuts the call
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := h.client.ShouldRateLimit(ctx, request("d", desc("user", "alice"))); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("call cut before it started: %v, want DeadlineExceeded", err)
	}
	m := h.metrics(t)
	if got := counterValue(m, `envoy_rls_calls_total{code="DeadlineExceeded"}`); got != "1" {
		t.Errorf("calls_total{DeadlineExceeded} = %q, want 1 (counted by CountCut only)", got)
	}
	if got := counterValue(m, `envoy_rls_calls_total{code="OK"}`); got != "1" {
		t.Errorf("calls_total{OK} = %q, want 1", got)
	}
	if batches, _ := store.Counts(); batches != 1 {
		t.Errorf("store evaluated %d batches, want 1 (the cut call is not evaluated)", batches)
	}
}
