package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/polltest"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
)

// adminToken is the admin API's bearer token in these tests.
const adminToken = "e2e-admin-token-0123456789abcdef"

// tokenFile writes an --admin-token-file holding adminToken.
func tokenFile(t testing.TB) string {
	t.Helper()
	return writeFile(t, t.TempDir(), "tokens", "ops:"+adminToken+"\n")
}

// onEachStore runs f as a subtest named after the store: on the memory
// store, and on a standalone Redis (redis is nil on memory), with the
// configuration of a replica that uses it.
func onEachStore(t *testing.T, f func(t *testing.T, cfg replicaConfig, redis *redistest.Server)) {
	for _, store := range []string{"memory", "redis"} {
		t.Run(store, func(t *testing.T) {
			var cfg replicaConfig
			var redis *redistest.Server
			if store == "redis" {
				redis, cfg = withStandaloneRedis(t)
			}
			f(t, cfg, redis)
		})
	}
}

// explainAnswer is the part of the explain answer the tests read.
type explainAnswer struct {
	Descriptors []struct {
		Matched       bool   `json:"matched"`
		PolicyID      string `json:"policy_id"`
		SubjectDigest string `json:"subject_digest"`
		Rule          struct {
			File string `json:"file"`
			Line int    `json:"line"`
		} `json:"rule"`
		Limits []struct {
			Remaining *int64 `json:"remaining"`
			ResetMs   *int64 `json:"reset_ms"`
			Blocked   *bool  `json:"blocked"`
			BlockedMs *int64 `json:"blocked_ms"`
			Reserved  *int64 `json:"reserved"`
			Charged   *int64 `json:"charged"`
		} `json:"limits"`
	} `json:"descriptors"`
}

