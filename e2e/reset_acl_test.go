package e2e_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/redis"
)

// resetAnswer is the answer of DELETE /v1/counters?policy=….
type resetAnswer struct {
	PolicyID string `json:"policy_id"`
	Scanned  int    `json:"scanned"`
	Deleted  int    `json:"deleted"`
	Skipped  int    `json:"skipped"`
	Complete bool   `json:"complete"`
}

// adminLong is adminDo with the admin token and a bound of timeout, for
// calls that may take longer than a second (a policy reset).
func (r *replica) adminLong(t *testing.T, method, path string, timeout time.Duration) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, "http://"+r.adminAddr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("e2e: %s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		t.Fatalf("e2e: %s %s: %v", method, path, err)
	}
	return resp.StatusCode, string(b)
}

// resetPolicy resets every state of policy and decodes the answer, which
// must be 200.
func (r *replica) resetPolicy(t *testing.T, policy string) resetAnswer {
	t.Helper()
	code, body := r.adminLong(t, http.MethodDelete, "/v1/counters?policy="+policy+"&max_states=1000000&timeout=30s", 40*time.Second)
	var ans resetAnswer
	if code != http.StatusOK || json.Unmarshal([]byte(body), &ans) != nil {
		t.Fatalf("DELETE /v1/counters?policy=%s: %d %s", policy, code, body)
	}
	return ans
}

// spend makes one call per value of key, 64 descriptors a request, each
// of which must be answered.
func (r *replica) spend(t *testing.T, key string, values []string) {
	t.Helper()
	for start := 0; start < len(values); start += 64 {
		var es []entry
		for _, v := range values[start:min(start+64, len(values))] {
			es = append(es, entry{key, v})
		}
		if res := r.callMany(callTimeout, 1, es...); res.Err != nil {
			t.Fatalf("e2e: %s: %v", r.name, res.Err)
		}
	}
}

// stateKeys returns the state keys of policy (at revision 1) on srv (read
// with the default user: SCAN for the keys that name the policy,
// redis.PolicyKeys).
func stateKeys(t *testing.T, srv *redistest.Server, policy string) []string {
	t.Helper()
	var keys []string
	for cursor := "0"; ; {
		a := srv.MustDo("SCAN", cursor, "MATCH", redis.PolicyKeys(policy, 1), "COUNT", "1000").([]any)
		for _, k := range a[1].([]any) {
			keys = append(keys, k.(string))
		}
		if cursor = a[0].(string); cursor == "0" {
			return keys
		}
	}
}

