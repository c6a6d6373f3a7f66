package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/polltest"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
)

const explainToken = "e2e-explain-token-0123456789"

// explainAnswer is the part of the explain answer the tests read.
type explainAnswer struct {
	Descriptors []struct {
		Matched       bool   `json:"matched"`
		PolicyID      string `json:"policy_id"`
		SubjectDigest string `json:"subject_digest"`
		Rule          struct {
			File string `json:"file"`
			Line int    `json:"line"`
		} `json:"rule"`
		Limits []struct {
			Remaining *int64 `json:"remaining"`
			ResetMs   *int64 `json:"reset_ms"`
		} `json:"limits"`
	} `json:"descriptors"`
}

// runCLI runs the binary with args and env; it must exit 0 within 20 s.
func runCLI(t *testing.T, env []string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(t), args...)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("envoy-rls %s: %v\nstderr:\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}

// TestExplainDigestAndReset, on each store: `envoy-rls explain --admin`
// shows the state left after N hits and consumes nothing; `envoy-rls
// digest` prints the digest the explain answer, the denial log and (Redis)
// the stored key carry; `explain --config` answers offline; DELETE
// /v1/counters resets the subject.
func TestExplainDigestAndReset(t *testing.T) {
	for _, store := range []string{"memory", "redis"} {
		t.Run(store, func(t *testing.T) {
			rules := rulesDir(t, "domain: "+domain+"\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 5}\n")
			secret := secretFile(t)
			dir := t.TempDir()
			tokens := writeFile(t, dir, "tokens", "ops:"+explainToken+"\n")
			cfg := replicaConfig{Rules: rules, Secret: secret, Args: []string{"--admin-token-file", tokens}}
			var redis *redistest.Server
			if store == "redis" {
				redis, cfg = withStandaloneRedis(t)
				cfg.Rules, cfg.Secret, cfg.Args = rules, secret, []string{"--admin-token-file", tokens}
			}
			r := startReplica(t, store, cfg)
			user := unique("rawval")
			for range 3 {
				if res := r.mustCall(t, entry{"user", user}); !res.ok() {
					t.Fatalf("hit: %v", res)
				}
			}
			explain := func() explainAnswer {
				out := runCLI(t, nil, "explain", "--admin", "http://"+r.adminAddr, "--token-file", tokens, "--domain", domain, "--descriptor", "user="+user)
				var ans explainAnswer
				if err := json.Unmarshal([]byte(out), &ans); err != nil || len(ans.Descriptors) != 1 || len(ans.Descriptors[0].Limits) != 1 {
					t.Fatalf("explain: %v\n%s", err, out)
				}
				if strings.Contains(out, user) {
					t.Fatalf("the raw value in the explain answer:\n%s", out)
				}
				return ans
			}
			for i := range 2 { // the second sees the same: nothing consumed
				d := explain().Descriptors[0]
				if l := d.Limits[0]; !d.Matched || d.Rule.Line != 3 || l.Remaining == nil || *l.Remaining != 2 || *l.ResetMs <= 0 {
					t.Fatalf("explain %d after 3 hits of 5: %+v", i, d)
				}
			}
			digest := explain().Descriptors[0].SubjectDigest

			out := strings.Fields(runCLI(t, nil, "digest", "--config", rules, "--hmac-secret-file", secret, "--domain", domain, "--descriptor", "user="+user))
			if len(out) != 3 || out[0] != digest || out[1] != explain().Descriptors[0].PolicyID || !strings.HasPrefix(out[2], "rate:{"+digest[:16]+"}:state:") {
				t.Fatalf("digest printed %q, explain says %s", out, digest)
			}
			if redis != nil {
				conn, err := redistest.Dial(redis.Addr(), nil, 5*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				if n, err := conn.Do(ctx, "EXISTS", out[2]); err != nil || n != int64(1) {
					t.Fatalf("EXISTS %s: %v %v, want the key digest printed", out[2], n, err)
				}
			}
			// The denial log names the subject by the digest's first 8 hex digits.
			for range 3 {
				r.mustCall(t, entry{"user", user})
			}
			polltest.Eventually(t, 5*time.Second, 50*time.Millisecond, "the denial log line", func() error {
				if !r.log.contains(`"subject":"` + digest[:8] + `"`) {
					return errors.New("not logged yet")
				}
				return nil
			})

			// Offline: the rule without state, the digest with the secret.
			off := runCLI(t, []string{"ENVOY_RLS_HMAC_SECRET_FILE=" + secret}, "explain", "--config", rules, "--domain", domain, "--descriptor", "user="+user)
			var offAns explainAnswer
			if err := json.Unmarshal([]byte(off), &offAns); err != nil || offAns.Descriptors[0].SubjectDigest != digest || offAns.Descriptors[0].Limits[0].Remaining != nil {
				t.Fatalf("offline explain: %v\n%s", err, off)
			}

			// Reset: full again, and the next call is allowed (the local
			// deny cache forgot the denial).
			req, err := http.NewRequest(http.MethodDelete, "http://"+r.adminAddr+"/v1/counters?domain="+domain+"&descriptor=user="+user, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+explainToken)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("DELETE: %d", resp.StatusCode)
			}
			if d := explain().Descriptors[0]; *d.Limits[0].Remaining != 5 {
				t.Fatalf("after the reset: remaining %d, want 5", *d.Limits[0].Remaining)
			}
			if res := r.mustCall(t, entry{"user", user}); !res.ok() {
				t.Fatalf("after the reset: %v", res)
			}
			if r.log.contains(user) {
				t.Fatal("the raw value in the log")
			}
		})
	}
}
