package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/internal/binarytest"
	"github.com/envoy-rls/envoy-rls/internal/deploytest"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
)

// TestSecretRecipe runs docs/cli.md's recipe for replicas sharing one
// Redis, /etc/envoy-rls/ moved to a temporary directory and redis:6379 to a
// real Redis: the secret command, run by bash under the usual umask 022,
// writes a file only its owner can read, and serve starts with the
// command's flags on it. The same file made readable by others (0644)
// stops serve with one line saying to chmod it.
func TestSecretRecipe(t *testing.T) {
	binary(t)
	cmds := deploytest.MarkdownCommands(t, filepath.Join(binarytest.ModuleRoot(t), "docs", "cli.md"))
	i := slices.IndexFunc(cmds, func(c deploytest.DocCommand) bool {
		return strings.Contains(c.Text, "/dev/urandom") && strings.Contains(c.Text, "/etc/envoy-rls/hmac-secret")
	})
	if i < 0 || i+1 == len(cmds) || !slices.Equal(cmds[i+1].Words[:2], []string{"envoy-rls", "serve"}) {
		t.Fatal("docs/cli.md: no secret recipe followed by an envoy-rls serve command")
	}
	dir := t.TempDir()
	local := func(s string) string { return strings.ReplaceAll(s, "/etc/envoy-rls/", dir+"/") }
	if out, err := exec.Command("bash", "-c", "umask 022; "+local(cmds[i].Text)).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cmds[i], err, out)
	}
	secret := filepath.Join(dir, "hmac-secret")
	fi, err := os.Stat(secret)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 || fi.Size() < 32 {
		t.Fatalf("%s: wrote mode %04o, %d bytes; want 0600 and at least 32 bytes", cmds[i], fi.Mode().Perm(), fi.Size())
	}

	redis := redistest.Standalone(t)
	cfg := replicaConfig{Rules: filepath.Join(dir, "rules")}
	if err := os.Mkdir(cfg.Rules, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, cfg.Rules, "rules.yaml", hourlyRules(5, "user"))
	serve := cmds[i+1]
	for j := 2; j+1 < len(serve.Words); j += 2 {
		v := local(serve.Words[j+1])
		switch serve.Words[j] {
		case "--config":
			if v != cfg.Rules {
				t.Fatalf("%s: --config %s, want the rules beside the secret", serve, v)
			}
		case "--store":
			cfg.Store = v
		case "--redis-addr":
			cfg.RedisAddr = redis.Addr()
		case "--hmac-secret-file":
			cfg.Secret = v
		default:
			t.Fatalf("%s: flag %s: this test does not know it", serve, serve.Words[j])
		}
	}
	if cfg.Store != "redis" || cfg.RedisAddr == "" || cfg.Secret != secret {
		t.Fatalf("%s: want --store redis, --redis-addr and --hmac-secret-file %s", serve, secret)
	}
	startReplica(t, "secret-recipe", cfg).cleanup()

	if err := os.Chmod(secret, 0o644); err != nil {
		t.Fatal(err)
	}
	res := runCommand(t, nil, "serve", "--config", cfg.Rules, "--store", "redis", "--redis-addr", cfg.RedisAddr,
		"--hmac-secret-file", secret, "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0")
	want := `envoy-rls: --hmac-secret-file="` + secret + `": must be a readable file holding the secret: mode 0644 lets group or others use it: chmod 600 ` + secret
	if lines := res.errorLines(); res.code != 1 || len(lines) != 1 || lines[0] != want {
		t.Fatalf("serve with a 0644 secret file: exit %d\n%s\nwant exit 1 and the one line\n%s", res.code, res.stderr, want)
	}
}

// docTool returns the path of a command-line tool the docs' recipes use,
// skipping the test without it, failing it with CI=true
// (scripts/ensure-deps.sh installs it).
func docTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is not on PATH and CI=true: run scripts/ensure-deps.sh", name)
	}
	t.Skipf("%s is not on PATH (scripts/ensure-deps.sh installs it)", name)
	return ""
}

// docBlock returns the lines of the first sh block of docs/name that holds
// a line containing marker.
func docBlock(t *testing.T, name, marker string) []string {
	t.Helper()
	path := filepath.Join(binarytest.ModuleRoot(t), "docs", name)
	for _, b := range deploytest.MarkdownBlocks(t, path, "sh") {
		for _, l := range b.Lines {
			if strings.Contains(l, marker) {
				return b.Lines
			}
		}
	}
	t.Fatalf("docs/%s: no sh block with %q", name, marker)
	return nil
}

