package rls

import (
	_ "embed"
	"slices"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/redis"
)

// probeRules are the rules of the check-only tests: year-long windows, so
// that a test on Redis's own clock never straddles a window end.
//
//go:embed testdata/rules/probe.yaml
var probeRules string

// probeStores are the stores the check-only tests run on: memory, and a
// Redis server (skipped without redis-server unless CI=true).
func probeStores(t *testing.T) map[string]func(t *testing.T) limiter.Store {
	return map[string]func(t *testing.T) limiter.Store{
		"memory": func(t *testing.T) limiter.Store { return memStore(t, limitertest.NewClock(t0), 1000) },
		"redis": func(t *testing.T) limiter.Store {
			return redisStore(t, redis.Config{Addrs: []string{redistest.Standalone(t).Addr()}})
		},
	}
}

// newProbeHarness serves probeRules from store.
func newProbeHarness(t *testing.T, store limiter.Store, opts ...harnessOpt) *harness {
	t.Helper()
	snap := rulesOf(t, probeRules)
	return newHarness(t, func() Rules { return snap }, store, limitertest.NewClock(t0), opts...)
}

// TestCheckOnlyHits: an explicit per-descriptor hits_addend of 0 checks
// whether one more hit would be allowed, consumes nothing, and answers
// OVER_LIMIT (blocking the call) when it would not; an unset one falls back
// to the request's hits_addend, where 0 means 1. On both stores.
func TestCheckOnlyHits(t *testing.T) {
	for name, mk := range probeStores(t) {
		t.Run(name, func(t *testing.T) {
			h := newProbeHarness(t, mk(t))
			remaining := func(resp *rlsv3.RateLimitResponse) []uint32 {
				var r []uint32
				for _, st := range resp.Statuses {
					r = append(r, st.LimitRemaining)
				}
				return r
			}
			type step struct {
				name      string
				req       *rlsv3.RateLimitRequest
				code      rlsv3.RateLimitResponse_Code
				remaining []uint32
			}
			hitsReq := func(n uint32, ds ...*probeDesc) *rlsv3.RateLimitRequest {
				req := request("probe")
				for _, d := range ds {
					dd := desc(d.kv...)
					if d.hits != nil {
						dd = withHits(dd, *d.hits)
					}
					req.Descriptors = append(req.Descriptors, dd)
				}
				req.HitsAddend = n
				return req
			}
			for i, s := range []step{
				{"probe below the limit: OK, nothing taken",
					hitsReq(0, probe("user", "ann")), rlsv3.RateLimitResponse_OK, []uint32{2}},
				{"probe with a request hits_addend: still a probe",
					hitsReq(2, probe("user", "ann")), rlsv3.RateLimitResponse_OK, []uint32{2}},
				{"unset per-descriptor, request 0: counts 1",
					hitsReq(0, plain("user", "ann")), rlsv3.RateLimitResponse_OK, []uint32{1}},
				{"probe with one left: OK",
					hitsReq(0, probe("user", "ann")), rlsv3.RateLimitResponse_OK, []uint32{1}},
				{"per-descriptor 1 beside a probe of another subject",
					hitsReq(0, hits("user", "ann", 1), probe("user", "bob")), rlsv3.RateLimitResponse_OK, []uint32{0, 2}},
				{"probe at a full limit: OVER_LIMIT",
					hitsReq(0, probe("user", "ann")), rlsv3.RateLimitResponse_OVER_LIMIT, []uint32{0}},
				{"a denying probe blocks the call: bob not taken",
					hitsReq(0, probe("user", "ann"), plain("user", "bob")), rlsv3.RateLimitResponse_OVER_LIMIT, []uint32{0, 2}},
				{"bob still has 2",
					hitsReq(0, probe("user", "bob")), rlsv3.RateLimitResponse_OK, []uint32{2}},
				{"a probe does not take what an ordinary descriptor of the call needs",
					hitsReq(0, probe("user", "bob"), hits("user", "bob", 2)), rlsv3.RateLimitResponse_OK, []uint32{2, 0}},
				{"bob full",
					hitsReq(0, probe("user", "bob")), rlsv3.RateLimitResponse_OVER_LIMIT, []uint32{0}},
				{"shadow: a denying probe is reported OK and blocks nothing",
					hitsReq(0, plain("shadow_user", "cy")), rlsv3.RateLimitResponse_OK, []uint32{0}},
				{"shadow probe at a full limit beside an ordinary descriptor",
					hitsReq(0, probe("shadow_user", "cy"), plain("user", "cy")), rlsv3.RateLimitResponse_OK, []uint32{0, 1}},
				{"quota-mode probe: OK, nothing taken",
					hitsReq(0, probe("quota", "q")), rlsv3.RateLimitResponse_OK, []uint32{1}},
				{"quota-mode: take it",
					hitsReq(0, plain("quota", "q")), rlsv3.RateLimitResponse_OK, []uint32{0}},
				{"quota-mode probe at a full limit, alone: OVER_LIMIT",
					hitsReq(0, probe("quota", "q")), rlsv3.RateLimitResponse_OVER_LIMIT, []uint32{0}},
				{"quota-mode probe at a full limit, another quota-mode limit allows: OK, it consumes",
					hitsReq(0, probe("quota", "q"), plain("quota_b", "q")), rlsv3.RateLimitResponse_OK, []uint32{0, 1}},
				{"two quota-mode probes, one with room: OK, nothing taken",
					hitsReq(0, probe("quota", "q"), probe("quota_b", "q")), rlsv3.RateLimitResponse_OK, []uint32{0, 1}},
				{"take the last of quota_b",
					hitsReq(0, plain("quota_b", "q")), rlsv3.RateLimitResponse_OK, []uint32{0}},
				{"every quota-mode limit full, probes among them: OVER_LIMIT",
					hitsReq(0, plain("quota", "q"), probe("quota_b", "q")), rlsv3.RateLimitResponse_OVER_LIMIT, []uint32{0, 0}},
				{"token bucket probe: OK, nothing taken",
					hitsReq(0, probe("bucket", "dee")), rlsv3.RateLimitResponse_OK, []uint32{2}},
				{"token bucket: take both tokens",
					hitsReq(2, plain("bucket", "dee")), rlsv3.RateLimitResponse_OK, []uint32{0}},
				{"token bucket probe when empty: OVER_LIMIT",
					hitsReq(0, probe("bucket", "dee")), rlsv3.RateLimitResponse_OVER_LIMIT, []uint32{0}},
			} {
				resp := h.call(t, s.req)
				if resp.OverallCode != s.code || !slices.Equal(remaining(resp), s.remaining) {
					t.Fatalf("step %d (%s): %v remaining %v, want %v %v", i, s.name, resp.OverallCode, remaining(resp), s.code, s.remaining)
				}
				if s.code == rlsv3.RateLimitResponse_OVER_LIMIT && resp.Statuses[0].Code != rlsv3.RateLimitResponse_OVER_LIMIT {
					t.Fatalf("step %d (%s): the probe's status is %v", i, s.name, resp.Statuses[0].Code)
				}
			}
		})
	}
}

