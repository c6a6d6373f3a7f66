package app

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
)

// topAdminGet sends GET path to r's admin port with token ("" for none).
func (r *running) topAdminGet(t *testing.T, path, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+r.adminAddr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestTopAndUsageMemory(t *testing.T) {
	testTopAndUsage(t, nil, nil)
}

func TestTopAndUsageRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("Redis lane")
	}
	srv := redistest.Standalone(t, redistest.Local())
	testTopAndUsage(t, []string{"--store", "redis", "--redis-timeout", "300ms"},
		map[string]string{SecretEnv: "a-shared-secret-of-32-bytes-----", "ENVOY_RLS_REDIS_ADDR": srv.Addr()})
}

// testTopAndUsage sends known traffic to the real serve command and checks
// /v1/top, /v1/usage and the volume metrics: values, auth and that no raw
// descriptor value appears.
func testTopAndUsage(t *testing.T, args []string, env map[string]string) {
	dir := t.TempDir()
	rules := writeRules(t, dir, testRules) // app/user: 2 per minute
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("ops:s3cret-token-of-some-length\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args = append([]string{"--config", rules, "--admin-token-file", tokens, "--top-metric-series", "2"}, args...)
	r := startServe(t, args, env, hooks{})

	// heavy-user-value: 6 calls (2 allowed, 4 denied); light-user-value: 1.
	for range 6 {
		r.check(t, "heavy-user-value")
	}
	r.check(t, "light-user-value")

	if code, _ := r.topAdminGet(t, "/v1/top?domain=app&key=user", ""); code != http.StatusUnauthorized {
		t.Fatalf("/v1/top without a token: %d, want 401", code)
	}
	if code, _ := r.topAdminGet(t, "/v1/usage", "wrong"); code != http.StatusUnauthorized {
		t.Fatalf("/v1/usage with a wrong token: %d, want 401", code)
	}
	const tok = "s3cret-token-of-some-length"
	if code, body := r.topAdminGet(t, "/v1/top?n=0", tok); code != http.StatusBadRequest {
		t.Fatalf("/v1/top?n=0: %d %s, want 400", code, body)
	}
	if code, body := r.topAdminGet(t, "/v1/top?by=size", tok); code != http.StatusBadRequest {
		t.Fatalf("/v1/top?by=size: %d %s, want 400", code, body)
	}

	code, body := r.topAdminGet(t, "/v1/top?domain=app&key=user&n=10", tok)
	var top topAnswer
	if err := json.Unmarshal([]byte(body), &top); err != nil || code != 200 {
		t.Fatalf("/v1/top: %d %v\n%s", code, err, body)
	}
	if len(top.Top) != 2 || top.Top[0].Hits != 6 || top.Top[0].Denied != 4 || top.Top[1].Hits != 1 || top.Top[1].Denied != 0 ||
		top.Top[0].PolicyID == "" || top.Top[0].Key != "user" || len(top.Top[0].SubjectDigest) != 64 {
		t.Fatalf("/v1/top:\n%s", body)
	}
	_, byDenied := r.topAdminGet(t, "/v1/top?policy="+top.Top[0].PolicyID+"&by=denied&n=1", tok)
	if !strings.Contains(byDenied, top.Top[0].SubjectDigest) || strings.Contains(byDenied, top.Top[1].SubjectDigest) {
		t.Fatalf("/v1/top by denied, n=1:\n%s", byDenied)
	}
	if _, other := r.topAdminGet(t, "/v1/top?domain=app&key=other", tok); !strings.Contains(other, `"top": []`) {
		t.Fatalf("/v1/top of a key with no rule:\n%s", other)
	}

	code, body = r.topAdminGet(t, "/v1/usage?policy="+top.Top[0].PolicyID, tok)
	var usage usageAnswer
	if err := json.Unmarshal([]byte(body), &usage); err != nil || code != 200 {
		t.Fatalf("/v1/usage: %d %v\n%s", code, err, body)
	}
	if len(usage.Policies) != 1 {
		t.Fatalf("/v1/usage:\n%s", body)
	}
	u := usage.Policies[0]
	if u.Hits != 7 || u.Decisions != 7 || u.Denials != 4 || u.ShadowDenials != 0 || u.DistinctSubjects != 2 || u.Recent.Decisions != 7 {
		t.Fatalf("/v1/usage:\n%s", body)
	}

	_, metrics := r.get(t, "/metrics")
	for _, want := range []string{
		`envoy_rls_hits_total{domain="app",policy="` + u.PolicyID + `"} 7`,
		`envoy_rls_call_duration_seconds_count{domain="app"} 7`,
		`envoy_rls_store_duration_seconds_count{domain="app"} 7`,
		`envoy_rls_top_subject_hits{domain="app",policy="` + u.PolicyID + `",subject="` + top.Top[0].SubjectDigest[:8] + `"} 6`,
		`envoy_rls_top_untracked_total 0`,
		"envoy_rls_config_last_reload_success_timestamp_seconds 1.",
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	for _, gone := range []string{"call_latency_seconds", "store_latency_seconds"} {
		if strings.Contains(metrics, gone) {
			t.Errorf("/metrics still has %s", gone)
		}
	}
	for _, out := range []string{body, byDenied, metrics, r.logs.String()} {
		if strings.Contains(out, "heavy-user-value") || strings.Contains(out, "light-user-value") || strings.Contains(out, "s3cret-token") {
			t.Fatalf("a raw value or the token leaked:\n%s", out)
		}
	}
	if !strings.Contains(r.logs.String(), `"action":"top"`) || !strings.Contains(r.logs.String(), `"action":"usage"`) {
		t.Fatalf("admin calls not logged:\n%s", r.logs)
	}
}

func TestTopFlagErrors(t *testing.T) {
	rules := writeRules(t, t.TempDir(), testRules)
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--top-counters", "0"}, nil, `--top-counters="0": must be an integer from 1 to 4096`},
		{[]string{"--top-max-policies", "70000"}, nil, `--top-max-policies="70000": must be an integer from 1 to 65536`},
		{[]string{"--top-window", "500ms"}, nil, `--top-window="500ms": must be a duration of at least 1s, such as 1m`},
		{nil, map[string]string{"ENVOY_RLS_TOP_METRIC_SERIES": "-1"}, `ENVOY_RLS_TOP_METRIC_SERIES="-1": must be an integer from 0 to 1000`},
	} {
		err := Run(context.Background(), append([]string{"serve", "--config", rules}, tc.args...), func(k string) string { return tc.env[k] }, io.Discard, io.Discard)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%v %v: err %v, want %s", tc.args, tc.env, err, tc.want)
		}
	}
}

// Without --admin-token-file the endpoints do not exist.
func TestTopAndUsageOffWithoutTokens(t *testing.T) {
	r := startServe(t, []string{"--config", writeRules(t, t.TempDir(), testRules)}, nil, hooks{})
	for _, p := range []string{"/v1/top", "/v1/usage"} {
		if code, _ := r.get(t, p); code != http.StatusNotFound {
			t.Errorf("%s without --admin-token-file: %d, want 404", p, code)
		}
	}
}
