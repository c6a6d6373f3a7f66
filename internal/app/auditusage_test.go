package app

import (
	"bufio"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// TestAuditUsageRecordsAndDenials: with --audit-sink file and
// --audit-usage-interval the file gets usage records of the tracked
// policies next to the denial records, and /v1/denials answers the last
// denials, newest first, without any raw value.
func TestAuditUsageRecordsAndDenials(t *testing.T) {
	file := filepath.Join(t.TempDir(), "audit.jsonl")
	r, c := startExplainServerWith(t, explainRules, "memory", nil,
		"--audit-sink", "file", "--audit-file", file, "--audit-usage-interval", "100ms")
	const raw = "rawval-usage-5"
	for i := range 7 {
		want := rlsv3.RateLimitResponse_OK
		if i >= 5 {
			want = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if code := rlsHit(t, r, "user", raw); code != want {
			t.Fatalf("hit %d: %v", i+1, code)
		}
	}
	var ans denialsAnswer
	c.decode("GET", "/v1/denials?n=5", "", &ans)
	if ans.Sink != "file" || len(ans.Denials) != 2 || ans.Kept < 2 || ans.Denials[0].PolicyID != "app/user" || ans.Denials[0].Kind != "denial" || len(ans.Denials[0].SubjectDigest) != 64 {
		t.Fatalf("/v1/denials: %+v", ans)
	}
	if code, text := c.do("GET", "/v1/denials?n=0", ""); code != http.StatusBadRequest || !strings.Contains(text, "n must be an integer from 1 to") {
		t.Fatalf("n=0: %d %s", code, text)
	}
	// The periodic records come; the last one, queued at shutdown, covers
	// the 7 decisions.
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(10 * time.Second); countUsage(t, file) == 0; <-tick.C {
		if time.Now().After(deadline) {
			t.Fatal("no usage record in the audit file within 10 s")
		}
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	usage := lastUsage(t, file)
	u := usage["usage"].(map[string]any)
	if usage["policy_id"] != "app/user" || usage["domain"] != "app" || u["decisions"] != 7.0 || u["denials"] != 2.0 || u["distinct_subjects"] != 1.0 || u["key"] != "user" {
		t.Fatalf("usage record %v", usage)
	}
	b, _ := os.ReadFile(file)
	for _, text := range append(c.bodies, string(b), r.logs.String()) {
		if strings.Contains(text, raw) {
			t.Fatalf("the raw value in %s", text)
		}
	}
}

// usageRecords returns the usage records of the file.
func usageRecords(t *testing.T, file string) []map[string]any {
	f, err := os.Open(file)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && m["kind"] == "usage" {
			out = append(out, m)
		}
	}
	return out
}

func countUsage(t *testing.T, file string) int { return len(usageRecords(t, file)) }

// lastUsage returns the file's last usage record.
func lastUsage(t *testing.T, file string) map[string]any {
	recs := usageRecords(t, file)
	if len(recs) == 0 {
		t.Fatalf("no usage record in %s", file)
	}
	return recs[len(recs)-1]
}

// TestDenialsSinkOff: without --audit-sink /v1/denials says the sink is
// off; without a token it is refused.
func TestDenialsSinkOff(t *testing.T) {
	_, c := startExplainServer(t, "memory", nil)
	var ans denialsAnswer
	c.decode("GET", "/v1/denials", "", &ans)
	if ans.Sink != "off" || ans.Denials == nil || len(ans.Denials) != 0 {
		t.Fatalf("/v1/denials without a sink: %+v", ans)
	}
	c.token = ""
	if code, _ := c.do("GET", "/v1/denials", ""); code != http.StatusUnauthorized {
		t.Fatalf("without a token: %d, want 401", code)
	}
}
