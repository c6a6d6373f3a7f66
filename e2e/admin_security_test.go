package e2e_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/polltest"
)

// The admin surface's security on the real binary: the token file fails
// closed, /config and the profiles are behind the token, admin calls are
// audited, refusals are sampled and lookups are rate-limited per token
// (docs/admin-api.md, "Security").

// Log messages of the admin surface (internal/admin).
const (
	msgTokenFileRefused  = "admin token file refused: no admin token is in force; the admin API, /config and the profiles answer 401 until the file is fixed"
	msgTokenFileValid    = "admin token file valid again: its tokens are in force"
	msgRefused           = "admin call refused"
	msgRefusedSuppressed = "admin calls refused and not logged"
)

// configuredSecret is a value written in a rule: an API key that /config
// must show only behind the token.
const configuredSecret = "sk_live_e2eSECRET0123"

// secretRules limit one configured API key and every user.
var secretRules = fmt.Sprintf(`domain: %s
descriptors:
  - key: api_key
    value: %s
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 5}
`, domain, configuredSecret)

// logRecords returns the replica's JSON log lines whose msg is msg.
func logRecords(r *replica, msg string) []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(r.log.tail(64 << 20)))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// adminRequest sends method path with body (none when "") and the bearer
// token (none when "") to the admin port, bounded by 5 s.
func adminRequest(r *replica, client *http.Client, method, path, token, body string) (int, http.Header, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+r.adminAddr+path, rd)
	if err != nil {
		return 0, nil, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return resp.StatusCode, resp.Header, string(b), err
}

// TestAdminTokenRevocation: each way of breaking the token file while the
// replica serves — emptied, its line commented out, deleted, a malformed
// line, chmod 0644 — revokes every token within a few seconds: the API,
// /config and the profiles answer 401, /healthz names the problem,
// envoy_rls_admin_token_file_ok is 0, and one error line is logged per
// change. Writing the valid file back restores the token.
func TestAdminTokenRevocation(t *testing.T) {
	tokens := tokenFile(t)
	good := "ops:" + adminToken + "\n"
	r := startReplica(t, "revocation", replicaConfig{Rules: rulesDir(t, hourlyRules(5, "user")), Secret: secretFile(t),
		Args: []string{"--admin-token-file", tokens, "--pprof"}})
	restore := func() {
		_ = os.Remove(tokens)
		writeFile(t, filepath.Dir(tokens), filepath.Base(tokens), good)
	}
	cases := []struct {
		name, problem string
		breakIt       func() error
	}{
		{"emptied", "no token", func() error { return os.WriteFile(tokens, nil, 0o600) }},
		{"commented out", "no token", func() error { return os.WriteFile(tokens, []byte("# "+good), 0o600) }},
		{"deleted", "does not exist", func() error { return os.Remove(tokens) }},
		{"malformed", ":1: want name:token", func() error { return os.WriteFile(tokens, []byte("ops "+adminToken+"\n"), 0o600) }},
		{"chmod 0644", "mode 0644 lets group or others use it: chmod 600", func() error { return os.Chmod(tokens, 0o644) }},
	}
	for _, tc := range cases {
		if err := tc.breakIt(); err != nil {
			t.Fatal(err)
		}
		polltest.Eventually(t, 5*time.Second, 50*time.Millisecond, "revoked after "+tc.name, func() error {
			for _, p := range []string{"/v1/stats", "/config", "/debug/pprof/heap"} {
				if code, _, err := r.adminDo(http.MethodGet, p, adminToken); err != nil || code != http.StatusUnauthorized {
					return fmt.Errorf("%s: %d %v, want 401", p, code, err)
				}
			}
			return nil
		})
		_, health := r.mustAdmin("/healthz")
		if !strings.Contains(health, "admin tokens: none in force: ") || !strings.Contains(health, tc.problem) || strings.Contains(health, adminToken) {
			t.Fatalf("%s: /healthz %q, want the problem %q and no token", tc.name, health, tc.problem)
		}
		if v := r.metric("envoy_rls_admin_token_file_ok"); v != 0 {
			t.Fatalf("%s: envoy_rls_admin_token_file_ok %v, want 0", tc.name, v)
		}
		time.Sleep(2500 * time.Millisecond) // more rereads of the same state: no more lines
		restore()
		polltest.Eventually(t, 5*time.Second, 50*time.Millisecond, "restored after "+tc.name, func() error {
			if code, _, err := r.adminDo(http.MethodGet, "/v1/stats", adminToken); err != nil || code != http.StatusOK {
				return fmt.Errorf("/v1/stats: %d %v, want 200", code, err)
			}
			return nil
		})
		if _, health := r.mustAdmin("/healthz"); !strings.Contains(health, "admin tokens: 1 in force") {
			t.Fatalf("after %s restored: /healthz %q", tc.name, health)
		}
	}
	if n, m := len(logRecords(r, msgTokenFileRefused)), len(logRecords(r, msgTokenFileValid)); n != len(cases) || m != len(cases) {
		t.Fatalf("%d refusal and %d valid-again lines, want %d of each (one per change)", n, m, len(cases))
	}
	if v := r.metric("envoy_rls_admin_token_file_ok"); v != 1 {
		t.Fatalf("envoy_rls_admin_token_file_ok %v after the last fix, want 1", v)
	}
	if r.log.contains(adminToken) {
		t.Fatal("the token in the log")
	}
}

