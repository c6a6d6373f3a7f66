package e2e_test

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestHitCountersBoundedMetrics: after 5 hits on a limit of 5, one call
// whose descriptor asks hits_addend 2^63 is denied and moves
// envoy_rls_hits_total and the reference-named total_hits and over_limit
// by the limit (5), not by 2^63; an unlimited rule's descriptor adds at
// most 2^32-1. The audit record keeps the hits_addend as sent.
func TestHitCountersBoundedMetrics(t *testing.T) {
	auditPath := filepath.Join(t.TempDir(), "audit.jsonl")
	rules := "domain: " + domain + `
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: free
    rate_limit: {unlimited: true}
`
	r := startReplica(t, "hits", replicaConfig{Rules: rulesDir(t, rules), Secret: secretFile(t), Args: []string{"--reference-metrics-addr", "127.0.0.1:0",
		"--audit-sink", "file", "--audit-file", auditPath}})
	user := unique("u")
	for range 5 {
		if res := r.mustCall(t, entry{"user", user}); !res.ok() {
			t.Fatalf("within the limit: %v", res)
		}
	}
	if got := r.metric(`envoy_rls_hits_total{domain="e2e",policy="e2e/user"}`); got != 5 {
		t.Fatalf("hits_total after 5 calls: %v", got)
	}
	huge := func(key string) result {
		d := &ratelimitv3.RateLimitDescriptor{HitsAddend: wrapperspb.UInt64(1 << 63),
			Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: key, Value: user}}}
		return r.send(callTimeout, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})
	}
	if res := huge("user"); !res.over() {
		t.Fatalf("hits_addend 2^63 on a limit of 5: %v, want OVER_LIMIT", res)
	}
	if res := huge("free"); !res.ok() {
		t.Fatalf("hits_addend 2^63 on an unlimited rule: %v, want OK", res)
	}
	for sample, want := range map[string]float64{
		`envoy_rls_hits_total{domain="e2e",policy="e2e/user"}`:  10,
		`envoy_rls_hits_total{domain="e2e",policy="unlimited"}`: 1<<32 - 1,
	} {
		if got := r.metric(sample); got != want {
			t.Errorf("%s = %v, want %v", sample, got, want)
		}
	}
	waitScrape(t, r, "/metrics", map[string]float64{
		`ratelimit_service_rate_limit_total_hits{domain="e2e",key1="user"}`:   10,
		`ratelimit_service_rate_limit_over_limit{domain="e2e",key1="user"}`:   5,
		`ratelimit_service_rate_limit_within_limit{domain="e2e",key1="user"}`: 5,
	})

	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(auditPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var costs []json.Number
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// json.Number keeps the digits a float64 would round.
		var e struct {
			Cost json.Number `json:"cost"`
		}
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		costs = append(costs, e.Cost)
	}
	if len(costs) != 1 || costs[0] != "9223372036854775808" {
		t.Errorf("audit costs %v, want one denial with the hits_addend as sent, 9223372036854775808", costs)
	}
}
