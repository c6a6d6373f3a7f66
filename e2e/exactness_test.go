package e2e_test

import (
	_ "embed"
	"fmt"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/polltest"
)

// exactRules are the limits the replicas of one Redis share: a fixed
// window, a token bucket, a GCRA and a sliding log that do not roll or
// refill noticeably during a test (per hour; the buckets refill 1 token an
// hour, the GCRA's interval is an hour, the log's hits leave an hour after
// they were admitted); a tight window and a loose bucket that one Envoy
// request names together (two descriptors, so two limits in one
// all-or-nothing evaluation); and a login limit of 3 an hour whose offence
// blocks the subject for an hour (doubling up to a day while remembered
// for an hour after a block).
//
//go:embed testdata/rules/exact.yaml
var exactRules string

// requestsPerUnit is the requests_per_unit of exactRules' key (the
// buckets' and the GCRA's is 1, their burst more).
var requestsPerUnit = map[string]int{"fixed": 100, "bucket": 1, "gcra": 1, "log": 60, "tight": 40, "loose": 1}

// burst runs clients goroutines of perClient calls each, goroutine g
// calling rs[g%len(rs)]; wrong says what is wrong with an answer ("" when
// nothing is), noted with the replica's name. It returns the tally of
// every call and that of each replica.
func burst(rs []*replica, clients, perClient int, call func(*replica) result, wrong func(result) string) (*tally, []tally) {
	total, per := &tally{}, make([]tally, len(rs))
	load(clients, perClient, nil, func(g, _ int) {
		r := rs[g%len(rs)]
		res := call(r)
		total.add(res)
		per[g%len(rs)].add(res)
		if w := wrong(res); w != "" {
			total.note("%s: %s: %v", r.name, w, res)
		}
	})
	return total, per
}

// answered is burst's wrong for calls that must only be answered.
func answered(res result) string {
	if res.Err != nil {
		return "error"
	}
	return ""
}

// checkExact fails t unless every call of total was answered as wanted and
// exactly limit of calls calls were admitted.
func checkExact(t *testing.T, total *tally, limit, calls int) {
	t.Helper()
	t.Logf("%v", total)
	if total.failed() != 0 || len(total.samples) != 0 {
		t.Errorf("unexpected answers: %v", total)
	}
	if total.ok != limit || total.ok+total.over != calls {
		t.Errorf("admitted %d of %d, want exactly %d", total.ok, total.ok+total.over, limit)
	}
}

// groupRuns reads the group-commit histograms of r's /metrics: program
// runs, the Envoy requests they evaluated, and the requests whose queue
// wait was observed.
func groupRuns(r *replica) (runs, requests, waits float64) {
	return r.metric("envoy_rls_redis_group_requests_count"), r.metric("envoy_rls_redis_group_requests_sum"),
		r.metric("envoy_rls_redis_group_wait_seconds_count")
}