// TestAdminTokenFileBadAtStart: a token file that exists but is readable
// by others, or is missing, stops the start with an error naming the file
// and the fix.
func TestAdminTokenFileBadAtStart(t *testing.T) {
	rules := rulesDir(t, hourlyRules(5, "user"))
	open := tokenFile(t)
	if err := os.Chmod(open, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, want string }{
		{open, "chmod 600 " + open},
		{filepath.Join(t.TempDir(), "missing"), "does not exist: create it"},
	} {
		res := runCommand(t, nil, "serve", "--config", rules, "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--admin-token-file", tc.path)
		if res.code == 0 || !strings.Contains(strings.Join(res.errorLines(), "\n"), tc.want) {
			t.Fatalf("serve with %s: exit %d, want an error with %q:\n%s", tc.path, res.code, tc.want, res.stderr)
		}
	}
}

// TestConfigAndPprofNeedTheToken: with a token file /config (which shows a
// configured API key) and the profiles answer 401 without the token and
// 200 with it; a CPU profile beyond 60 s is refused. Without a token file
// /config is open and shows the key only as a digest.
func TestConfigAndPprofNeedTheToken(t *testing.T) {
	rules, secret := rulesDir(t, secretRules), secretFile(t)
	r := startReplica(t, "guarded", replicaConfig{Rules: rules, Secret: secret, Args: []string{"--admin-token-file", tokenFile(t), "--pprof"}})
	for _, p := range []string{"/config", "/debug/pprof/", "/debug/pprof/heap", "/debug/pprof/goroutine?debug=1", "/debug/pprof/profile?seconds=1"} {
		for _, token := range []string{"", "wrong-token-0123456789abcdef"} {
			if code, body, err := r.adminDo(http.MethodGet, p, token); err != nil || code != http.StatusUnauthorized || strings.Contains(body, configuredSecret) {
				t.Fatalf("%s with token %q: %d %v, want 401", p, token, code, err)
			}
		}
		code, _, _, err := adminRequest(r, http.DefaultClient, http.MethodGet, p, adminToken, "")
		if err != nil || code != http.StatusOK {
			t.Fatalf("%s with the token: %d %v, want 200", p, code, err)
		}
	}
	if _, body, _ := r.adminDo(http.MethodGet, "/config", adminToken); !strings.Contains(body, configuredSecret) {
		t.Fatalf("/config with the token does not show the configured value:\n%s", body)
	}
	if code, body, err := r.adminDo(http.MethodGet, "/debug/pprof/profile?seconds=61", adminToken); err != nil || code != http.StatusBadRequest || !strings.Contains(body, "1..60") {
		t.Fatalf("a 61 s profile: %d %q %v, want 400", code, body, err)
	}

	open := startReplica(t, "open", replicaConfig{Rules: rules, Secret: secret})
	code, body := open.mustAdmin("/config")
	if code != http.StatusOK || strings.Contains(strings.ToLower(body), strings.ToLower(configuredSecret)) || !strings.Contains(body, `"path": "e2e/api_key=hmac:`) {
		t.Fatalf("/config without a token file: %d, want the key as a digest:\n%s", code, body)
	}
	// The same digest on every replica with the same secret.
	other := startReplica(t, "open-2", replicaConfig{Rules: rules, Secret: secret})
	if _, again := other.mustAdmin("/config"); pathOf(again) != pathOf(body) {
		t.Fatalf("two replicas, two digests: %s and %s", pathOf(body), pathOf(again))
	}
}