// probeDesc is one descriptor of a TestCheckOnlyHits step: its entries
// and its own hits_addend (nil: unset).
type probeDesc struct {
	kv   []string
	hits *uint64
}

func probe(kv ...string) *probeDesc { zero := uint64(0); return &probeDesc{kv: kv, hits: &zero} }
func plain(kv ...string) *probeDesc { return &probeDesc{kv: kv} }
func hits(k, v string, n uint64) *probeDesc {
	return &probeDesc{kv: []string{k, v}, hits: &n}
}

// TestCheckOnlyHitsObserved: a probe is observed with 0 hits (the
// reference's total_hits counts what a call adds), over when it would not
// fit, and shadow for a shadow rule.
func TestCheckOnlyHitsObserved(t *testing.T) {
	rec := &recordingObserver{}
	h := newProbeHarness(t, memStore(t, limitertest.NewClock(t0), 1000), func(c *Config) { c.Observer = rec })
	h.call(t, request("probe", withHits(desc("user", "eve"), 0)))
	h.call(t, request("probe", withHits(desc("user", "eve"), 2)))
	h.call(t, request("probe", withHits(desc("user", "eve"), 0)))
	h.call(t, request("probe", desc("shadow_user", "eve")))
	h.call(t, request("probe", withHits(desc("shadow_user", "eve"), 0)))
	limits, _ := rec.take()
	want := []string{
		"probe.user hits=0 over=false shadow=false failed=false decided=true limit=2 remaining=2 consumed=false",
		"probe.user hits=2 over=false shadow=false failed=false decided=true limit=2 remaining=0 consumed=true",
		"probe.user hits=0 over=true shadow=false failed=false decided=true limit=2 remaining=0 consumed=false",
		"probe.shadow_user hits=1 over=false shadow=true failed=false decided=true limit=1 remaining=0 consumed=true",
		"probe.shadow_user hits=0 over=true shadow=true failed=false decided=true limit=1 remaining=0 consumed=false",
	}
	if !slices.Equal(limits, want) {
		t.Fatalf("observed:\n%q\nwant:\n%q", limits, want)
	}
}
