package e2e_test

import (
	"encoding/json"
	"net/http"
	"testing"
)

// TestMemoryStoreDefault: `serve` with no --store and no secret runs on the
// in-memory store and enforces a limit.
func TestMemoryStoreDefault(t *testing.T) {
	rules := rulesDir(t, `domain: e2e
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 3}
`)
	r := startReplica(t, "memory", replicaConfig{Rules: rules})

	user := entry{"user", unique("u")}
	var got []result
	for i := 0; i < 5; i++ {
		got = append(got, r.mustCall(t, user))
	}
	for i, res := range got {
		if wantOK := i < 3; res.ok() != wantOK {
			t.Errorf("call %d: %v, want ok=%v", i, res, wantOK)
		}
		if res.Limit != 3 {
			t.Errorf("call %d: current_limit %d, want 3", i, res.Limit)
		}
	}
	if h := got[4].Headers; h["Retry-After"] == "" || h["X-RateLimit-Remaining"] != "0" {
		t.Errorf("OVER_LIMIT headers %v: want Retry-After and X-RateLimit-Remaining: 0", h)
	}
	// Another subject has its own limit.
	if res := r.mustCall(t, entry{"user", unique("u")}); !res.ok() {
		t.Errorf("another user: %v, want OK", res)
	}
	// An unknown descriptor is not limited.
	if res := r.mustCall(t, entry{"nothing", "here"}); !res.ok() {
		t.Errorf("unmatched descriptor: %v, want OK", res)
	}

	code, body := r.mustAdmin("/config")
	var doc struct {
		Store string `json:"store"`
	}
	if code != http.StatusOK || json.Unmarshal([]byte(body), &doc) != nil || doc.Store != "memory" {
		t.Errorf("/config: %d %s: want store memory", code, body)
	}
	if !r.log.contains("random per-process secret") {
		t.Errorf("no warning about the random HMAC secret in the log")
	}
}