// pathOf returns the first api_key rule path of a /config body.
func pathOf(body string) string {
	i := strings.Index(body, `"path": "e2e/api_key=`)
	if i < 0 {
		return ""
	}
	rest := body[i+len(`"path": "`):]
	return rest[:strings.IndexByte(rest, '"')]
}

// TestAdminResetAudited: a reset goes to the audit file and the log with
// the token's name, the action, the policy, the states deleted and the
// caller's address, and neither holds the raw value.
func TestAdminResetAudited(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	r := startReplica(t, "audited", replicaConfig{Rules: rulesDir(t, hourlyRules(5, "user")), Secret: secretFile(t),
		Args: []string{"--admin-token-file", tokenFile(t), "--audit-sink", "file", "--audit-file", path}})
	user := unique("rawval")
	r.checkAdmits(t, entry{"user", user}, 5, 3)
	code, _, body, err := adminRequest(r, http.DefaultClient, http.MethodDelete, "/v1/counters?domain="+domain+"&descriptor=user="+user, adminToken, "")
	if err != nil || code != http.StatusOK {
		t.Fatalf("DELETE: %d %v %s", code, err, body)
	}
	var rec map[string]any
	polltest.Eventually(t, 5*time.Second, 50*time.Millisecond, "the admin record", func() error {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, line := range strings.Split(string(b), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(line), &m) == nil && m["kind"] == "admin" {
				rec = m
				return nil
			}
		}
		return errors.New("not written yet")
	})
	if rec["action"] != "counters-reset" || rec["token"] != "ops" || rec["policy_id"] != domain+"/user" || rec["deleted"] != 1.0 ||
		rec["status"] != 200.0 || !strings.HasPrefix(fmt.Sprint(rec["client"]), "127.0.0.1:") || rec["domain"] != domain {
		t.Fatalf("the admin record: %v", rec)
	}
	var logged map[string]any
	for _, l := range logRecords(r, "admin call") {
		if l["action"] == "counters-reset" {
			logged = l
		}
	}
	if logged == nil || logged["token"] != "ops" || logged["deleted"] != 1.0 || logged["client"] != rec["client"] || fmt.Sprint(logged["policies"]) != "["+domain+"/user]" {
		t.Fatalf("the admin call's log line: %v", logged)
	}
	if b, _ := os.ReadFile(path); strings.Contains(string(b), user) || r.log.contains(user) {
		t.Fatal("the raw value in the audit file or the log")
	}
}

