package e2e_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/polltest"
)

// exactRules: a fixed window, a token bucket, a GCRA and a sliding log that
// do not roll or refill noticeably during a test (per hour; the bucket
// refills 1 token an hour, the GCRA's interval is an hour, the log's hits
// leave an hour after they were admitted).
const exactRules = `domain: e2e
descriptors:
  - key: fixed
    rate_limit: {unit: hour, requests_per_unit: 100, algorithm: fixed_window}
  - key: bucket
    rate_limit: {unit: hour, requests_per_unit: 1, algorithm: token_bucket, burst: 50}
  - key: gcra
    rate_limit: {unit: hour, requests_per_unit: 1, algorithm: gcra, burst: 50}
  - key: log
    rate_limit: {unit: hour, requests_per_unit: 60, algorithm: sliding_log}
`

// startReplicas starts n replicas sharing one Redis (standalone or cluster
// mode), one rule directory and one HMAC secret.
func startReplicas(t *testing.T, n int, rules string, cfg replicaConfig) []*replica {
	t.Helper()
	cfg.Rules = rulesDir(t, rules)
	cfg.Secret = secretFile(t)
	rs := make([]*replica, n)
	for i := range rs {
		rs[i] = startReplica(t, fmt.Sprintf("replica-%d", i), cfg)
	}
	return rs
}

// TestExactnessAcrossReplicas: three replicas share one Redis; 24
// concurrent clients spread over all three admit exactly the limit.
func TestExactnessAcrossReplicas(t *testing.T) {
	_, cfg := withStandaloneRedis(t)
	rs := startReplicas(t, 3, exactRules, cfg)

	for _, tc := range []struct {
		name  string
		key   string
		hits  uint32
		limit int // admitted calls
		left  int // X-RateLimit-Remaining afterwards
	}{
		{"fixed window", "fixed", 1, 100, 0},
		{"token bucket", "bucket", 1, 50, 0},
		// 33 calls of 3 hits fit in 100; a denied call consumes nothing.
		{"fixed window hits_addend 3", "fixed", 3, 33, 1},
		{"token bucket hits_addend 7", "bucket", 7, 7, 1},
		{"gcra", "gcra", 1, 50, 0},
		{"gcra hits_addend 7", "gcra", 7, 7, 1},
		{"sliding log", "log", 1, 60, 0},
		// 8 calls of 7 hits fit in 60.
		{"sliding log hits_addend 7", "log", 7, 8, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.key == "fixed" {
				awayFromHourBoundary(t)
			}
			subject := entry{tc.key, unique(tc.key)}
			const clients, perClient = 24, 12 // 288 attempts for at most 100 admissions
			var total tally
			perReplica := make([]tally, len(rs))
			load(clients, perClient, nil, func(g, _ int) {
				r := rs[g%len(rs)]
				res := r.call(callTimeout, tc.hits, subject)
				total.add(res)
				perReplica[g%len(rs)].add(res)
				switch {
				case res.Err != nil:
					total.note("%s: %v", r.name, res)
				case res.over() && res.Headers["Retry-After"] == "":
					total.note("%s: OVER_LIMIT without Retry-After: %v", r.name, res)
				case int(res.Limit) != limitOf(tc.key):
					total.note("%s: current_limit %d: %v", r.name, res.Limit, res)
				}
			})
			t.Logf("%s: %v", tc.name, &total)
			if total.failed() != 0 || len(total.samples) != 0 {
				t.Errorf("unexpected answers: %v", &total)
			}
			if total.ok != tc.limit || total.ok+total.over != clients*perClient {
				t.Errorf("admitted %d of %d, want exactly %d", total.ok, total.ok+total.over, tc.limit)
			}
			for i := range perReplica {
				if perReplica[i].ok+perReplica[i].over == 0 {
					t.Errorf("%s answered no call", rs[i].name)
				}
			}
			// Every replica now sees the shared state: denied, with what is
			// left.
			for _, r := range rs {
				res := r.call(callTimeout, tc.hits, subject)
				if !res.over() || res.Headers["X-RateLimit-Remaining"] != strconv.Itoa(tc.left) {
					t.Errorf("%s after the burst: %v, want OVER_LIMIT with remaining %d", r.name, res, tc.left)
				}
				if ra, err := strconv.Atoi(res.Headers["Retry-After"]); err != nil || ra < 1 {
					t.Errorf("%s: Retry-After %q, want a positive number of seconds", r.name, res.Headers["Retry-After"])
				}
			}
		})
	}
}

func limitOf(key string) int {
	switch key {
	case "fixed":
		return 100
	case "log":
		return 60
	}
	return 1 // the token bucket's and the GCRA's requests_per_unit (their burst is 50)
}

// awayFromHourBoundary waits, when an epoch-aligned hour ends within the next
// 30 s, until it has passed, so that a per-hour window does not roll during
// the test.
func awayFromHourBoundary(t *testing.T) {
	t.Helper()
	now := time.Now()
	if end := now.Truncate(time.Hour).Add(time.Hour); end.Sub(now) < 30*time.Second {
		t.Logf("e2e: waiting %v for the hour to roll over", end.Sub(now)+time.Second)
		// Real time must pass: Redis decides by its own clock (TIME), which
		// a test cannot set.
		polltest.Until(t, end.Add(time.Second))
	}
}
