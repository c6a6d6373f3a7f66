package rls

import (
	"context"
	"crypto/sha256"
	"fmt"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/failover"
)

// recordingLimits keeps every LimitObservation as given.
type recordingLimits struct{ limits []LimitObservation }

func (r *recordingLimits) ObserveLimit(o LimitObservation) { r.limits = append(r.limits, o) }
func (r *recordingLimits) ObserveCall(CallObservation)     {}

// TestFailureModeAnswered: the dynamic metadata's failureMode, the audit
// record's failure mode, envoy_rls_fallback_total{mode} and the store
// failure log name the failure mode that answered a limit — local when the
// local limiter decided (admitted or denied), closed when a local policy's
// local limiter could not decide, open and closed for those policies — and
// none of them when the store decided.
func TestFailureModeAnswered(t *testing.T) {
	// A bare store failure, which the failover wrapper answers by the
	// policy's failure mode, and one the local limiter does not decide.
	fails := limitertest.Fault{Kind: limiter.Unavailable, RetryAfter: 2 * time.Second}
	incompatible := limitertest.Fault{Kind: limiter.Incompatible}
	cases := []struct {
		name   string
		policy limiter.FailureMode
		// fault is how the store answers (zero: it decides); full: the
		// limit is used up before the call.
		fault limitertest.Fault
		full  bool
		over  bool
		// mode is the failure mode that answered ("": the store decided);
		// unknown: it answered knowing nothing of the limit's state.
		mode    string
		unknown bool
		// replicas share the limit (the local limiter's share), hits is
		// the descriptor's cost.
		replicas int
		hits     uint64
	}{
		{name: "store allows", policy: limiter.FailLocal},
		{name: "store denies", policy: limiter.FailLocal, full: true, over: true},
		{name: "local limiter admits", policy: limiter.FailLocal, fault: fails, mode: "local"},
		{name: "local limiter denies", policy: limiter.FailLocal, fault: fails, over: true, mode: "local", replicas: 5, hits: 3},
		{name: "local policy, incompatible store", policy: limiter.FailLocal, fault: incompatible, over: true, mode: "closed", unknown: true},
		{name: "open", policy: limiter.FailOpen, fault: fails, mode: "open", unknown: true},
		{name: "closed", policy: limiter.FailClosed, fault: fails, over: true, mode: "closed", unknown: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := limiter.NewPolicy(limiter.PolicySpec{ID: "p", Algorithm: limiter.FixedWindow,
				Params: limiter.FixedWindowParams{Limit: 10, Window: time.Minute}, FailureMode: c.policy})
			if err != nil {
				t.Fatal(err)
			}
			fr := &fakeRules{domain: "d", rules: map[string]*descriptors.Rule{
				"user": {Policy: p, Unit: descriptors.UnitMinute, RequestsPerUnit: 10, StatKey: "d.user"},
			}}
			audited, observed := &recordingAuditor{}, &recordingLimits{}
			clock := limitertest.NewClock(fakeNow)
			store := limitertest.NewDouble(t, nil, clock)
			if c.full {
				out := make([]limiter.Outcome, 1)
				store.Evaluate(context.Background(), []limiter.Request{{Policy: p, Subject: sha256.Sum256([]byte("user=alice")), Cost: 10}}, out)
				if !out[0].Decision.Consumed {
					t.Fatalf("using up the limit: %+v", out[0])
				}
			}
			store.Set(c.fault)
			h := newHarness(t, func() Rules { return fr }, failoverOver{store, failover.Config{Replicas: c.replicas}},
				clock, withDynamicMetadata, func(cfg *Config) { cfg.Auditor, cfg.Observer = audited, observed })
			d := desc("user", "alice")
			if c.hits > 0 {
				d = withHits(d, c.hits)
			}
			resp := h.call(t, request("d", d))

			if got := resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT; got != c.over {
				t.Fatalf("answered %v, want over the limit %v", resp.OverallCode, c.over)
			}
			md := metadataOf(t, resp)["descriptors"].([]any)[0].(map[string]any)
			if got, _ := md["failureMode"].(string); got != c.mode {
				t.Errorf("dynamic metadata failureMode %q, want %q: %s", got, c.mode, jsonOf(md))
			}

			m := h.metrics(t)
			count := func(series string) string {
				if v := counterValue(m, series); v != "" {
					return v
				}
				return "0"
			}
			for _, mode := range []string{"local", "open", "closed"} {
				want := "0"
				if mode == c.mode {
					want = "1"
				}
				if got := count(`envoy_rls_fallback_total{mode="` + mode + `"}`); got != want {
					t.Errorf(`fallback_total{mode=%q} = %s, want %s`, mode, got, want)
				}
			}
			result, local := "ok", "0"
			if c.over {
				result = "over_limit"
			}
			if c.mode == "local" {
				local = "1"
			}
			if got := count(`envoy_rls_local_fallback_decisions_total{domain="d",policy="p",result="` + result + `"}`); got != local {
				t.Errorf("local_fallback_decisions_total{result=%q} = %s, want %s", result, got, local)
			}

			audited.mu.Lock()
			denials := audited.raw
			audited.mu.Unlock()
			if !c.over {
				if len(denials) != 0 {
					t.Errorf("allowed, yet audited: %+v", denials)
				}
			} else if len(denials) != 1 || denials[0].FailureMode != c.mode || denials[0].StoreFailed != c.unknown {
				t.Errorf("audited %+v, want one denial with FailureMode %q and StoreFailed %v", denials, c.mode, c.unknown)
			}

			if len(observed.limits) != 1 || observed.limits[0].StoreFailed != c.unknown {
				t.Errorf("observed %+v, want StoreFailed %v", observed.limits, c.unknown)
			}

			logged := h.logs.FilterMessage(msgStoreFailure).All()
			if c.unknown != (len(logged) == 1) {
				t.Fatalf("store failure logged %d times, want it %v", len(logged), c.unknown)
			}
			if c.unknown {
				if got := fmt.Sprint(logged[0].ContextMap()["failure_mode"]); got != c.mode {
					t.Errorf("store failure log failure_mode %q, want %q", got, c.mode)
				}
			}
		})
	}
}
