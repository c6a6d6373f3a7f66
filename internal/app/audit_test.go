package app

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/envoy-rls/envoy-rls/internal/rlstest"
)

// TestServeAuditStdout: --audit-sink stdout writes one JSON line per
// denial, with the x-request-id metadata, no raw value, and counts it.
func TestServeAuditStdout(t *testing.T) {
	rules := writeRules(t, t.TempDir(), testRules)
	out := &syncBuffer{}
	r := startServe(t, []string{"--config", rules, "--audit-sink", "stdout"}, nil, hooks{stdout: out})
	const raw = "raw-subject-4f1c"
	for range 4 {
		r.check(t, raw, "x-request-id", "req-77")
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	if strings.Contains(text, raw) {
		t.Fatalf("the audit stream carries the raw value:\n%s", text)
	}
	events, bad := jsonLines(text)
	if len(bad) != 0 {
		t.Fatalf("lines that are not JSON objects: %q", bad)
	}
	if len(events) != 2 {
		t.Fatalf("%d events, want 2 (calls 3 and 4):\n%s", len(events), text)
	}
	if e := events[0]; e["policy_id"] != "app/user" || e["request_id"] != "req-77" || e["outcome"] != "over_limit" || e["shadow"] != false || len(e["subject_digest"].(string)) != 64 {
		t.Errorf("event %v", e)
	}
}

// An audit file that cannot be opened stops serve, naming the flag.
func TestServeAuditFileError(t *testing.T) {
	rules := writeRules(t, t.TempDir(), testRules)
	err := Run(context.Background(), []string{"serve", "--config", rules, "--audit-sink", "file", "--audit-file", "/nonexistent/dir/audit.jsonl",
		"--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"}, noEnv, io.Discard, io.Discard)
	want := `--audit-file="/nonexistent/dir/audit.jsonl": must be a file this process can append to: open /nonexistent/dir/audit.jsonl: no such file or directory`
	if err == nil || errors.Is(err, ErrFailed) || err.Error() != want {
		t.Fatalf("err\n%v\nwant\n%s", err, want)
	}
}

// TestAuditUsageRecords: with --audit-sink file and --audit-usage-interval
// the file gets usage records of the tracked policies next to the denial
// records, the last one queued at shutdown, without any raw value.
func TestAuditUsageRecords(t *testing.T) {
	file := filepath.Join(t.TempDir(), "audit.jsonl")
	rules := writeRules(t, t.TempDir(), testRules) // app/user: 2 per minute
	r := startServe(t, []string{"--config", rules, "--audit-sink", "file", "--audit-file", file, "--audit-usage-interval", "100ms"}, nil, hooks{})
	const raw = "rawval-usage-5"
	r.wantCodes(t, raw, allowed, allowed, denied, denied, denied, denied, denied)
	// The periodic records come; the last one, queued at shutdown, covers
	// the 7 decisions.
	waitFor(t, func() bool { return countUsage(t, file) > 0 })
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	usage := lastUsage(t, file)
	u := usage["usage"].(map[string]any)
	if usage["policy_id"] != "app/user" || usage["domain"] != "app" || u["decisions"] != 7.0 || u["denials"] != 5.0 || u["distinct_subjects"] != 1.0 || u["key"] != "user" {
		t.Fatalf("usage record %v", usage)
	}
	b, _ := os.ReadFile(file)
	if !strings.Contains(string(b), `"kind":"denial"`) {
		t.Fatalf("no denial record in the audit file:\n%s", b)
	}
	for _, text := range []string{string(b), r.logs.String()} {
		if strings.Contains(text, raw) {
			t.Fatalf("the raw value in %s", text)
		}
	}
}

// TestAuditUsageRecordReserve: the usage record of a reserving policy
// carries the units its reserves held and the usage its settles reported
// (actual against estimate) next to its hits, the estimate.
func TestAuditUsageRecordReserve(t *testing.T) {
	file := filepath.Join(t.TempDir(), "audit.jsonl")
	rules := writeRules(t, t.TempDir(), `domain: ai
descriptors:
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 1000, reserve: {ttl: 10m}}
`)
	r := startServe(t, []string{"--config", rules, "--audit-sink", "file", "--audit-file", file, "--audit-usage-interval", "1h"}, nil, hooks{})
	call := func(hits uint64, kv ...string) string {
		d := rlstest.Desc(kv...)
		d.HitsAddend = wrapperspb.UInt64(hits)
		return rlstest.Call(t, r.client, rlstest.Request("ai", d)).GetDynamicMetadata().GetFields()["lease"].GetStringValue()
	}
	m := call(400, "tenant", "rawval-tenant-9")
	call(300, "tenant", "rawval-tenant-9")
	call(250, "tenant", "rawval-tenant-9", "lease", m)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	u := lastUsage(t, file)["usage"].(map[string]any)
	if u["hits"] != 700.0 || u["decisions"] != 2.0 || u["reserved"] != 700.0 || u["used"] != 250.0 {
		t.Fatalf("usage %v: want 700 hits of 2 reserves, 700 reserved, 250 used", u)
	}
}

// jsonLines decodes each line of text as a JSON object; the lines that are
// not one are returned in bad.
func jsonLines(text string) (records []map[string]any, bad []string) {
	for line := range strings.Lines(text) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			bad = append(bad, line)
			continue
		}
		records = append(records, m)
	}
	return records, bad
}

// usageRecords returns the usage records of the file, which is being
// written: an unfinished last line is left out.
func usageRecords(t *testing.T, file string) []map[string]any {
	b, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		t.Fatal(err)
	}
	records, _ := jsonLines(string(b))
	var out []map[string]any
	for _, m := range records {
		if m["kind"] == "usage" {
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
