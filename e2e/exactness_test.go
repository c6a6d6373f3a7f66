package e2e_test

import (
	"strconv"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

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

// penaltyRules: 3 per hour, and an offence blocks the subject for an hour
// (doubling up to a day while remembered for an hour after a block).
const penaltyRules = `domain: e2e
descriptors:
  - key: login
    rate_limit:
      unit: hour
      requests_per_unit: 3
      penalty: {duration: 1h, max_duration: 24h, decay: 1h}
`

// TestPenaltyBoxAcrossReplicas: two replicas share one Redis. The offence
// on one blocks the subject on both: OVER_LIMIT with the block's Retry-After,
// counted as penalty denials, while another subject is unaffected.
func TestPenaltyBoxAcrossReplicas(t *testing.T) {
	_, cfg := withStandaloneRedis(t)
	rs := startReplicas(t, 2, penaltyRules, cfg)
	awayFromHourBoundary(t)
	subject := entry{"login", unique("user")}
	for i := range 3 {
		if res := rs[i%2].mustCall(t, subject); !res.ok() {
			t.Fatalf("attempt %d: %v", i+1, res)
		}
	}
	// The offence: the limit denies, and the block (an hour) outlasts the
	// window's rest.
	if res := rs[1].mustCall(t, subject); !res.over() || res.Headers["Retry-After"] != "3600" {
		t.Fatalf("the offence: %v, want OVER_LIMIT with Retry-After 3600", res)
	}
	const penaltySample = `envoy_rls_penalty_denials_total{domain="e2e",policy="e2e/login",result="over_limit"}`
	// replica-0 asks Redis (BLOCKED), then repeats the block from its deny
	// cache; replica-1 never cached the offence (an offence is not
	// repeated from the cache: the store must see the next denial) and asks
	// Redis too.
	for i, r := range []int{0, 0, 0, 1} {
		res := rs[r].mustCall(t, subject)
		ra, err := strconv.Atoi(res.Headers["Retry-After"])
		if !res.over() || err != nil || ra < 3590 || ra > 3600 {
			t.Fatalf("blocked call %d on %s: %v, want OVER_LIMIT with about an hour to wait", i, rs[r].name, res)
		}
	}
	if r0, r1 := rs[0].metric(penaltySample), rs[1].metric(penaltySample); r0 != 3 || r1 != 1 {
		t.Fatalf("penalty denials %v on replica-0 and %v on replica-1, want 3 and 1", r0, r1)
	}
	if res := rs[0].mustCall(t, entry{"login", unique("other")}); !res.ok() {
		t.Fatalf("another subject: %v, want OK", res)
	}
}
