package admin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/internal/metricstest"
	"github.com/envoy-rls/envoy-rls/pkg/audit"
)

// TestConfigAndPprofBehindTheToken: with a token file, /config and every
// profile answer 401 without a token and are served with one (/config in
// full); without a token file they stay open (/config digested). A CPU
// profile longer than maxCPUProfile is refused.
func TestConfigAndPprofBehindTheToken(t *testing.T) {
	h := newHarness(t, withPprof)
	paths := []string{"/config", "/debug/pprof/", "/debug/pprof/heap", "/debug/pprof/profile?seconds=1"}
	for _, token := range []string{"", "wrong-token-0123456789"} {
		h.token = token
		for _, p := range paths {
			if code, _ := h.do("GET", p, ""); code != http.StatusUnauthorized {
				t.Errorf("%s with token %q: %d, want 401", p, token, code)
			}
		}
	}
	h.token = testToken
	for _, p := range paths {
		if code, _ := h.do("GET", p, ""); code != http.StatusOK {
			t.Errorf("%s with the token: %d, want 200", p, code)
		}
	}
	if _, body := h.do("GET", "/config", ""); !strings.Contains(body, `"full": true`) {
		t.Errorf("/config with the token is not the full view: %s", body)
	}
	if code, body := h.do("GET", fmt.Sprintf("/debug/pprof/profile?seconds=%d", int(maxCPUProfile/time.Second)+1), ""); code != http.StatusBadRequest || !strings.Contains(body, "seconds must be 1..60") {
		t.Errorf("a profile beyond the cap: %d %q, want 400", code, body)
	}
	if maxCPUProfile >= writeTimeout {
		t.Errorf("maxCPUProfile %v does not end within the write timeout %v", maxCPUProfile, writeTimeout)
	}

	open := newHarness(t, withPprof, withoutAuth)
	open.token = ""
	for _, p := range paths[:3] {
		if code, _ := open.do("GET", p, ""); code != http.StatusOK {
			t.Errorf("%s without a token file: %d, want 200", p, code)
		}
	}
	if _, body := open.do("GET", "/config", ""); !strings.Contains(body, `"full": false`) {
		t.Errorf("/config without a token file is the full view: %s", body)
	}
}

// TestAdminCallsAudited: explain, the counters read and both resets go to
// the audit sink and the log with the token's name, the action, the
// policies, the counts and the caller's address, never the raw value.
func TestAdminCallsAudited(t *testing.T) {
	var buf bytes.Buffer // read once the sink is closed
	sink := auditSink(t, &buf)
	h := newHarness(t, withAudit(sink))
	const raw = "rawval-audited-7"
	h.hits("user", raw, 3, 5)
	h.do("POST", "/v1/explain", `{"domain":"app","descriptors":[{"entries":[{"key":"user","value":"`+raw+`"}]},{"entries":[{"key":"nope","value":"x"}]}]}`)
	h.do("GET", "/v1/counters?domain=app&descriptor=user="+raw, "")
	h.do("DELETE", "/v1/counters?domain=app&descriptor=user="+raw, "")
	h.hits("user", raw, 1, 5)
	h.do("DELETE", "/v1/counters?policy=app/user", "")
	h.do("GET", "/v1/stats", "") // not audited
	if err := sink.Close(time.Second); err != nil {
		t.Fatal(err)
	}
	var recs []audit.AdminRecord
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var r audit.AdminRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		if r.Kind == audit.KindAdmin {
			recs = append(recs, r)
		}
	}
	want := []struct {
		action                       string
		descriptors, matched, delete int
	}{{"explain", 2, 1, 0}, {"counters-read", 1, 1, 0}, {"counters-reset", 1, 1, 1}, {"counters-reset", 0, 0, 1}}
	if len(recs) != len(want) {
		t.Fatalf("%d admin records, want %d:\n%s", len(recs), len(want), buf.String())
	}
	for i, w := range want {
		r := recs[i]
		if r.Action != w.action || r.Token != "ops" || !strings.HasPrefix(r.Client, "127.0.0.1:") || r.Status != 200 || r.PolicyID != "app/user" ||
			r.Descriptors != w.descriptors || r.Matched != w.matched || r.Deleted != w.delete {
			t.Errorf("record %d: %+v, want %+v", i, r, w)
		}
	}
	if recs[3].Complete == nil || !*recs[3].Complete || recs[3].Scanned < 1 {
		t.Errorf("the policy reset's record: %+v", recs[3])
	}
	for _, e := range h.logs.FilterMessage("admin call").All() {
		if e.ContextMap()["action"] == "counters-reset" && e.ContextMap()["deleted"] != int64(1) {
			t.Errorf("the reset's log line: %v", e.ContextMap())
		}
	}
	h.noRawValue(raw, buf.String())
}