// TestPolicyResetSkipsForeignKey: keys named like state keys that are no
// states (another program's, in Redis's `rate:` namespace: a string, a
// list named exactly as the policy's states are, a string under the
// policy's part with a suffix of no hex digits, a hash of the previous
// layout's name without its fields) among thousands of states of a
// policy: the policy reset on the real binary answers 200, deletes every
// state of the policy, leaves the foreign keys as they were, and says
// skipped: 4, in its answer and its log.
func TestPolicyResetSkipsForeignKey(t *testing.T) {
	redis, cfg := withStandaloneRedis(t, redistest.Local())
	cfg.Rules, cfg.Secret = rulesDir(t, hourlyRules(100, "user", "other")), secretFile(t)
	cfg.Args = []string{"--admin-token-file", tokenFile(t)}
	r := startReplica(t, "reset", cfg)

	const states = 3000
	users := make([]string, states)
	for i := range users {
		users[i] = "user-" + strconv.Itoa(i)
	}
	r.spend(t, "user", users)
	r.spend(t, "other", []string{"a", "b"})
	found := stateKeys(t, redis, domain+"/user")
	if len(found) != states {
		t.Fatalf("%d states of %s/user before the reset, want %d", len(found), domain, states)
	}
	// The foreign keys come after some states in SCAN's order and before
	// others: SCAN walks the table's buckets, and they are 4 of 3,006.
	named := found[0][:len(found[0])-32] // rate:{<tag>}:state:v2:<policy>:
	foreign := [][]string{
		{"SET", "rate:{0123456789abcdef}:state:not-a-state-of-envoy-rls", "another program's value"},
		{"RPUSH", named + strings.Repeat("0", 32), "another program's value"},
		{"SET", named + strings.Repeat("z", 32), "another program's value"},
		{"HSET", "rate:{0123456789abcdef}:state:" + strings.Repeat("0", 64), "field", "another program's value"},
	}
	before := make([]any, len(foreign))
	for i, cmd := range foreign {
		redis.MustDo(cmd...)
		before[i] = redis.MustDo("DUMP", cmd[1])
	}

	ans := r.resetPolicy(t, domain+"/user")
	if want := states + 2 + len(foreign); !ans.Complete || ans.Deleted != states || ans.Skipped != len(foreign) || ans.Scanned != want {
		t.Fatalf("policy reset: %+v; want complete, %d deleted, %d skipped of %d scanned", ans, states, len(foreign), want)
	}
	if left := stateKeys(t, redis, domain+"/user"); len(left) != 2 {
		t.Fatalf("%d keys named for the policy left after the reset, want the two foreign ones: %v", len(left), left[:min(len(left), 3)])
	}
	for i, cmd := range foreign {
		if after := redis.MustDo("DUMP", cmd[1]); after != before[i] {
			t.Fatalf("the foreign key %s after the reset: %q, was %q", cmd[1], after, before[i])
		}
	}
	if got := len(stateKeys(t, redis, domain+"/other")); got != 2 {
		t.Fatalf("another policy's states after the reset: %d, want 2", got)
	}
	if !r.log.contains(`"skipped":4`) {
		t.Fatal("the skipped keys are not in the log")
	}
	// The policy's subjects start afresh.
	if res := r.mustCall(t, entry{"user", users[0]}); !res.ok() {
		t.Fatalf("after the reset: %v", res)
	}
}

// aclLines returns the ACL SETUSER lines of docs/redis.md's "Least
// privilege" section, split into arguments, PASSWORD replaced by password:
// the first one is the user every deployment needs, the others add what
// optional features need.
func aclLines(t *testing.T, password string) [][]string {
	t.Helper()
	lines, err := redistest.DocACL("../docs/redis.md", password)
	if err != nil {
		t.Fatal(err)
	}
	return lines
}

// aclUser runs lines (ACL SETUSER …) on every server, then empties their
// ACL logs.
func aclUser(lines [][]string, servers ...*redistest.Server) {
	for _, s := range servers {
		for _, l := range lines {
			s.MustDo(l...)
		}
		s.MustDo("ACL", "LOG", "RESET")
	}
}

// noACLDenials fails t when a server's ACL log holds an entry (a command or
// key the documented user may not use).
func noACLDenials(t *testing.T, servers ...*redistest.Server) {
	t.Helper()
	for _, s := range servers {
		if l := s.MustDo("ACL", "LOG").([]any); len(l) != 0 {
			t.Errorf("ACL LOG of %s: %d denials, want none: %v", s.Addr(), len(l), l)
		}
	}
}

// aclRules exercise every algorithm, a calendar window, a penalty and a
// shadow rule: every path of the rate program.
const aclRules = `domain: e2e
descriptors:
  - key: fixed
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: sliding
    rate_limit: {unit: hour, requests_per_unit: 2, algorithm: sliding_window}
  - key: bucket
    rate_limit: {unit: hour, requests_per_unit: 2, algorithm: token_bucket}
  - key: gcra
    rate_limit: {unit: hour, requests_per_unit: 2, algorithm: gcra}
  - key: log
    rate_limit: {unit: hour, requests_per_unit: 2, algorithm: sliding_log}
  - key: calendar
    rate_limit: {unit: day, requests_per_unit: 2, calendar: true, time_zone: Europe/Berlin}
  - key: penalty
    rate_limit: {unit: hour, requests_per_unit: 2, penalty: {duration: 10m}}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 2}
`