// TestExactnessAcrossReplicas: three replicas share one Redis; 24
// concurrent clients spread over all three admit exactly the limit, with
// group commit active: each replica's group-size histogram shows program
// runs that evaluated more than one Envoy request. A request that names a
// tight window and a loose bucket together takes nothing from the bucket
// when the window denies it.
func TestExactnessAcrossReplicas(t *testing.T) {
	_, cfg := withStandaloneRedis(t)
	rs := startReplicas(t, 3, exactRules, cfg)
	beforeRuns := make([]float64, len(rs))
	beforeReqs := make([]float64, len(rs))
	beforeWaits := make([]float64, len(rs))
	for i, r := range rs {
		beforeRuns[i], beforeReqs[i], beforeWaits[i] = groupRuns(r)
	}

	for _, tc := range []struct {
		name  string
		keys  []string // one descriptor each, in one request
		hits  uint32
		limit int // admitted calls
		left  int // X-RateLimit-Remaining afterwards
	}{
		{"fixed window", []string{"fixed"}, 1, 100, 0},
		{"token bucket", []string{"bucket"}, 1, 50, 0},
		// 33 calls of 3 hits fit in 100; a denied call consumes nothing.
		{"fixed window hits_addend 3", []string{"fixed"}, 3, 33, 1},
		{"token bucket hits_addend 7", []string{"bucket"}, 7, 7, 1},
		{"gcra", []string{"gcra"}, 1, 50, 0},
		{"gcra hits_addend 7", []string{"gcra"}, 7, 7, 1},
		{"sliding log", []string{"log"}, 1, 60, 0},
		// 8 calls of 7 hits fit in 60.
		{"sliding log hits_addend 7", []string{"log"}, 7, 8, 4},
		{"tight window and loose bucket in one request", []string{"tight", "loose"}, 1, 40, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			awayFromHourBoundary(t)
			entries := make([]entry, len(tc.keys))
			for i, k := range tc.keys {
				entries[i] = entry{k, unique(k)}
			}
			const clients, perClient = 24, 12 // 288 attempts for at most 100 admissions
			total, perReplica := burst(rs, clients, perClient, func(r *replica) result {
				return r.callMany(callTimeout, tc.hits, entries...)
			}, func(res result) string {
				switch {
				case res.Err != nil:
					return "error"
				case res.over() && res.Headers["Retry-After"] == "":
					return "OVER_LIMIT without Retry-After"
				case int(res.Limit) != requestsPerUnit[tc.keys[0]]:
					return fmt.Sprintf("current_limit %d", res.Limit)
				}
				return ""
			})
			checkExact(t, total, tc.limit, clients*perClient)
			for i := range perReplica {
				if perReplica[i].ok+perReplica[i].over == 0 {
					t.Errorf("%s answered no call", rs[i].name)
				}
			}
			// Every replica now sees the shared state: denied, with what is
			// left.
			for _, r := range rs {
				res := r.callMany(callTimeout, tc.hits, entries...)
				if !res.over() || res.Headers["X-RateLimit-Remaining"] != strconv.Itoa(tc.left) {
					t.Errorf("%s after the burst: %v, want OVER_LIMIT with remaining %d", r.name, res, tc.left)
				}
				if ra, err := strconv.Atoi(res.Headers["Retry-After"]); err != nil || ra < 1 {
					t.Errorf("%s: Retry-After %q, want a positive number of seconds", r.name, res.Headers["Retry-After"])
				}
			}
			if len(entries) == 2 {
				// The loose bucket lost one token per admitted request only,
				// seen from every replica: one more call on it alone takes
				// one more.
				for i, r := range rs {
					res := r.callMany(callTimeout, 1, entries[1])
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
// concurrent load, and still exactly the limit admitted.
func TestGroupCommitOffByFlag(t *testing.T) {
	_, cfg := withStandaloneRedis(t)
	cfg.Args = append(cfg.Args, "--redis-group-max-keys", "1")
	rs := startReplicas(t, 1, exactRules, cfg)
	awayFromHourBoundary(t)
	beforeRuns, beforeReqs, _ := groupRuns(rs[0])
	const clients, perClient, limit = 48, 5, 100
	subject := entry{"fixed", unique("fixed")}
	total, _ := burst(rs, clients, perClient, func(r *replica) result { return r.call(callTimeout, 1, subject) }, answered)
	checkExact(t, total, limit, clients*perClient)
	runs, reqs, _ := groupRuns(rs[0])
	runs, reqs = runs-beforeRuns, reqs-beforeReqs
	t.Logf("%.0f program runs evaluated %.0f Envoy requests", runs, reqs)
	if runs < limit || reqs != runs {
		t.Errorf("group commit off: %.0f runs evaluated %.0f requests, want one each (at least the %d admitted)", runs, reqs, limit)
	}
}

// TestPenaltyBoxAcrossReplicas: two replicas share one Redis. The offence
// on one blocks the subject on both: OVER_LIMIT with the block's Retry-After,
// counted as penalty denials, while another subject is unaffected.
func TestPenaltyBoxAcrossReplicas(t *testing.T) {
	_, cfg := withStandaloneRedis(t)
	rs := startReplicas(t, 2, exactRules, cfg)
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

// TestPenaltyBlockedRetryAfter: on a limit of 2 an hour with a 30 s
// penalty box, the offence and every blocked answer after it say to come
// back when the hour's window ends, not when the 30 s block does (the
// window would deny, a new offence); on both replicas, one answering from
// Redis, the other from its deny cache.
func TestPenaltyBlockedRetryAfter(t *testing.T) {
	_, cfg := withStandaloneRedis(t)
	rs := startReplicas(t, 2, `domain: e2e
descriptors:
  - key: signin
    rate_limit:
      unit: hour
      requests_per_unit: 2
      penalty: {duration: 30s}
`, cfg)
	awayFromHourBoundary(t)
	subject := entry{"signin", unique("user")}
	for i := range 2 {
		if res := rs[i].mustCall(t, subject); !res.ok() {
			t.Fatalf("attempt %d: %v", i+1, res)
		}
	}
	// The window's rest, read around each call (the wall clock moves on):
	// Retry-After rounds it up to whole seconds.
	untilHour := func() float64 { return time.Until(time.Now().Truncate(time.Hour).Add(time.Hour)).Seconds() }
	for i, r := range []int{0, 1, 1, 0} {
		before := untilHour()
		res := rs[r].mustCall(t, subject)
		lo, hi := int(math.Floor(untilHour())), int(math.Ceil(before))
		ra, err := strconv.Atoi(res.Headers["Retry-After"])
		if !res.over() || err != nil || ra < lo || ra > hi || ra <= 30 {
			t.Fatalf("call %d on %s: %v, want OVER_LIMIT with Retry-After the window's rest (%d–%d s), not the 30 s block", i+3, rs[r].name, res, lo, hi)
		}
	}
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
