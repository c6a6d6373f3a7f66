package e2e_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/pkg/limiter/redis"
)

const auditRules = `domain: e2e
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: trial
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
`

// auditCalls sends, with a request id descriptor each: three calls for one
// user (limit 2: the third is denied) and two for a shadow rule (limit 1:
// the second is a shadow denial, answered OK). It returns the raw values
// used, which no event may carry.
func auditCalls(t *testing.T, r *replica) (user, trial string) {
	t.Helper()
	user, trial = unique("SECRET-user"), unique("SECRET-trial")
	send := func(i int, key, value string, wantOK bool) {
		req := &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: key, Value: value}}},
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "request_id", Value: fmt.Sprintf("rid-%s-%d", key, i)}}},
		}}
		res := r.send(callTimeout, req)
		if res.Err != nil || res.ok() != wantOK {
			t.Fatalf("%s call %d: %v, want ok=%v", key, i, res, wantOK)
		}
	}
	for i, ok := range []bool{true, true, false} {
		send(i, "user", user, ok)
	}
	for i := range 2 {
		send(i, "trial", trial, true)
	}
	return user, trial
}

// checkAuditEvents checks the two events of auditCalls, as field maps.
func checkAuditEvents(t *testing.T, events []map[string]string, raws ...string) {
	t.Helper()
	if len(events) != 2 {
		t.Fatalf("%d events, want 2: %v", len(events), events)
	}
	over, shadow := events[0], events[1]
	if over["policy_id"] != "e2e/user" || over["shadow"] != "false" || over["outcome"] != "over_limit" ||
		over["request_id"] != "rid-user-2" || over["cost"] != "1" || over["limit"] != "2" || over["remaining"] != "0" || over["domain"] != "e2e" {
		t.Errorf("denial event %v", over)
	}
	if shadow["policy_id"] != "e2e/trial" || shadow["shadow"] != "true" || shadow["request_id"] != "rid-trial-1" {
		t.Errorf("shadow event %v", shadow)
	}
	for _, e := range events {
		if len(e["subject_digest"]) != 64 || e["time"] == "" || e["retry_after_ms"] == "" || e["retry_after_ms"] == "0" {
			t.Errorf("event %v", e)
		}
		for k, v := range e {
			for _, raw := range raws {
				if strings.Contains(k, raw) || strings.Contains(v, raw) {
					t.Errorf("event field %s=%s carries the raw value %s", k, v, raw)
				}
			}
		}
	}
}

// TestAuditStreamRedis: the binary with --audit-sink redis writes one
// stream entry per denial (shadow ones flagged), with the request id of
// the request_id descriptor and no raw value, whichever the limit store.
// The events are read with XRANGE after a SIGTERM, whose drain writes
// what is queued.
func TestAuditStreamRedis(t *testing.T) {
	srv, redisCfg := withStandaloneRedis(t)
	rules := rulesDir(t, auditRules)
	for _, store := range []string{"redis", "memory"} {
		t.Run(store, func(t *testing.T) {
			key := unique("e2e:audit:" + store)
			cfg := redisCfg
			cfg.Rules, cfg.Secret = rules, secretFile(t)
			if store == "memory" {
				cfg.Store = "" // the audit stream still goes to --redis-addr
			}
			cfg.Args = []string{"--audit-sink", "redis", "--audit-redis-stream", key, "--audit-redis-maxlen", "1000", "--audit-request-id-key", "request_id"}
			r := startReplica(t, "audit-"+store, cfg)
			user, trial := auditCalls(t, r)
			if err := r.stop(); err != nil {
				t.Fatal(err)
			}
			c, err := redis.NewClient(redis.Config{Addrs: []string{srv.Addr()}, Mode: redis.ModeStandalone})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
			defer cancel()
			entries, err := c.Do(ctx, c.B().Xrange().Key(key).Start("-").End("+").Build()).AsXRange()
			if err != nil {
				t.Fatalf("XRANGE %s: %v", key, err)
			}
			var events []map[string]string
			for _, e := range entries {
				events = append(events, e.FieldValues)
			}
			checkAuditEvents(t, events, user, trial)
		})
	}
}

// TestAuditFile: --audit-sink file appends JSON lines that parse, one per
// denial, with no raw value.
func TestAuditFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	r := startReplica(t, "audit-file", replicaConfig{Rules: rulesDir(t, auditRules), Secret: secretFile(t),
		Args: []string{"--audit-sink", "file", "--audit-file", path, "--audit-request-id-key", "request_id"}})
	user, trial := auditCalls(t, r)
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var events []map[string]string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		e := map[string]string{}
		for k, v := range m {
			e[k] = fmt.Sprint(v)
		}
		events = append(events, e)
	}
	checkAuditEvents(t, events, user, trial)
}