// exerciseACLUser runs what the admin API and Envoy ask of the store on
// r: three calls of each rule's subject (the third denied, but shadow's),
// one request with every rule, explain, a counters read, a subject reset
// and a policy reset of each rule's policy that deletes its states and
// leaves a list named like them (read and planted on masters with the
// default user).
func exerciseACLUser(t *testing.T, r *replica, masters ...*redistest.Server) {
	t.Helper()
	keys := []string{"fixed", "sliding", "bucket", "gcra", "log", "calendar", "penalty", "shadow"}
	subject := unique("acl")
	for _, k := range keys {
		for i := range 3 {
			res := r.mustCall(t, entry{k, subject})
			if want := i < 2 || k == "shadow"; res.ok() != want {
				t.Fatalf("%s call %d: %v, want ok=%v", k, i+1, res, want)
			}
		}
	}
	var all []entry
	for _, k := range keys {
		all = append(all, entry{k, unique("all")})
	}
	if res := r.callMany(callTimeout, 1, all...); !res.ok() {
		t.Fatalf("one call of every rule: %v", res)
	}
	code, body := r.adminLong(t, http.MethodGet, "/v1/counters?domain=e2e&descriptor=fixed="+subject, 5*time.Second)
	if code != http.StatusOK || !strings.Contains(body, `"remaining": 0`) {
		t.Fatalf("counters read: %d %s", code, body)
	}
	code, body = r.adminLong(t, http.MethodDelete, "/v1/counters?domain=e2e&descriptor=gcra="+subject, 5*time.Second)
	if code != http.StatusOK || !strings.Contains(body, `"states_deleted": 1`) {
		t.Fatalf("subject reset: %d %s", code, body)
	}
	// A policy reset of each rule: the reset program reads and deletes
	// every kind of state (a penalty box, a log, a calendar window) as the
	// user. Beside the fixed window's states, a list named as they are
	// (another program's key, planted with the default user in a state's
	// slot): read, refused as no state, left alone and counted.
	for _, k := range keys {
		if k == "calendar" {
			continue // its policy ID names its calendar; its state is a fixed window's
		}
		policy := "e2e/" + k
		var policyKeys int
		var foreign string
		var foreignAt *redistest.Server
		for _, m := range masters {
			found := stateKeys(t, m, policy)
			policyKeys += len(found)
			if k == "fixed" && foreign == "" && len(found) > 0 {
				foreign, foreignAt = found[0][:len(found[0])-32]+strings.Repeat("0", 32), m
				m.MustDo("RPUSH", foreign, "another program's value")
			}
		}
		wantSkipped := 0
		if foreign != "" {
			wantSkipped = 1
		}
		if ans := r.resetPolicy(t, policy); !ans.Complete || ans.Deleted != policyKeys || ans.Deleted < 1 || ans.Skipped != wantSkipped {
			t.Fatalf("policy reset of %s: %+v, want %d deleted, %d skipped", policy, ans, policyKeys, wantSkipped)
		}
		if foreign != "" {
			if v := foreignAt.MustDo("LRANGE", foreign, "0", "-1").([]any); len(v) != 1 || v[0] != "another program's value" {
				t.Fatalf("the list beside the states after the reset: %v", v)
			}
			foreignAt.MustDo("DEL", foreign)
		}
		for _, m := range masters {
			if left := stateKeys(t, m, policy); len(left) != 0 {
				t.Fatalf("%d states of %s left after the policy reset", len(left), policy)
			}
		}
	}
	if res := r.mustCall(t, entry{"fixed", subject}); !res.ok() {
		t.Fatalf("after the policy reset: %v", res)
	}
	for _, line := range strings.Split(r.log.tail(1<<30), "\n") {
		if strings.Contains(line, "NOPERM") && !strings.Contains(line, msgFunctionsRefused) {
			t.Fatalf("NOPERM in the binary's log: %s", line)
		}
	}
}

// msgFunctionsRefused starts the binary's log line when Redis refuses
// FCALL or FUNCTION LOAD and the store runs the batch program by EVALSHA.
const msgFunctionsRefused = "redis store: Redis functions refused"

