package admin

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/pkg/audit"
)

// TestDenials: /v1/denials answers the last denials the audit sink kept,
// newest first, without any raw value, and bounds n.
func TestDenials(t *testing.T) {
	m, err := audit.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	sink, err := audit.New(audit.Config{Writer: audit.NewJSONLines(io.Discard, false), Metrics: m, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sink.Close(time.Second) })
	h := newHarness(t, func(su *setup) { su.audit = sink })
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
