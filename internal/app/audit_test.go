package app

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
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
	var events []map[string]any
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		events = append(events, m)
	}
	if len(events) != 2 {
		t.Fatalf("%d events, want 2 (calls 3 and 4):\n%s", len(events), text)
	}
	if e := events[0]; e["policy_id"] != "app/user" || e["request_id"] != "req-77" || e["outcome"] != "over_limit" || e["shadow"] != false || len(e["subject_digest"].(string)) != 64 {
		t.Errorf("event %v", e)
	}
}

func TestServeAuditFlagErrors(t *testing.T) {
	rules := writeRules(t, t.TempDir(), testRules)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"sink", []string{"--audit-sink", "kafka"}, `--audit-sink="kafka": must be redis, file, stdout, or empty for no audit sink`},
		{"file without path", []string{"--audit-sink", "file"}, `--audit-file (or ENVOY_RLS_AUDIT_FILE) is not set: must be the file to append to (required with --audit-sink file)`},
		{"redis without address", []string{"--audit-sink", "redis"}, `--audit-sink="redis": the redis audit sink needs --redis-addr`},
		{"sample", []string{"--audit-sample", "0"}, `--audit-sample="0": must be a number greater than 0 and at most 1, such as 0.1`},
		{"policy sample", []string{"--audit-sample-policy", "edge/user=2"}, `--audit-sample-policy="edge/user=2": must be at most 1000 policy_id=share pairs separated by commas, each share greater than 0 and at most 1`},
		{"maxlen", []string{"--audit-redis-maxlen", "0"}, `--audit-redis-maxlen="0": must be an integer between 1 and 100000000`},
		{"queue", []string{"--audit-queue-size", "0"}, `--audit-queue-size="0": must be an integer between 1 and 1000000`},
		{"usage interval", []string{"--audit-usage-interval", "10ms"}, `--audit-usage-interval="10ms": must be 0 (no usage records) or a duration from 100ms to 24h0m0s, such as 5m`},
		{"unwritable file", []string{"--audit-sink", "file", "--audit-file", "/nonexistent/dir/audit.jsonl", "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"},
			`--audit-file="/nonexistent/dir/audit.jsonl": must be a file this process can append to: open /nonexistent/dir/audit.jsonl: no such file or directory`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Run(context.Background(), append([]string{"serve", "--config", rules}, tc.args...), noEnv, io.Discard, io.Discard)
			if err == nil || errors.Is(err, ErrFailed) || err.Error() != tc.want {
				t.Fatalf("err\n%v\nwant\n%s", err, tc.want)
			}
		})
	}
}

func TestParsePolicySamples(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want map[string]float64
		ok   bool
	}{
		{"", nil, true},
		{"edge/user=0.1, edge/ip=1", map[string]float64{"edge/user": 0.1, "edge/ip": 1}, true},
		{"edge/user", nil, false},
		{"=0.5", nil, false},
		{"a=0", nil, false},
		{"a=x", nil, false},
	} {
		got, ok := parsePolicySamples(tc.in)
		if ok != tc.ok || len(got) != len(tc.want) {
			t.Errorf("%q: %v %v, want %v %v", tc.in, got, ok, tc.want, tc.ok)
			continue
		}
		for k, v := range tc.want {
			if got[k] != v {
				t.Errorf("%q: %s=%v, want %v", tc.in, k, got[k], v)
			}
		}
	}
}