// bash runs script with bash, as a user pastes it (no pipefail: the
// sizing's head ends its pipe early), and returns its standard output,
// trimmed.
func bash(t *testing.T, script string) string {
	t.Helper()
	cmd := exec.Command("bash", "-c", script)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", script, err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// TestOperationsRedisRecipes runs the Redis recipes of docs/runbook.md and
// docs/deploy.md on a state the binary wrote on a real Redis: the runbook's reading of a
// subject's state (found by the log's 8 hex digits: a string of 33 bytes,
// with its TTL, its algorithm byte and numbers as the runbook explains
// them), and the sizing's measurement, whose figures must be within 20 %
// of those the sizing states (MEMORY USAGE per key, and used_memory per
// key over 5,000 keys), and INFO keyspace counts every key with its TTL.
func TestOperationsRedisRecipes(t *testing.T) {
	docTool(t, "redis-cli")
	redis, cfg := withStandaloneRedis(t, redistest.Local()) // its keys are the test's alone
	cfg.Rules, cfg.Secret = rulesDir(t, hourlyRules(1000, "remote_address")), secretFile(t)
	r := startReplica(t, "redis-recipes", cfg)
	host, port, err := net.SplitHostPort(redis.Addr())
	if err != nil {
		t.Fatal(err)
	}
	cli := "redis-cli -h " + host + " -p " + port + " "

	before := time.Now().UnixMilli()
	r.mustCall(t, entry{"remote_address", "198.51.100.7"})
	after := time.Now().UnixMilli()
	out := strings.Fields(runOK(t, nil, "digest", "--config", cfg.Rules, "--hmac-secret-file", cfg.Secret,
		"--domain", domain, "--descriptor", "remote_address=198.51.100.7"))
	if len(out) != 3 {
		t.Fatalf("digest printed %q, want digest, policy and key", out)
	}
	subject, key := out[0][:8], out[2]

	var got []string
	for _, l := range docBlock(t, "runbook.md", "redis-cli --scan --pattern 'rate:{9df14658*'") {
		l = strings.NewReplacer("9df14658", subject, "KEY", key, "redis-cli ", cli).Replace(strings.TrimSpace(l))
		got = append(got, bash(t, l))
	}
	if len(got) != 6 || got[0] != key || got[1] != "string" || got[2] != "33" || got[4] != "1" {
		t.Fatalf("the runbook's reading of %s: %q, want the key, string, 33, a TTL, algorithm 1 and the numbers", key, got)
	}
	if ttl, err := strconv.ParseInt(got[3], 10, 64); err != nil || ttl <= 0 || ttl > 3_601_000 {
		t.Errorf("PTTL %q: want up to the hour's end plus the 1 s grace", got[3])
	}
	var nums []int64
	for _, f := range strings.Fields(got[5]) {
		v, err := strconv.ParseFloat(f, 64)
		if err != nil || v != float64(int64(v)) {
			t.Fatalf("od printed %q: want four integers", got[5])
		}
		nums = append(nums, int64(v))
	}
	if len(nums) != 4 || nums[0] < before-1000 || nums[0] > after+1000 || nums[1] != nums[0]/3_600_000 || nums[2] != 1 || nums[3] != 0 {
		t.Errorf("last, epoch, level, carry = %v: want the call's time (%d–%d ms), its hour's number, 1 consumed, 0", nums, before, after)
	}

	// Sizing: 5,000 more subjects, one key each.
	usedMemory := func() int64 {
		m := regexp.MustCompile(`(?m)^used_memory:(\d+)\r?$`).FindStringSubmatch(fmt.Sprint(redis.MustDo("INFO", "memory")))
		n, err := strconv.ParseInt(m[1], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	const subjects = 5000
	mem0 := usedMemory()
	var wg sync.WaitGroup
	var failed atomic.Int64
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < subjects; i += 16 {
				if !r.call(callTimeout, 1, entry{"remote_address", fmt.Sprintf("10.0.%d.%d", i/256, i%256)}).ok() {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.Fatalf("%d of %d calls not answered OK", failed.Load(), subjects)
	}
	keys := redis.MustDo("DBSIZE").(int64)
	if keys != subjects+1 {
		t.Fatalf("%d keys, want %d", keys, subjects+1)
	}
	perKey := float64(usedMemory()-mem0) / subjects

	doc, err := os.ReadFile(filepath.Join(binarytest.ModuleRoot(t), "docs", "deploy.md"))
	if err != nil {
		t.Fatal(err)
	}
	usage := regexp.MustCompile(`\*\*(\d+)\s+bytes\*\* per key for every algorithm`).FindSubmatch(doc)
	amortised := regexp.MustCompile(`\*\*(\d+)–(\d+)\s+bytes\s+per\s+key\*\*`).FindSubmatch(doc)
	if usage == nil || amortised == nil {
		t.Fatal("docs/deploy.md: the sizing states no MEMORY USAGE per key or no used_memory per key")
	}
	within := func(v float64, lo, hi []byte) bool {
		l, _ := strconv.ParseFloat(string(lo), 64)
		h, _ := strconv.ParseFloat(string(hi), 64)
		return v >= 0.8*l && v <= 1.2*h
	}
	sizing := docBlock(t, "deploy.md", "MEMORY USAGE")
	if len(sizing) != 3 || !strings.HasPrefix(sizing[2], "redis-cli INFO keyspace") {
		t.Fatalf("docs/deploy.md's sizing block: %q: want the MEMORY USAGE pipe and INFO keyspace", sizing)
	}
	measure := bash(t, strings.ReplaceAll(strings.Join(sizing[:2], "\n"), "redis-cli", strings.TrimSpace(cli)))
	keyspace := bash(t, strings.ReplaceAll(sizing[2], "redis-cli", strings.TrimSpace(cli)))
	if want := fmt.Sprintf("db0:keys=%d,expires=%d,avg_ttl=", keys, keys); !strings.Contains(keyspace, want) {
		t.Errorf("INFO keyspace: %q, want %s… (every key with a TTL)", keyspace, want)
	}
	for _, l := range strings.Split(measure, "\n") {
		f := strings.Fields(l)
		if len(f) != 2 || !within(mustFloat(t, f[1]), usage[1], usage[1]) {
			t.Errorf("MEMORY USAGE per key (count, bytes): %q; the sizing says %s bytes", l, usage[1])
		}
	}
	if !within(perKey, amortised[1], amortised[2]) {
		t.Errorf("used_memory grew %.0f bytes per key over %d keys; the sizing says %s–%s", perKey, subjects, amortised[1], amortised[2])
	}
	t.Logf("MEMORY USAGE: %s; used_memory per key over %d keys: %.0f bytes", strings.ReplaceAll(measure, "\n", "; "), subjects, perKey)
}

func mustFloat(t *testing.T, s string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestRunbookConfigQuery runs the /config query of docs/runbook.md against the real binary, with the policy ID a 429's
// body names for a rule with a value (no name): with the admin token the
// query finds that rule, its file and line. Without --admin-token-file
// /config lists that policy as hmac:…, and `envoy-rls validate`, which the
// runbook points to instead, prints it in clear.
func TestRunbookConfigQuery(t *testing.T) {
	docTool(t, "curl")
	docTool(t, "jq")
	rules := rulesDir(t, "domain: "+domain+"\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: hour, requests_per_unit: 5}\n"+
		"  - key: remote_address\n    value: 198.51.100.66\n    rate_limit: {unit: second, requests_per_unit: 0}\n")
	query := strings.Join(docBlock(t, "runbook.md", "/config |"), "\n")
	for _, tokens := range []bool{true, false} {
		cfg := replicaConfig{Rules: rules}
		if tokens {
			cfg.Args = []string{"--admin-token-file", tokenFile(t)}
		}
		r := startReplica(t, "runbook", cfg)
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		resp, err := r.rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "198.51.100.66"}}}}})
		cancel()
		var body struct{ Policy string }
		if err != nil || json.Unmarshal(resp.GetRawBody(), &body) != nil || body.Policy != domain+"/remote_address:198.51.100.66" {
			t.Fatalf("the zero limit's answer: %v, %v: want a 429 body naming %s/remote_address:198.51.100.66", resp, err, domain)
		}
		out := bash(t, strings.NewReplacer("$TOKEN", adminToken, "POD:8080", r.adminAddr,
			"edge/remote_address:198.51.100.66", body.Policy).Replace(query))
		var rule struct {
			PolicyID string `json:"policy_id"`
			Source   string `json:"source"`
		}
		switch {
		case tokens && (json.Unmarshal([]byte(out), &rule) != nil || rule.PolicyID != body.Policy || rule.Source != filepath.Join(rules, "rules.yaml")+":5"):
			t.Errorf("the runbook's query with the token printed %q: want the rule of %s at rules.yaml:5", out, body.Policy)
		case !tokens && out != "":
			t.Errorf("the runbook's query without a token file printed %q: want nothing (the ID is listed as hmac:…)", out)
		}
		r.cleanup()
	}
	if out := runOK(t, nil, "validate", "--config", rules); !strings.Contains(out, "policy "+domain+"/remote_address:198.51.100.66:") {
		t.Errorf("envoy-rls validate does not list the policy ID in clear:\n%s", out)
	}
}
