package admin

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// checkExplainAndCounters is the suite of the explain and counters API on
// a running server with explainRules.
func checkExplainAndCounters(t *testing.T, h *harness) {
	const user = "rawval-user-7"
	h.hits("user", user, 3, 3)
	var first, second ExplainAnswer
	h.decode("POST", "/v1/explain", explainBody("user", user), &first)
	h.decode("POST", "/v1/explain", explainBody("user", user), &second)
	for i, ans := range []ExplainAnswer{first, second} {
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
	h.decode("GET", "/v1/counters?domain=app&descriptor=user="+user, "", &got)
	if !got.Matched || len(got.Limits) != 1 || *got.Limits[0].Remaining != 2 || got.SubjectDigest != first.Descriptors[0].SubjectDigest {
		t.Fatalf("GET counters: %+v", got)
	}

	// A descriptor with rate_limits: one entry per limit.
	h.hit("tenant", "rawval-tenant")
	h.decode("GET", "/v1/counters?domain=app&descriptor=tenant=rawval-tenant", "", &got)
	if len(got.Limits) != 2 || len(got.PolicyIDs) != 2 || *got.Limits[0].Remaining != 9 || *got.Limits[1].Remaining != 99 ||
		got.Limits[0].Unit != "minute" || got.Limits[1].Unit != "hour" {
		t.Fatalf("rate_limits: %+v", got)
	}

	// Reset one subject: full again, consumed from there.
	h.decode("DELETE", "/v1/counters?domain=app&descriptor=user="+user, "", &got)
	if got.StatesDeleted == nil || *got.StatesDeleted != 1 || *got.Limits[0].Remaining != 5 {
		t.Fatalf("DELETE counters: %+v", got)
	}
	h.hit("user", user)
	h.decode("GET", "/v1/counters?domain=app&descriptor=user="+user, "", &got)
	if *got.Limits[0].Remaining != 4 {
		t.Fatalf("after reset and one hit: %+v", got.Limits[0])
	}
	h.decode("DELETE", "/v1/counters?domain=app&descriptor=tenant=rawval-tenant", "", &got)
	if *got.StatesDeleted != 2 || *got.Limits[0].Remaining != 10 || *got.Limits[1].Remaining != 100 {
		t.Fatalf("DELETE rate_limits: %+v", got)
	}

	// A denied subject is answered from the local deny cache; a reset makes
	// the cache forget it.
	const hot = "rawval-hot-user"
	h.hits("user", hot, 7, 5)
	h.decode("DELETE", "/v1/counters?domain=app&descriptor=user="+hot, "", &got)
	if code := h.hit("user", hot); code != rlsv3.RateLimitResponse_OK {
		t.Fatalf("after a reset the subject is still denied: %v", code)
	}

	// A policy-wide reset.
	for i := range 4 {
		h.hit("user", fmt.Sprintf("rawval-many-%d", i))
	}
	var pr policyResetAnswer
	h.decode("DELETE", "/v1/counters?policy="+first.Descriptors[0].PolicyID, "", &pr)
	if !pr.Complete || pr.Deleted != 6 || pr.Scanned < 6 || pr.Skipped != 0 {
		t.Fatalf("policy reset: %+v, want 6 states deleted (4 users, %q, %q)", pr, user, hot)
	}
	var logged bool
	for _, e := range h.logs.FilterMessage("admin call").All() {
		if m := e.ContextMap(); m["action"] == "counters-reset" && m["complete"] != nil {
			logged = m["deleted"] == int64(6) && m["skipped"] == int64(0)
		}
	}
	if !logged {
		t.Fatal("the policy reset's log line has not deleted 6, skipped 0")
	}
	h.decode("GET", "/v1/counters?domain=app&descriptor=user=rawval-many-0", "", &got)
	if *got.Limits[0].Remaining != 5 {
		t.Fatalf("after the policy reset: %+v", got.Limits[0])
	}
	h.decode("GET", "/v1/counters?domain=app&descriptor=tenant=rawval-tenant", "", &got)
	if *got.Limits[0].Remaining != 10 {
		t.Fatalf("another policy: %+v", got.Limits[0])
	}
	if code, body := h.do("DELETE", "/v1/counters?policy=app/nope", ""); code != http.StatusNotFound {
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
		code, body := h.do(tc.method, tc.path, tc.body)
		if code != tc.code || !strings.Contains(body, tc.want) {
			t.Fatalf("%s %s: %d %s; want %d with %q", tc.method, tc.path, code, body, tc.code, tc.want)
		}
	}
	var unknown ExplainAnswer
	h.decode("POST", "/v1/explain", strings.Replace(explainBody("user", user), `"app"`, `"elsewhere"`, 1), &unknown)
	if d := unknown.Descriptors[0]; d.Matched || d.Reason != "no rules for this domain" || len(d.Limits) != 0 {
		t.Fatalf("unknown domain: %+v", d)
	}

	// Auth: no token, a wrong one.
	for _, tok := range []string{"", "wrong-token-0123456789"} {
		h.token = tok
		if code, _ := h.do("POST", "/v1/explain", explainBody("user", user)); code != http.StatusUnauthorized {
			t.Fatalf("token %q: %d, want 401", tok, code)
		}
		if code, _ := h.do("DELETE", "/v1/counters?policy="+first.Descriptors[0].PolicyID, ""); code != http.StatusUnauthorized {
			t.Fatalf("token %q: DELETE %d, want 401", tok, code)
		}
	}

	// Privacy: no raw value in any answer or log line.
	h.noRawValue("rawval-")
	if !h.logged("counters-reset") {
		t.Fatal("the reset is not in the admin log")
	}
}

func TestExplainAndCounters(t *testing.T) {
	onEveryStore(t, checkExplainAndCounters)
}

// TestAPIOffWithoutTokens: without a token file the /v1 endpoints and the
// console do not exist: 404, with the hint of how to turn them on rather
// than a bare "404 page not found".
func TestAPIOffWithoutTokens(t *testing.T) {
	h := newHarness(t, withoutAuth)
	for _, m := range []string{"POST /v1/explain", "GET /v1/counters?domain=app&descriptor=user=x", "DELETE /v1/counters?policy=x",
		"GET /v1/top", "GET /v1/usage", "GET /v1/stats", "GET /v1/denials", "GET /ui", "GET /ui/console.js", "GET /v1/nothing"} {
		method, path, _ := strings.Cut(m, " ")
		code, body := h.do(method, path, explainBody("user", "x"))
		if code != http.StatusNotFound || !strings.Contains(body, "are off: start envoy-rls with --admin-token-file FILE") || !strings.Contains(body, "admin.token.existingSecret") {
			t.Fatalf("%s without a token file: %d %q, want 404 with the hint", m, code, body)
		}
	}
}

// TestExplainBlocked: a subject over a penalty policy's limit is blocked,
// and explain says so with the block's remaining time, without consuming.
func TestExplainBlocked(t *testing.T) {
	onEveryStore(t, checkExplainBlocked, withRules("testdata/penalty.yaml"))
}

func checkExplainBlocked(t *testing.T, h *harness) {
	const raw = "rawval-login-3"
	explain := func() LimitDoc {
		var ans ExplainAnswer
		h.decode("POST", "/v1/explain", explainBody("login", raw), &ans)
		if len(ans.Descriptors) != 1 || len(ans.Descriptors[0].Limits) != 1 {
			t.Fatalf("explain: %+v", ans)
		}
		return ans.Descriptors[0].Limits[0]
	}
	if l := explain(); l.Blocked == nil || *l.Blocked || l.BlockedMs != nil {
		t.Fatalf("before any hit: blocked %v %v, want false and no time", l.Blocked, l.BlockedMs)
	}
	h.hits("login", raw, 3, 2)
	for range 2 { // explain consumes nothing: the same answer twice
		l := explain()
		if l.Blocked == nil || !*l.Blocked || l.BlockedMs == nil || *l.BlockedMs <= 9*60*1000 || *l.BlockedMs > 10*60*1000 || *l.Allowed {
			t.Fatalf("after the offence: blocked %v for %v ms, allowed %v; want blocked for about 10m", deref(l.Blocked), deref(l.BlockedMs), deref(l.Allowed))
		}
	}
	h.noRawValue(raw)
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// TestExplainReserve: a reserving limit shows its reserve settings, and
// its remaining counts the live reservations, split into reserved (held
// by live reservations) and charged; a settle gives back what the
// reservation held beyond the usage. Reservations are held by the memory
// store.
func TestExplainReserve(t *testing.T) {
	h := newHarness(t, withRules("testdata/reserve.yaml"))
	const raw = "rawval-tenant-r"
	limit := func(key string) LimitDoc {
		t.Helper()
		var ans ExplainAnswer
		h.decode("POST", "/v1/explain", explainBody(key, raw), &ans)
		if len(ans.Descriptors) != 1 || len(ans.Descriptors[0].Limits) != 1 {
			t.Fatalf("explain %s: %+v", key, ans)
		}
		return ans.Descriptors[0].Limits[0]
	}
	if l := limit("job"); l.Reserve == nil || *l.Reserve != (reserveDoc{TTL: "1m30s", Estimate: 30}) {
		t.Fatalf("job: reserve %+v, want ttl 1m30s estimate 30", l.Reserve)
	}
	if l := limit("tenant"); l.Reserve == nil || *l.Reserve != (reserveDoc{TTL: "10m0s"}) || deref(l.Remaining) != int64(100) {
		t.Fatalf("tenant before a reserve: reserve %+v remaining %v, want ttl 10m0s estimate 0, 100", l.Reserve, deref(l.Remaining))
	}
	marker := h.reserve("tenant", raw, 40, "")
	if marker == "" {
		t.Fatal("the reserve of 40 was not answered with a marker")
	}
	var got countersAnswer
	h.decode("GET", "/v1/counters?domain=app&descriptor=tenant="+raw, "", &got)
	if len(got.Limits) != 1 || deref(got.Limits[0].Remaining) != int64(60) || got.Limits[0].Reserve == nil ||
		deref(got.Limits[0].Reserved) != int64(40) || deref(got.Limits[0].Charged) != int64(0) {
		t.Fatalf("counters after reserving 40: %+v, want remaining 60, 40 reserved, 0 charged and the reserve", got.Limits)
	}
	h.reserve("tenant", raw, 25, marker)
	if l := limit("tenant"); deref(l.Remaining) != int64(75) || deref(l.Reserved) != int64(0) || deref(l.Charged) != int64(25) {
		t.Fatalf("after settling 25 of 40: remaining %v reserved %v charged %v, want 75, 0, 25", deref(l.Remaining), deref(l.Reserved), deref(l.Charged))
	}
	// allowed asks whether one more reservation of the estimate fits.
	for range 3 {
		h.reserve("job", raw, 1, "")
	}
	if l := limit("job"); deref(l.Remaining) != int64(10) || deref(l.Allowed) != false {
		t.Fatalf("job after 3 reserves of 30: remaining %v allowed %v, want 10 and false", deref(l.Remaining), deref(l.Allowed))
	}
	// /v1/usage: what the reserves held against what the settles used.
	var usage usageAnswer
	h.decode("GET", "/v1/usage?policy=app/tenant", "", &usage)
	if len(usage.Policies) != 1 || deref(usage.Policies[0].Reserved) != int64(40) || deref(usage.Policies[0].Used) != int64(25) {
		t.Fatalf("usage %+v: want 40 reserved, 25 used", usage.Policies)
	}
	h.noRawValue(raw)
}
