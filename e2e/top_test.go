package e2e_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestTopAndUsage: the real binary, on each store, answers /v1/top and
// /v1/usage behind a bearer token from known traffic, and exports the
// volume metrics, with no raw descriptor value in any answer, metric or log
// line.
func TestTopAndUsage(t *testing.T) {
	for _, store := range []string{"memory", "redis"} {
		t.Run(store, func(t *testing.T) {
			var cfg replicaConfig
			if store == "redis" {
				_, cfg = withStandaloneRedis(t)
				cfg.Secret = secretFile(t)
			}
			cfg.Rules = rulesDir(t, `domain: e2e
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 3}
`)
			tokens := filepath.Join(t.TempDir(), "tokens")
			const token = "e2e-token-0123456789abcdef"
			if err := os.WriteFile(tokens, []byte("e2e:"+token+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg.Args = []string{"--admin-token-file", tokens, "--top-metric-series", "5"}
			r := startReplica(t, store, cfg)

			heavy, light := unique("heavy-user"), unique("light-user")
			for range 5 {
				r.mustCall(t, entry{"user", heavy}) // 3 allowed, 2 denied
			}
			r.mustCall(t, entry{"user", light})

			get := func(path, tok string) (int, string) {
				t.Helper()
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+r.adminAddr+path, nil)
				if tok != "" {
					req.Header.Set("Authorization", "Bearer "+tok)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatalf("GET %s: %v", path, err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
				return resp.StatusCode, string(b)
			}
			for _, p := range []string{"/v1/top", "/v1/usage"} {
				if code, _ := get(p, ""); code != http.StatusUnauthorized {
					t.Errorf("%s without a token: %d, want 401", p, code)
				}
				if code, _ := get(p, "not-the-token-at-all"); code != http.StatusUnauthorized {
					t.Errorf("%s with a wrong token: %d, want 401", p, code)
				}
			}

			code, topBody := get("/v1/top?domain=e2e&key=user&n=10", token)
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

			code, usageBody := get("/v1/usage?policy="+policy, token)
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
			for _, raw := range []string{heavy, light, token} {
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
}
