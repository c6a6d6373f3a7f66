package admin

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

func TestTopAndUsage(t *testing.T) {
	onEveryStore(t, testTopAndUsage)
}

// testTopAndUsage sends known traffic and checks /v1/top and /v1/usage:
// values, bounds, auth and that no raw descriptor value appears.
func testTopAndUsage(t *testing.T, h *harness) {
	// rawval-heavy: 7 calls (5 allowed, 2 denied); rawval-light: 1.
	for range 7 {
		h.hit("user", "rawval-heavy")
	}
	h.hit("user", "rawval-light")

	h.token = ""
	if code, _ := h.do("GET", "/v1/top?domain=app&key=user", ""); code != http.StatusUnauthorized {
		t.Fatalf("/v1/top without a token: %d, want 401", code)
	}
	h.token = "wrong-token-0123456789"
	if code, _ := h.do("GET", "/v1/usage", ""); code != http.StatusUnauthorized {
		t.Fatalf("/v1/usage with a wrong token: %d, want 401", code)
	}
	h.token = testToken
	if code, body := h.do("GET", "/v1/top?n=0", ""); code != http.StatusBadRequest {
		t.Fatalf("/v1/top?n=0: %d %s, want 400", code, body)
	}
	if code, body := h.do("GET", "/v1/top?by=size", ""); code != http.StatusBadRequest {
		t.Fatalf("/v1/top?by=size: %d %s, want 400", code, body)
	}

	code, body := h.do("GET", "/v1/top?domain=app&key=user&n=10", "")
	var top topAnswer
	if err := json.Unmarshal([]byte(body), &top); err != nil || code != 200 {
		t.Fatalf("/v1/top: %d %v\n%s", code, err, body)
	}
	if len(top.Top) != 2 || top.Top[0].Hits != 7 || top.Top[0].Denied != 2 || top.Top[1].Hits != 1 || top.Top[1].Denied != 0 ||
		top.Top[0].PolicyID == "" || top.Top[0].Key != "user" || len(top.Top[0].SubjectDigest) != 64 {
		t.Fatalf("/v1/top:\n%s", body)
	}
	_, byDenied := h.do("GET", "/v1/top?policy="+top.Top[0].PolicyID+"&by=denied&n=1", "")
	if !strings.Contains(byDenied, top.Top[0].SubjectDigest) || strings.Contains(byDenied, top.Top[1].SubjectDigest) {
		t.Fatalf("/v1/top by denied, n=1:\n%s", byDenied)
	}
	if _, other := h.do("GET", "/v1/top?domain=app&key=other", ""); !strings.Contains(other, `"top": []`) {
		t.Fatalf("/v1/top of a key with no rule:\n%s", other)
	}

	var usage usageAnswer
	h.decode("GET", "/v1/usage?policy="+top.Top[0].PolicyID, "", &usage)
	if len(usage.Policies) != 1 {
		t.Fatalf("/v1/usage: %+v", usage)
	}
	u := usage.Policies[0]
	if u.Hits != 8 || u.Decisions != 8 || u.Denials != 2 || u.ShadowDenials != 0 || u.DistinctSubjects != 2 || u.Recent.Decisions != 8 {
		t.Fatalf("/v1/usage: %+v", u)
	}
	h.noRawValue("rawval-")
	if !h.logged("top") || !h.logged("usage") {
		t.Fatal("admin calls not logged")
	}
}