// TestExplainDigestAndReset, on each store: `envoy-rls explain --admin`
// shows the state left after N hits and consumes nothing; `envoy-rls
// digest` prints the digest the explain answer, the denial log and (Redis)
// the stored key carry; `explain --config` answers offline; DELETE
// /v1/counters resets the subject.
func TestExplainDigestAndReset(t *testing.T) {
	onEachStore(t, func(t *testing.T, cfg replicaConfig, redis *redistest.Server) {
		rules, secret, tokens := rulesDir(t, hourlyRules(5, "user")), secretFile(t), tokenFile(t)
		cfg.Rules, cfg.Secret, cfg.Args = rules, secret, []string{"--admin-token-file", tokens}
		r := startReplica(t, "explain", cfg)
		user := unique("rawval")
		r.checkAdmits(t, entry{"user", user}, 5, 3)
		// --admin as a URL and as host:port (taken as http), as
		// docs/admin-api.md says.
		admins := []string{"http://" + r.adminAddr, r.adminAddr}
		calls := 0
		explain := func() explainAnswer {
			calls++
			out := runOK(t, nil, "explain", "--admin", admins[calls%2], "--token-file", tokens, "--domain", domain, "--descriptor", "user="+user)
			var ans explainAnswer
			if err := json.Unmarshal([]byte(out), &ans); err != nil || len(ans.Descriptors) != 1 || len(ans.Descriptors[0].Limits) != 1 {
				t.Fatalf("explain: %v\n%s", err, out)
			}
			if strings.Contains(out, user) {
				t.Fatalf("the raw value in the explain answer:\n%s", out)
			}
			return ans
		}
		for i := range 2 { // the second sees the same: nothing consumed
			d := explain().Descriptors[0]
			if l := d.Limits[0]; !d.Matched || d.Rule.Line != 3 || l.Remaining == nil || *l.Remaining != 2 || *l.ResetMs <= 0 {
				t.Fatalf("explain %d after 3 hits of 5: %+v", i, d)
			}
		}
		digest := explain().Descriptors[0].SubjectDigest

		out := strings.Fields(runOK(t, nil, "digest", "--config", rules, "--hmac-secret-file", secret, "--domain", domain, "--descriptor", "user="+user))
		if len(out) != 3 || out[0] != digest || out[1] != explain().Descriptors[0].PolicyID || !strings.HasPrefix(out[2], "rate:{"+digest[:16]+"}:state:") {
			t.Fatalf("digest printed %q, explain says %s", out, digest)
		}
		if redis != nil {
			conn, err := redistest.Dial(redis.Addr(), nil, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if n, err := conn.Do(ctx, "EXISTS", out[2]); err != nil || n != int64(1) {
				t.Fatalf("EXISTS %s: %v %v, want the key digest printed", out[2], n, err)
			}
		}
		// The denial log names the subject by the digest's first 8 hex digits.
		r.checkAdmits(t, entry{"user", user}, 2, 3)
		polltest.Eventually(t, 5*time.Second, 50*time.Millisecond, "the denial log line", func() error {
			if !r.log.contains(`"subject":"` + digest[:8] + `"`) {
				return errors.New("not logged yet")
			}
			return nil
		})

		// Offline: the rule without state, the digest with the secret.
		off := runOK(t, []string{"ENVOY_RLS_HMAC_SECRET_FILE=" + secret}, "explain", "--config", rules, "--domain", domain, "--descriptor", "user="+user)
		var offAns explainAnswer
		if err := json.Unmarshal([]byte(off), &offAns); err != nil || offAns.Descriptors[0].SubjectDigest != digest || offAns.Descriptors[0].Limits[0].Remaining != nil {
			t.Fatalf("offline explain: %v\n%s", err, off)
		}

		// Reset: full again, and the next call is allowed (the local
		// deny cache forgot the denial).
		code, body, err := r.adminDo(http.MethodDelete, "/v1/counters?domain="+domain+"&descriptor=user="+user, adminToken)
		if err != nil || code != http.StatusOK {
			t.Fatalf("DELETE: %d %q %v", code, body, err)
		}
		if d := explain().Descriptors[0]; *d.Limits[0].Remaining != 5 {
			t.Fatalf("after the reset: remaining %d, want 5", *d.Limits[0].Remaining)
		}
		if res := r.mustCall(t, entry{"user", user}); !res.ok() {
			t.Fatalf("after the reset: %v", res)
		}
		if r.log.contains(user) {
			t.Fatal("the raw value in the log")
		}
	})
}

// TestTopAndUsage: the real binary, on each store, answers /v1/top and
// /v1/usage behind a bearer token from known traffic, and exports the
// volume metrics, with no raw descriptor value in any answer, metric or log
// line.
func TestTopAndUsage(t *testing.T) {
	onEachStore(t, func(t *testing.T, cfg replicaConfig, _ *redistest.Server) {
		cfg.Rules, cfg.Secret = rulesDir(t, hourlyRules(3, "user")), secretFile(t)
		cfg.Args = []string{"--admin-token-file", tokenFile(t), "--top-metric-series", "5"}
		r := startReplica(t, "top", cfg)

		heavy, light := unique("heavy-user"), unique("light-user")
		r.checkAdmits(t, entry{"user", heavy}, 3, 5)
		r.mustCall(t, entry{"user", light})

		get := func(path, tok string) (int, string) {
			t.Helper()
			code, body, err := r.adminDo(http.MethodGet, path, tok)
			if err != nil {
				t.Fatalf("GET %s: %v", path, err)
			}
			return code, body
		}
		for _, p := range []string{"/v1/top", "/v1/usage"} {
			if code, _ := get(p, ""); code != http.StatusUnauthorized {
				t.Errorf("%s without a token: %d, want 401", p, code)
			}
			if code, _ := get(p, "not-the-token-at-all"); code != http.StatusUnauthorized {
				t.Errorf("%s with a wrong token: %d, want 401", p, code)
			}
		}

		code, topBody := get("/v1/top?domain=e2e&key=user&n=10", adminToken)
		var top struct {
			Top []struct {
				SubjectDigest string `json:"subject_digest"`
				Hits, Denied  int64
				PolicyID      string `json:"policy_id"`
			} `json:"top"`
		}
		if err := json.Unmarshal([]byte(topBody), &top); err != nil || code != http.StatusOK {
			t.Fatalf("/v1/top: %d %v\n%s", code, err, topBody)
		}
		if len(top.Top) != 2 || top.Top[0].Hits != 5 || top.Top[0].Denied != 2 || top.Top[1].Hits != 1 || top.Top[1].Denied != 0 {
			t.Fatalf("/v1/top:\n%s", topBody)
		}
		policy := top.Top[0].PolicyID

		code, usageBody := get("/v1/usage?policy="+policy, adminToken)
		var usage struct {
			Policies []struct {
				Hits, Decisions, Denials int64
				Distinct                 uint64 `json:"distinct_subjects"`
			}
		}
		if err := json.Unmarshal([]byte(usageBody), &usage); err != nil || code != http.StatusOK {
			t.Fatalf("/v1/usage: %d %v\n%s", code, err, usageBody)
		}
		if len(usage.Policies) != 1 || usage.Policies[0].Hits != 6 || usage.Policies[0].Decisions != 6 || usage.Policies[0].Denials != 2 || usage.Policies[0].Distinct != 2 {
			t.Fatalf("/v1/usage:\n%s", usageBody)
		}

		for sample, want := range map[string]float64{
			`envoy_rls_hits_total{domain="e2e",policy="` + policy + `"}`:                                                      6,
			`envoy_rls_call_duration_seconds_count{domain="e2e"}`:                                                             6,
			`envoy_rls_store_duration_seconds_count{domain="e2e"}`:                                                            6,
			`envoy_rls_top_subject_hits{domain="e2e",policy="` + policy + `",subject="` + top.Top[0].SubjectDigest[:8] + `"}`: 5,
		} {
			if got := r.metric(sample); got != want {
				t.Errorf("%s = %v, want %v", sample, got, want)
			}
		}
		if r.metric("envoy_rls_config_last_reload_success_timestamp_seconds") < float64(time.Now().Add(-time.Hour).Unix()) {
			t.Errorf("last reload timestamp is not recent")
		}
		_, metrics := r.mustAdmin("/metrics")
		for _, raw := range []string{heavy, light, adminToken} {
			for _, out := range []string{topBody, usageBody, metrics} {
				if strings.Contains(out, raw) {
					t.Fatalf("%q leaked into an answer or a metric", raw)
				}
			}
			if r.log.contains(raw) {
				t.Fatalf("%q leaked into the log", raw)
			}
		}
		if !r.log.contains(`"action":"top"`) || !r.log.contains(`"action":"usage"`) {
			t.Errorf("the admin calls are not logged")
		}
	})
}