// fcallLine is the optional line of the section (aclLines) that allows
// Redis functions.
func fcallLine(t *testing.T, lines [][]string) []string {
	t.Helper()
	l, err := redistest.OptionalACL(lines, "+fcall")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// onlyFunctionLoadDenials fails t when a server's ACL log holds an entry
// other than a refused FUNCTION LOAD (the store's fallback to EVALSHA).
func onlyFunctionLoadDenials(t *testing.T, servers ...*redistest.Server) {
	t.Helper()
	for _, s := range servers {
		for _, e := range s.MustDo("ACL", "LOG").([]any) {
			if d := fmt.Sprint(e); !strings.Contains(d, "function|load") {
				t.Errorf("ACL LOG of %s: %s, want only the refused FUNCTION LOAD", s.Addr(), d)
			}
		}
	}
}

// TestLeastPrivilegeACL starts Redis with exactly the ACL user of
// docs/redis.md ("Least privilege", read from the file) and runs the
// binary as that user: decisions of every algorithm, explain, counters
// read, subject and policy reset, by EVALSHA once FUNCTION LOAD is refused
// (the only denial in ACL LOG, and one log line); then, with the section's
// other lines, by FCALL, with the HMAC secret shared through Redis and the
// audit stream, and on a Cluster with the base and FCALL lines. Redis
// denies nothing there: its ACL LOG stays empty.
func TestLeastPrivilegeACL(t *testing.T) {
	pw := make([]byte, 16)
	_, _ = rand.Read(pw)
	password := hex.EncodeToString(pw)
	lines := aclLines(t, password)
	pwFile := writeFile(t, t.TempDir(), "redis-password", password+"\n")
	userArgs := []string{"--redis-username", "envoy-rls", "--redis-password-file", pwFile, "--admin-token-file", tokenFile(t)}

	t.Run("standalone", func(t *testing.T) {
		redis, cfg := withStandaloneRedis(t, redistest.Local())
		aclUser(lines[:1], redis)
		cfg.RedisMode = "" // auto: the default, which asks the server whether it is a Cluster
		cfg.Rules, cfg.Secret, cfg.Args = rulesDir(t, aclRules), secretFile(t), userArgs
		base := startReplica(t, "acl", cfg)
		exerciseACLUser(t, base, redis)
		// Without the optional FCALL line: FUNCTION LOAD refused, the
		// batch program by EVALSHA, one line in the log.
		onlyFunctionLoadDenials(t, redis)
		if !base.log.contains(msgFunctionsRefused) {
			t.Error("no log line of the fallback to EVALSHA")
		}

		// The optional features (Redis functions among them), with the
		// section's other lines.
		aclUser(lines[1:], redis)
		cfg.Secret = ""
		cfg.Args = append(cfg.Args, "--hmac-secret-redis-key", "envoy-rls:hmac-secret", "--audit-sink", "redis")
		r := startReplica(t, "acl-optional", cfg)
		exerciseACLUser(t, r, redis)
		if r.log.contains(msgFunctionsRefused) {
			t.Error("fell back to EVALSHA with the FCALL line")
		}
		if n := redis.MustDo("EXISTS", "envoy-rls:hmac-secret"); n != int64(1) {
			t.Fatal("no shared secret in Redis")
		}
		if err := r.stop(); err != nil { // the audit sink writes what is queued
			t.Fatal(err)
		}
		if n := redis.MustDo("XLEN", "envoy-rls:audit"); n == int64(0) {
			t.Fatal("no audit event in the stream")
		}
		noACLDenials(t, redis)
	})

	t.Run("cluster", func(t *testing.T) {
		binary(t)
		c := redistest.StartCluster(t)
		aclUser([][]string{lines[0], fcallLine(t, lines)}, c.Nodes...)
		r := startReplica(t, "acl-cluster", replicaConfig{Store: "redis", RedisAddr: strings.Join(c.Addrs(), ","), RedisMode: "cluster",
			Rules: rulesDir(t, aclRules), Secret: secretFile(t), Args: userArgs})
		var masters []*redistest.Server
		for _, n := range c.Nodes {
			if role, err := c.Role(n); err == nil && role == "master" {
				masters = append(masters, n)
			}
		}
		exerciseACLUser(t, r, masters...)
		noACLDenials(t, c.Nodes...)
		if r.log.contains(msgFunctionsRefused) {
			t.Error("fell back to EVALSHA with the FCALL line")
		}
	})
}
