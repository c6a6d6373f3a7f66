package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
)

const explainRules = `domain: app
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: tenant
    rate_limits:
      - {unit: minute, requests_per_unit: 10}
      - {unit: hour, requests_per_unit: 100}
`

const explainTestToken = "explain-test-token-0123456789"

// explainClient calls the admin API of a running server.
type explainClient struct {
	t     *testing.T
	r     *running
	token string
	// bodies keeps every answer, for the privacy check.
	bodies []string
}

func (c *explainClient) do(method, path, body string) (int, string) {
	c.t.Helper()
	req, err := http.NewRequest(method, "http://"+c.r.adminAddr+path, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	c.bodies = append(c.bodies, string(b))
	return resp.StatusCode, string(b)
}

// decode calls the API, wants 200 and decodes the answer.
func (c *explainClient) decode(method, path, body string, v any) {
	c.t.Helper()
	code, text := c.do(method, path, body)
	if code != http.StatusOK {
		c.t.Fatalf("%s %s: %d %s", method, path, code, text)
	}
	if err := json.Unmarshal([]byte(text), v); err != nil {
		c.t.Fatalf("%s %s: %v in %s", method, path, err, text)
	}
}

// rlsHit sends one ShouldRateLimit of domain app with one entry.
func rlsHit(t *testing.T, r *running, key, value string) rlsv3.RateLimitResponse_Code {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := rlsv3.NewRateLimitServiceClient(r.conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{
		Domain:      "app",
		Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: key, Value: value}}}},
	})
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp.OverallCode
}

func explainBody(key, value string) string {
	return fmt.Sprintf(`{"domain":"app","descriptors":[{"entries":[{"key":%q,"value":%q}]}]}`, key, value)
}

// startExplainServer serves explainRules on store with a token file.
func startExplainServer(t *testing.T, store string, env map[string]string, extra ...string) (*running, *explainClient) {
	return startExplainServerWith(t, explainRules, store, env, extra...)
}