// TestRefusalsSampled: 300 refused calls make refusalLogBurst log lines,
// then one line with the number not logged once the interval ends; the
// metric counts all of them.
func TestRefusalsSampled(t *testing.T) {
	clock := limitertest.NewClock(time.Unix(1000, 0))
	h := newHarness(t, withClock(clock.Now))
	h.token = "wrong-token-0123456789"
	for range 300 {
		if code, _ := h.do("GET", "/v1/stats", ""); code != http.StatusUnauthorized {
			t.Fatalf("a wrong token: %d", code)
		}
	}
	if n := h.logs.FilterMessage(MsgRefused).Len(); n != refusalLogBurst {
		t.Fatalf("%d refusal lines, want %d", n, refusalLogBurst)
	}
	h.adm.Tick(clock.Now()) // within the interval: nothing yet
	clock.Advance(refusalLogInterval)
	h.adm.Tick(clock.Now())
	h.adm.Tick(clock.Now())
	sum := h.logs.FilterMessage(MsgRefusedSuppressed).All()
	if len(sum) != 1 || sum[0].ContextMap()["refused"] != int64(300-refusalLogBurst) {
		t.Fatalf("suppressed lines: %+v", sum)
	}
	if v := metricstest.Value(t, h.reg, "envoy_rls_admin_refused_total", "reason", refusedWrongToken); v != 300 {
		t.Fatalf("refused wrong_token %v, want 300", v)
	}
}

// TestLookupsRateLimited: a token looks up GuessBurst values at once, then
// GuessRate a second; beyond it explain and the counters read answer 429
// with Retry-After, counted and not audited as calls.
func TestLookupsRateLimited(t *testing.T) {
	clock := limitertest.NewClock(time.Unix(1000, 0))
	h := newHarness(t, withClock(clock.Now))
	many := func(n int) string {
		ds := make([]string, n)
		for i := range ds {
			ds[i] = fmt.Sprintf(`{"entries":[{"key":"user","value":"guess-%d"}]}`, i)
		}
		return `{"domain":"app","descriptors":[` + strings.Join(ds, ",") + `]}`
	}
	if code, body := h.do("POST", "/v1/explain", many(GuessBurst)); code != http.StatusOK {
		t.Fatalf("a full burst: %d %s", code, body)
	}
	req, _ := http.NewRequest("POST", h.url+"/v1/explain", strings.NewReader(many(1)))
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("beyond the burst: %d, Retry-After %q; want 429, 1", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if code, _ := h.do("GET", "/v1/counters?domain=app&descriptor=user=x", ""); code != http.StatusTooManyRequests {
		t.Fatalf("a counters read beyond the burst: %d, want 429", code)
	}
	clock.Advance(time.Second) // GuessRate values more
	if code, _ := h.do("POST", "/v1/explain", many(GuessRate)); code != http.StatusOK {
		t.Fatalf("after a second, %d values: %d", GuessRate, code)
	}
	if code, _ := h.do("POST", "/v1/explain", many(1)); code != http.StatusTooManyRequests {
		t.Fatalf("one more: %d, want 429", code)
	}
	// Other reads are not charged.
	if code, _ := h.do("GET", "/v1/stats", ""); code != http.StatusOK {
		t.Fatalf("/v1/stats: %d", code)
	}
	if v := metricstest.Value(t, h.reg, "envoy_rls_admin_refused_total", "reason", refusedRateLimited); v != 3 {
		t.Fatalf("refused rate_limited %v, want 3", v)
	}
	explains := 0
	for _, e := range h.logs.FilterMessage("admin call").All() {
		if e.ContextMap()["action"] == "explain" {
			explains++
		}
	}
	if explains != 2 {
		t.Fatalf("%d explain calls logged, want the 2 served", explains)
	}
}
