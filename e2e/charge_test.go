package e2e_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// budgetRules: 1000 tokens an hour per tenant, charge (always or allowed)
// as given ("" leaves the field out).
func budgetRules(charge string) string {
	field := ""
	if charge != "" {
		field = ", charge: " + charge
	}
	return fmt.Sprintf("domain: %s\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: hour, requests_per_unit: 1000%s}\n", domain, field)
}

// budgetCall is an AI gateway's call for one tenant: one descriptor with
// an explicit hits_addend, 0 for the request-phase check, the response's
// tokens for the charge at stream end.
func budgetCall(r *replica, tenant string, hits uint64) result {
	d := &ratelimitv3.RateLimitDescriptor{HitsAddend: wrapperspb.UInt64(hits),
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: tenant}}}
	return r.send(callTimeout, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})
}

// budgetStep is one call of the table and its answer: OK or OVER_LIMIT,
// and the remaining it reports.
type budgetStep struct {
	hits   uint64
	ok     bool
	remain uint32
}

var (
	// referenceColumn is what envoyproxy/ratelimit answers: the second
	// 600 is recorded (1200), so the next check and charge are denied.
	referenceColumn = []budgetStep{{0, true, 1000}, {600, true, 400}, {0, true, 400}, {600, false, 0}, {0, false, 0}, {1, false, 0}}
	// allowedColumn is charge: allowed: the denied 600 records nothing.
	allowedColumn = []budgetStep{{0, true, 1000}, {600, true, 400}, {0, true, 400}, {600, false, 400}, {0, true, 400}, {1, true, 399}}
)

// runBudgetTable runs want's calls for a new tenant on r; retryAfter: the
// answers carry headers (not the reference's default), so an OVER_LIMIT
// carries Retry-After.
func runBudgetTable(t *testing.T, r *replica, want []budgetStep, retryAfter bool) {
	t.Helper()
	tenant := unique("tenant")
	for i, s := range want {
		res := budgetCall(r, tenant, s.hits)
		if res.Err != nil || res.ok() != s.ok || res.Remain != s.remain {
			t.Fatalf("call %d (hits %d): %v remaining %d, want ok=%v remaining %d", i+1, s.hits, res, res.Remain, s.ok, s.remain)
		}
		if retryAfter && !s.ok && res.Headers["Retry-After"] == "" {
			t.Errorf("call %d: OVER_LIMIT without Retry-After: %v", i+1, res.Headers)
		}
	}
}

// TestChargeTableNative: the AI gateway's checks and charges in native
// mode, on the memory store and on Redis: with charge: always the
// reference's column, without it (or with --default-charge allowed) the
// column where a denied charge records nothing.
func TestChargeTableNative(t *testing.T) {
	_, rcfg := withStandaloneRedis(t)
	for _, tc := range []struct {
		name, charge string
		args         []string
		want         []budgetStep
	}{
		{"always", "always", nil, referenceColumn},
		{"default", "", nil, allowedColumn},
		{"default-charge always", "", []string{"--default-charge", "always"}, referenceColumn},
		{"allowed over default always", "allowed", []string{"--default-charge", "always"}, allowedColumn},
	} {
		for _, store := range []string{"memory", "redis"} {
			t.Run(tc.name+"/"+store, func(t *testing.T) {
				cfg := replicaConfig{Rules: rulesDir(t, budgetRules(tc.charge)), Args: tc.args}
				if store == "redis" {
					cfg.Store, cfg.RedisAddr, cfg.RedisMode, cfg.Secret = rcfg.Store, rcfg.RedisAddr, rcfg.RedisMode, secretFile(t)
				}
				r := startReplica(t, "budget-"+store, cfg)
				runBudgetTable(t, r, tc.want, true)
			})
		}
	}
}

// TestChargeTableCompat: started as ratelimit with the reference's
// environment, the table reproduces envoyproxy/ratelimit's column while
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT is unset (and says so at start),
// and the column that records nothing denied when it is true.
func TestChargeTableCompat(t *testing.T) {
	redis, _ := withStandaloneRedis(t)
	for _, tc := range []struct {
		name string
		env  []string
		want []budgetStep
		log  string
	}{
		{"unset", nil, referenceColumn, `"default_charge":"always"`},
		{"true", []string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true"}, allowedColumn, `"default_charge":"allowed"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, dir := redisRuntime(t, redis, append([]string{"USE_STATSD=false", "CACHE_KEY_PREFIX=" + unique("budget") + ":"}, tc.env...)...)
			writeFile(t, dir, "rules.yaml", budgetRules(""))
			r := startReplica(t, "budget-compat", replicaConfig{Compat: true, Env: env})
			if !r.log.contains(tc.log) {
				t.Errorf("the start log does not say %s:\n%s", tc.log, r.log.tail(4000))
			}
			runBudgetTable(t, r, tc.want, false)
		})
	}
}