// startExplainServerWith serves ruleText on store with a token file.
func startExplainServerWith(t *testing.T, ruleText, store string, env map[string]string, extra ...string) (*running, *explainClient) {
	dir := t.TempDir()
	rules := writeRules(t, dir, ruleText)
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("ops:"+explainTestToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--config", rules, "--store", store, "--admin-token-file", tokens}, extra...)
	r := startServe(t, args, env, hooks{})
	return r, &explainClient{t: t, r: r, token: explainTestToken}
}

// checkExplainAndCounters is the suite of the explain and counters API on
// a running server with explainRules.
func checkExplainAndCounters(t *testing.T, r *running, c *explainClient) {
	const user = "rawval-user-7"
	for range 3 {
		if code := rlsHit(t, r, "user", user); code != rlsv3.RateLimitResponse_OK {
			t.Fatalf("hit: %v", code)
		}
	}
	var first, second explainAnswer
	c.decode("POST", "/v1/explain", explainBody("user", user), &first)
	c.decode("POST", "/v1/explain", explainBody("user", user), &second)
	for i, ans := range []explainAnswer{first, second} {
		if len(ans.Descriptors) != 1 || len(ans.Descriptors[0].Limits) != 1 {
			t.Fatalf("explain %d: %+v", i, ans)
		}
		d := ans.Descriptors[0]
		l := d.Limits[0]
		if !d.Matched || d.PolicyID == "" || d.Rule == nil || d.Rule.Line != 3 || !strings.HasSuffix(d.Rule.File, "rules.yaml") ||
			len(d.SubjectDigest) != 64 || l.SubjectDigest != d.SubjectDigest || len(d.Steps) != 1 || d.Steps[0].How != "key_only" {
			t.Fatalf("explain %d: %+v", i, d)
		}
		if l.Remaining == nil || *l.Remaining != 2 || l.Limit != 5 || l.Algorithm != "fixed_window" || l.ResetMs == nil || *l.ResetMs <= 0 || *l.ResetMs > 60_000 {
			t.Fatalf("explain %d after 3 hits of 5: %+v (remaining %v)", i, l, l.Remaining)
		}
	}

	var got countersAnswer
	c.decode("GET", "/v1/counters?domain=app&descriptor=user="+user, "", &got)
	if !got.Matched || len(got.Limits) != 1 || *got.Limits[0].Remaining != 2 || got.SubjectDigest != first.Descriptors[0].SubjectDigest {
		t.Fatalf("GET counters: %+v", got)
	}

	// A descriptor with rate_limits: one entry per limit.
	rlsHit(t, r, "tenant", "rawval-tenant")
	c.decode("GET", "/v1/counters?domain=app&descriptor=tenant=rawval-tenant", "", &got)
	if len(got.Limits) != 2 || len(got.PolicyIDs) != 2 || *got.Limits[0].Remaining != 9 || *got.Limits[1].Remaining != 99 ||
		got.Limits[0].Unit != "minute" || got.Limits[1].Unit != "hour" {
		t.Fatalf("rate_limits: %+v", got)
	}

	// Reset one subject: full again, consumed from there.
	c.decode("DELETE", "/v1/counters?domain=app&descriptor=user="+user, "", &got)
	if got.StatesDeleted == nil || *got.StatesDeleted != 1 || *got.Limits[0].Remaining != 5 {
		t.Fatalf("DELETE counters: %+v", got)
	}
	rlsHit(t, r, "user", user)
	c.decode("GET", "/v1/counters?domain=app&descriptor=user="+user, "", &got)
	if *got.Limits[0].Remaining != 4 {
		t.Fatalf("after reset and one hit: %+v", got.Limits[0])
	}
	c.decode("DELETE", "/v1/counters?domain=app&descriptor=tenant=rawval-tenant", "", &got)
	if *got.StatesDeleted != 2 || *got.Limits[0].Remaining != 10 || *got.Limits[1].Remaining != 100 {
		t.Fatalf("DELETE rate_limits: %+v", got)
	}

	// A denied subject is answered from the local deny cache; a reset makes
	// the cache forget it.
	const hot = "rawval-hot-user"
	for i := range 7 {
		want := rlsv3.RateLimitResponse_OK
		if i >= 5 {
			want = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if code := rlsHit(t, r, "user", hot); code != want {
			t.Fatalf("hot hit %d: %v, want %v", i, code, want)
		}
	}
	c.decode("DELETE", "/v1/counters?domain=app&descriptor=user="+hot, "", &got)
	if code := rlsHit(t, r, "user", hot); code != rlsv3.RateLimitResponse_OK {
		t.Fatalf("after a reset the subject is still denied: %v", code)
	}

	// A policy-wide reset.
	for i := range 4 {
		rlsHit(t, r, "user", fmt.Sprintf("rawval-many-%d", i))
	}
	var pr policyResetAnswer
	c.decode("DELETE", "/v1/counters?policy="+first.Descriptors[0].PolicyID, "", &pr)
	if !pr.Complete || pr.Deleted != 6 || pr.Scanned < 6 {
		t.Fatalf("policy reset: %+v, want 6 states deleted (4 users, %q, %q)", pr, user, hot)
	}
	c.decode("GET", "/v1/counters?domain=app&descriptor=user=rawval-many-0", "", &got)
	if *got.Limits[0].Remaining != 5 {
		t.Fatalf("after the policy reset: %+v", got.Limits[0])
	}
	c.decode("GET", "/v1/counters?domain=app&descriptor=tenant=rawval-tenant", "", &got)
	if *got.Limits[0].Remaining != 10 {
		t.Fatalf("another policy: %+v", got.Limits[0])
	}
	if code, body := c.do("DELETE", "/v1/counters?policy=app/nope", ""); code != http.StatusNotFound {
		t.Fatalf("unknown policy: %d %s", code, body)
	}

	// Bounds and errors.
	for _, tc := range []struct {
		method, path, body string
		code               int
		want               string
	}{
		{"POST", "/v1/explain", `{"domain":` + strings.Repeat(" ", maxExplainBody) + `"app"}`, http.StatusRequestEntityTooLarge, "larger than"},
		{"POST", "/v1/explain", `{"domain":"app","descriptors":[`, http.StatusBadRequest, "protobuf JSON"},
		{"POST", "/v1/explain", `{"domain":"app"}`, http.StatusBadRequest, "descriptors is empty"},
		// A parser message would quote the value: cut before it.
		{"POST", "/v1/explain", `{"domain":"app","descriptors":[{"entries":[{"key":"user","value":"rawval-x"}]}],"hits_addend":"rawval-y"}`, http.StatusBadRequest, "(line 1:"},
		{"GET", "/v1/counters?descriptor=user=x", "", http.StatusBadRequest, "domain= is required"},
		{"GET", "/v1/counters?domain=app&descriptor=user", "", http.StatusBadRequest, "want key=value"},
		{"DELETE", "/v1/counters?policy=x&revision=1&max_states=0", "", http.StatusBadRequest, ""},
	} {
		code, body := c.do(tc.method, tc.path, tc.body)
		if code != tc.code || !strings.Contains(body, tc.want) {
			t.Fatalf("%s %s: %d %s; want %d with %q", tc.method, tc.path, code, body, tc.code, tc.want)
		}
	}
	var unknown explainAnswer
	c.decode("POST", "/v1/explain", strings.Replace(explainBody("user", user), `"app"`, `"elsewhere"`, 1), &unknown)
	if d := unknown.Descriptors[0]; d.Matched || d.Reason != "no rules for this domain" || len(d.Limits) != 0 {
		t.Fatalf("unknown domain: %+v", d)
	}

	// Auth: no token, a wrong one.
	for _, tok := range []string{"", "wrong-token-0123456789"} {
		anon := &explainClient{t: t, r: r, token: tok}
		if code, _ := anon.do("POST", "/v1/explain", explainBody("user", user)); code != http.StatusUnauthorized {
			t.Fatalf("token %q: %d, want 401", tok, code)
		}
		if code, _ := anon.do("DELETE", "/v1/counters?policy="+first.Descriptors[0].PolicyID, ""); code != http.StatusUnauthorized {
			t.Fatalf("token %q: DELETE %d, want 401", tok, code)
		}
	}

	// Privacy: no raw value in any answer or log line.
	for _, b := range append(c.bodies, r.logs.String()) {
		if strings.Contains(b, "rawval-") {
			t.Fatalf("a raw descriptor value in:\n%s", b)
		}
	}
	if !strings.Contains(r.logs.String(), `"action":"counters-reset"`) {
		t.Fatalf("the reset is not in the admin log:\n%s", r.logs)
	}
}

func TestExplainAndCountersMemory(t *testing.T) {
	r, c := startExplainServer(t, "memory", nil)
	checkExplainAndCounters(t, r, c)
}

func TestExplainAndCountersRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("Redis lane")
	}
	srv := redistest.Standalone(t, redistest.Local())
	env := map[string]string{SecretEnv: "a-shared-secret-of-32-bytes-----", "ENVOY_RLS_REDIS_ADDR": srv.Addr()}
	r, c := startExplainServer(t, "redis", env, "--redis-timeout", "2s")
	checkExplainAndCounters(t, r, c)
}

// TestAdminAPIOffWithoutTokens: without --admin-token-file the endpoints
// do not exist.
func TestAdminAPIOffWithoutTokens(t *testing.T) {
	rules := writeRules(t, t.TempDir(), explainRules)
	r := startServe(t, []string{"--config", rules}, nil, hooks{})
	c := &explainClient{t: t, r: r, token: explainTestToken}
	for _, m := range []string{"POST /v1/explain", "GET /v1/counters?domain=app&descriptor=user=x", "DELETE /v1/counters?policy=x"} {
		method, path, _ := strings.Cut(m, " ")
		if code, _ := c.do(method, path, explainBody("user", "x")); code != http.StatusNotFound {
			t.Fatalf("%s without a token file: %d, want 404", m, code)
		}
	}
}
