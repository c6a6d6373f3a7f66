package admin

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/pkg/audit"
)

// TestDenials: /v1/denials answers the last denials the audit sink kept,
// newest first, without any raw value, and bounds n.
func TestDenials(t *testing.T) {
	h := newHarness(t, withAudit(auditSink(t, io.Discard)))
	const raw = "rawval-denied-5"
	h.hits("user", raw, 7, 5)
	var ans denialsAnswer
	h.decode("GET", "/v1/denials?n=5", "", &ans)
	if ans.Sink != "file" || len(ans.Denials) != 2 || ans.Kept < 2 || ans.Denials[0].PolicyID != "app/user" || ans.Denials[0].Kind != "denial" || len(ans.Denials[0].SubjectDigest) != 64 {
		t.Fatalf("/v1/denials: %+v", ans)
	}
	if code, text := h.do("GET", "/v1/denials?n=0", ""); code != http.StatusBadRequest || !strings.Contains(text, "n must be an integer from 1 to") {
		t.Fatalf("n=0: %d %s", code, text)
	}
	h.noRawValue(raw)
}

// TestDenialsSinkOff: without an audit sink /v1/denials says the sink is
// off; without a token it is refused.
func TestDenialsSinkOff(t *testing.T) {
	h := newHarness(t)
	var ans denialsAnswer
	h.decode("GET", "/v1/denials", "", &ans)
	if ans.Sink != "off" || ans.Denials == nil || len(ans.Denials) != 0 {
		t.Fatalf("/v1/denials without a sink: %+v", ans)
	}
	h.token = ""
	if code, _ := h.do("GET", "/v1/denials", ""); code != http.StatusUnauthorized {
		t.Fatalf("without a token: %d, want 401", code)
	}
}

// TestDenialsCountAndBound: after six denials kept, kept is six and
// capacity the view's size; n beyond the capacity is 400 as the docs say
// (docs/admin-api.md), with and without a sink.
func TestDenialsCountAndBound(t *testing.T) {
	h := newHarness(t, withAudit(auditSink(t, io.Discard)))
	h.hits("user", "rawval-count", 11, 5) // 5 allowed, 6 denied
	var ans denialsAnswer
	h.decode("GET", "/v1/denials", "", &ans)
	if ans.Kept != 6 || ans.Capacity != audit.DefaultRecentSize || len(ans.Denials) != 6 {
		t.Fatalf("after 6 denials: kept %d, capacity %d, %d denials; want 6, %d, 6", ans.Kept, ans.Capacity, len(ans.Denials), audit.DefaultRecentSize)
	}
	for _, q := range []string{"n=500", "n=0", "n=x"} {
		if code, text := h.do("GET", "/v1/denials?"+q, ""); code != http.StatusBadRequest || !strings.Contains(text, "n must be an integer from 1 to 100") {
			t.Fatalf("%s with a sink: %d %s", q, code, text)
		}
	}
	off := newHarness(t)
	if code, text := off.do("GET", "/v1/denials?n=500", ""); code != http.StatusBadRequest || !strings.Contains(text, "n must be an integer from 1 to 100") {
		t.Fatalf("n=500 without a sink: %d %s", code, text)
	}
}