// TestAdminRefusalsSampled: 3,000 calls with a wrong token are all
// refused and counted, but make 10 log lines, then one line with the
// number not logged once the 10 s interval ends.
func TestAdminRefusalsSampled(t *testing.T) {
	r := startReplica(t, "refusals", replicaConfig{Rules: rulesDir(t, hourlyRules(5, "user")), Args: []string{"--admin-token-file", tokenFile(t)}})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	defer client.CloseIdleConnections()
	const calls = 3000
	start := time.Now()
	for i := range calls {
		code, _, _, err := adminRequest(r, client, http.MethodGet, "/v1/stats", "wrong-token-0123456789abcdef", "")
		if err != nil || code != http.StatusUnauthorized {
			t.Fatalf("call %d: %d %v, want 401", i, code, err)
		}
	}
	t.Logf("%d refused calls in %v", calls, time.Since(start).Round(time.Millisecond))
	if v := r.metric(`envoy_rls_admin_refused_total{reason="wrong_token"}`); v != calls {
		t.Fatalf(`envoy_rls_admin_refused_total{reason="wrong_token"} %v, want %d`, v, calls)
	}
	var summary []map[string]any
	polltest.Eventually(t, 15*time.Second, 100*time.Millisecond, "the line counting the refusals not logged", func() error {
		if summary = logRecords(r, msgRefusedSuppressed); len(summary) == 0 {
			return errors.New("not logged yet")
		}
		return nil
	})
	lines := logRecords(r, msgRefused)
	if len(lines) != 10 || len(summary) != 1 || summary[0]["refused"] != float64(calls-10) {
		t.Fatalf("%d refusal lines and %v, want 10 and one line counting %d", len(lines), summary, calls-10)
	}
	if lines[0]["reason"] != "wrong_token" || !strings.HasPrefix(fmt.Sprint(lines[0]["client"]), "127.0.0.1:") {
		t.Fatalf("a refusal line: %v", lines[0])
	}
}

// TestExplainRateLimited: one token looks up at most 64 values at once
// and 20 a second: a second explain of 64 descriptors right after the
// first is 429 with Retry-After, the counters read too, and after the
// announced wait the same explain is answered.
func TestExplainRateLimited(t *testing.T) {
	r := startReplica(t, "guesses", replicaConfig{Rules: rulesDir(t, hourlyRules(5, "user")), Secret: secretFile(t),
		Args: []string{"--admin-token-file", tokenFile(t)}})
	ds := make([]string, 64)
	for i := range ds {
		ds[i] = fmt.Sprintf(`{"entries":[{"key":"user","value":"198.51.100.%d"}]}`, i)
	}
	guesses := `{"domain":"` + domain + `","descriptors":[` + strings.Join(ds, ",") + `]}`
	if code, _, body, err := adminRequest(r, http.DefaultClient, http.MethodPost, "/v1/explain", adminToken, guesses); err != nil || code != http.StatusOK {
		t.Fatalf("64 guesses: %d %v %s", code, err, body)
	}
	code, h, body, err := adminRequest(r, http.DefaultClient, http.MethodPost, "/v1/explain", adminToken, guesses)
	if err != nil || code != http.StatusTooManyRequests {
		t.Fatalf("64 more guesses at once: %d %v %s, want 429", code, err, body)
	}
	wait, err := strconv.Atoi(h.Get("Retry-After"))
	if err != nil || wait < 1 || wait > 4 {
		t.Fatalf("Retry-After %q, want 1 to 4 s (64 values at 20 a second)", h.Get("Retry-After"))
	}
	if code, _, _, _ := adminRequest(r, http.DefaultClient, http.MethodGet, "/v1/counters?domain="+domain+"&descriptor=user=198.51.100.1", adminToken, ""); code != http.StatusTooManyRequests {
		t.Fatalf("a counters read right after: %d, want 429", code)
	}
	time.Sleep(time.Duration(wait) * time.Second)
	if code, _, body, err := adminRequest(r, http.DefaultClient, http.MethodPost, "/v1/explain", adminToken, guesses); err != nil || code != http.StatusOK {
		t.Fatalf("after Retry-After: %d %v %s", code, err, body)
	}
	if v := r.metric(`envoy_rls_admin_refused_total{reason="rate_limited"}`); v != 2 {
		t.Fatalf(`envoy_rls_admin_refused_total{reason="rate_limited"} %v, want 2`, v)
	}
}
