package e2e_test

import (
	"strconv"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// groupRules: a fixed window, a token bucket, and a tight window and a
// loose bucket that one Envoy request names together (two descriptors, so
// two limits in one all-or-nothing evaluation). Per hour, the buckets
// refilling one token an hour: nothing rolls or refills during the test.
const groupRules = `domain: e2e
descriptors:
  - key: gfixed
    rate_limit: {unit: hour, requests_per_unit: 120, algorithm: fixed_window}
  - key: gbucket
    rate_limit: {unit: hour, requests_per_unit: 1, algorithm: token_bucket, burst: 80}
  - key: gtight
    rate_limit: {unit: hour, requests_per_unit: 40, algorithm: fixed_window}
  - key: gloose
    rate_limit: {unit: hour, requests_per_unit: 1, algorithm: token_bucket, burst: 200}
`

// callMany is call with one descriptor per entry: every entry its own limit
// of the one request.
func (r *replica) callMany(timeout time.Duration, entries ...entry) result {
	req := &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: 1}
	for _, e := range entries {
		req.Descriptors = append(req.Descriptors, &ratelimitv3.RateLimitDescriptor{
			Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: e.Key, Value: e.Value}}})
	}
	return r.send(timeout, req)
}

// groupRuns reads the group-commit histograms of r's /metrics: program
// runs, the Envoy requests they evaluated, and the requests whose queue
// wait was observed.
func groupRuns(r *replica) (runs, requests, waits float64) {
	return r.metric("envoy_rls_redis_group_requests_count"), r.metric("envoy_rls_redis_group_requests_sum"),
		r.metric("envoy_rls_redis_group_wait_seconds_count")
}

// TestGroupCommitExactAcrossReplicas: three replicas share one Redis; 48
// concurrent clients spread over them admit exactly the limit of a fixed
// window, of a token bucket, and of a request naming a tight window and a
// loose bucket together, whose denied calls take nothing from the bucket;
// and each replica's group-size histogram shows program runs that evaluated
// more than one Envoy request: the exactness holds with group commit
// active.
func TestGroupCommitExactAcrossReplicas(t *testing.T) {
	_, cfg := withStandaloneRedis(t)
	rs := startReplicas(t, 3, groupRules, cfg)
	awayFromHourBoundary(t)
	const clients, perClient = 48, 10 // 480 calls for at most 120 admissions

	beforeRuns := make([]float64, len(rs))
	beforeReqs := make([]float64, len(rs))
	beforeWaits := make([]float64, len(rs))
	for i, r := range rs {
		beforeRuns[i], beforeReqs[i], beforeWaits[i] = groupRuns(r)
	}
	for _, tc := range []struct {
		name    string
		entries []string // descriptor keys, one limit each
		limit   int
	}{
		{"fixed window", []string{"gfixed"}, 120},
		{"token bucket", []string{"gbucket"}, 80},
		{"tight window and loose bucket in one request", []string{"gtight", "gloose"}, 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			entries := make([]entry, len(tc.entries))
			for i, k := range tc.entries {
				entries[i] = entry{k, unique(k)}
			}
			var total tally
			load(clients, perClient, nil, func(g, _ int) {
				r := rs[g%len(rs)]
				res := r.callMany(callTimeout, entries...)
				total.add(res)
				if res.Err != nil {
					total.note("%s: %v", r.name, res)
				}
			})
			t.Logf("%s: %v", tc.name, &total)
			if total.failed() != 0 || len(total.samples) != 0 {
				t.Errorf("unexpected answers: %v", &total)
			}
			if total.ok != tc.limit || total.ok+total.over != clients*perClient {
				t.Errorf("admitted %d of %d, want exactly %d", total.ok, total.ok+total.over, tc.limit)
			}
			if len(entries) == 2 {
				// The loose bucket lost one token per admitted request only,
				// seen from every replica: one more call on it alone takes
				// one more.
				for i, r := range rs {
					res := r.callMany(callTimeout, entries[1])
					want := strconv.Itoa(200 - tc.limit - 1 - i)
					if !res.ok() || res.Headers["X-RateLimit-Remaining"] != want {
						t.Errorf("%s: the loose bucket alone: %v, want OK with remaining %s", r.name, res, want)
					}
				}
			}
		})
	}

	grouped := false
	for i, r := range rs {
		runs, reqs, waits := groupRuns(r)
		runs, reqs, waits = runs-beforeRuns[i], reqs-beforeReqs[i], waits-beforeWaits[i]
		t.Logf("%s: %.0f program runs evaluated %.0f Envoy requests", r.name, runs, reqs)
		if runs == 0 {
			t.Errorf("%s: no program run: the calls did not reach Redis", r.name)
		}
		if waits != reqs {
			t.Errorf("%s: %.0f queue waits observed for %.0f requests in runs, want one each", r.name, waits, reqs)
		}
		if reqs > runs {
			grouped = true
		}
	}
	if !grouped {
		t.Error("no replica ran a group of more than one Envoy request: group commit is not active")
	}
}

// TestGroupCommitOffByFlag: with --redis-group-max-keys 1 every Envoy
// request runs alone: as many program runs as requests evaluated, under
// the same concurrent load, and still exactly the limit admitted.
func TestGroupCommitOffByFlag(t *testing.T) {
	_, cfg := withStandaloneRedis(t)
	cfg.Args = append(cfg.Args, "--redis-group-max-keys", "1")
	rs := startReplicas(t, 1, groupRules, cfg)
	awayFromHourBoundary(t)
	r := rs[0]
	beforeRuns, beforeReqs, _ := groupRuns(r)
	const clients, perClient = 48, 5
	subject := entry{"gfixed", unique("gfixed")}
	var total tally
	load(clients, perClient, nil, func(int, int) { total.add(r.callMany(callTimeout, subject)) })
	t.Logf("%v", &total)
	if total.failed() != 0 || total.ok != 120 || total.ok+total.over != clients*perClient {
		t.Errorf("admitted %d of %d, want exactly 120: %v", total.ok, total.ok+total.over, &total)
	}
	runs, reqs, _ := groupRuns(r)
	runs, reqs = runs-beforeRuns, reqs-beforeReqs
	t.Logf("%.0f program runs evaluated %.0f Envoy requests", runs, reqs)
	if runs < 120 || reqs != runs {
		t.Errorf("group commit off: %.0f runs evaluated %.0f requests, want one each (at least the 120 admitted)", runs, reqs)
	}
}
