package e2e_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// TestMemoryFloodStaysInItsPolicy: a flood of distinct values on one
// per-value limit of the memory store, far beyond --memory-max-entries,
// leaves every other limit exact for its brand-new users, fail closed and
// fail open alike (neither denied for capacity nor admitted without a
// count), and the flooded limit's new values are still limited, never above
// their limit. Every call gets an answer; the sketch's decisions are
// counted per policy.
func TestMemoryFloodStaysInItsPolicy(t *testing.T) {
	rules := rulesDir(t, `domain: e2e
descriptors:
  - key: flood
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: closed
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: open
    rate_limit: {unit: hour, requests_per_unit: 2, failure_mode: open}
`)
	r := startReplica(t, "flood", replicaConfig{Rules: rules, Args: []string{"--memory-max-entries", "1024"}})

	// The flood: 8 goroutines, 6,000 distinct values, two calls each.
	const workers, perWorker = 8, 750
	var mu sync.Mutex
	okPerValue := map[string]int{}
	var failures []string
	load(workers, perWorker, nil, func(g, i int) {
		v := fmt.Sprintf("f-%d-%d", g, i)
		for range 2 {
			res := r.call(callTimeout, 1, entry{"flood", v})
			mu.Lock()
			switch {
			case res.ok():
				okPerValue[v]++
			case !res.over() && len(failures) < 5:
				failures = append(failures, res.String())
			}
			mu.Unlock()
		}
	})
	if len(failures) > 0 {
		t.Fatalf("flood calls without a decision: %v", failures)
	}
	if len(okPerValue) == 0 {
		t.Fatal("the flood admitted nothing")
	}
	// Brand-new users of the other limits: exact, headers and all.
	for _, key := range []string{"closed", "open"} {
		for u := range 10 {
			user := entry{key, unique("u")}
			for call, wantRemaining := range []string{"1", "0", "0"} {
				res := r.mustCall(t, user)
				if wantOK := call < 2; res.ok() != wantOK || res.Limit != 2 || res.Headers["X-RateLimit-Remaining"] != wantRemaining {
					t.Fatalf("%s user %d call %d after the flood: %v; want ok=%v, limit 2, remaining %s",
						key, u, call, res, wantOK, wantRemaining)
				}
				if call == 2 && res.Headers["Retry-After"] == "" {
					t.Fatalf("%s user %d: OVER_LIMIT without Retry-After: %v", key, u, res)
				}
			}
		}
	}
	// Only the flooded policy's new values were decided by a sketch.
	overflow := metricSum(t, r, "envoy_rls_memory_overflow_decisions_total{")
	if overflow == 0 {
		t.Fatal("envoy_rls_memory_overflow_decisions_total is 0 after the flood: the sketch never decided")
	}
	if n := r.metric("envoy_rls_memory_refused_total"); n != 0 {
		t.Errorf("envoy_rls_memory_refused_total %v after a flood on one policy, want 0", n)
	}
	// The fairness rule is per shard: with 8-entry shards, a third new
	// user of another policy landing in a shard the flood half fills is
	// decided by that policy's sketch (exactly, as the headers above show,
	// unless cells collide). Those are a few of the 60 calls above.
	if got := metricSum(t, r, "envoy_rls_memory_overflow_decisions_total{policy=\"e2e/flood\"}"); overflow-got > 30 {
		t.Errorf("%v of %v overflow decisions were not the flooded policy's", overflow-got, overflow)
	}

	// New values of the flooded limit: limited, never above 3.
	for u := range 20 {
		v := entry{"flood", unique("late")}
		oks := 0
		for range 5 {
			res := r.mustCall(t, v)
			if res.ok() {
				oks++
			} else if !res.over() || res.Headers["Retry-After"] == "" {
				t.Fatalf("late flood value %d: %v", u, res)
			}
		}
		if oks > 3 {
			t.Fatalf("late flood value %d: %d calls admitted, above the limit 3", u, oks)
		}
	}
	for v, n := range okPerValue {
		if n > 3 {
			t.Fatalf("flood value %s: %d calls admitted, above the limit 3", v, n)
		}
	}
}

// metricSum adds the samples of /metrics whose line starts with prefix.
func metricSum(t *testing.T, r *replica, prefix string) float64 {
	t.Helper()
	code, body := r.mustAdmin("/metrics")
	if code != http.StatusOK {
		t.Fatalf("e2e: %s /metrics: %d", r.name, code)
	}
	var sum float64
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err != nil {
			t.Fatalf("e2e: %s /metrics: %q: %v", r.name, line, err)
		}
		sum += v
	}
	return sum
}