// meterRules: the tenant's budget of 1000 tokens an hour and a meter of a
// million beside it, both charging always: every charge is recorded on
// both, and the meter's remaining tells what was recorded in all.
var meterRules = fmt.Sprintf(`domain: %s
descriptors:
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 1000, charge: always}
  - key: meter
    rate_limit: {unit: hour, requests_per_unit: 1000000, charge: always}
`, domain)

// meterCall is budgetCall with the tenant's meter as a second descriptor
// of the same hits.
func meterCall(r *replica, tenant string, hits uint64) result {
	var ds []*ratelimitv3.RateLimitDescriptor
	for _, k := range []string{"tenant", "meter"} {
		ds = append(ds, &ratelimitv3.RateLimitDescriptor{HitsAddend: wrapperspb.UInt64(hits),
			Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: k, Value: tenant}}})
	}
	return r.send(callTimeout, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds})
}

// TestChargeAcrossReplicas: three replicas on one Redis. Workers send a
// tenant's checks (hits_addend 0) and charges of 1 to 40 tokens, mixed
// (each call also on the tenant's meter, meterRules),
// at random replicas, far past the budget but below its ceiling (twice
// the limit): the total recorded is exactly the total charged, and a
// check is denied once the budget is spent. Then a sequence of an AI
// gateway's calls, a check and when admitted a charge of 1 to 2,000
// tokens: the tokens admitted never exceed the limit plus one response's
// maximum, since a check admits only under the limit.
func TestChargeAcrossReplicas(t *testing.T) {
	_, cfg := withStandaloneRedis(t)
	rs := startReplicas(t, 3, meterRules, cfg)
	const workers, perWorker, maxCharge, maxTokens = 6, 8, 40, 2000
	tenant := unique("tenant")
	var mu sync.Mutex
	charged, checks := 0, 0
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for range perWorker {
				r := rs[rng.IntN(len(rs))]
				tokens := 0
				if rng.IntN(3) > 0 {
					tokens = 1 + rng.IntN(maxCharge)
				}
				if res := meterCall(r, tenant, uint64(tokens)); res.Err != nil {
					t.Errorf("%s: %v", r.name, res.Err)
					return
				}
				mu.Lock()
				if tokens == 0 {
					checks++
				}
				charged += tokens
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	res := meterCall(rs[0], tenant, 0)
	if res.Err != nil || len(res.Remains) != 2 {
		t.Fatalf("final check: %v", res)
	}
	if recorded := 1_000_000 - int(res.Remains[1]); recorded != charged {
		t.Errorf("%d tokens charged (and %d checks), %d recorded", charged, checks, recorded)
	}
	if want := charged < 1000; res.ok() != want || int(res.Remains[0]) != max(0, 1000-charged) {
		t.Errorf("after %d tokens: %v remaining %v, want ok=%v", charged, res, res.Remains, want)
	}

	tenant = unique("tenant")
	total, over := 0, false
	rng := rand.New(rand.NewPCG(42, 42))
	for i := range 40 {
		chk := budgetCall(rs[i%3], tenant, 0)
		if chk.Err != nil {
			t.Fatal(chk.Err)
		}
		if over && chk.ok() {
			t.Fatalf("call %d: a check admitted after %d tokens of 1000 were spent", i, total)
		}
		if !chk.ok() {
			continue
		}
		tokens := 1 + rng.IntN(maxTokens)
		if res := budgetCall(rs[(i+1)%3], tenant, uint64(tokens)); res.Err != nil {
			t.Fatal(res.Err)
		}
		total += tokens
		over = total >= 1000
		if total > 1000+maxTokens {
			t.Fatalf("call %d: %d tokens admitted, more than the limit plus one response", i, total)
		}
	}
	if !over {
		t.Errorf("40 calls spent only %d tokens: the sequence never reached the limit", total)
	}
}
