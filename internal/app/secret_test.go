package app

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/internal/compat"
	"github.com/envoy-rls/envoy-rls/internal/polltest"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
)

const (
	sharedKey = "test:shared-secret"
	// secretRecheck is the tests' recheck of the shared secret.
	secretRecheck = 50 * time.Millisecond
)

// sharedSecretArgs are serve's flags for a secret shared through srv.
func sharedSecretArgs(t *testing.T, srv *redistest.Server) []string {
	return []string{"--config", writeRules(t, t.TempDir(), testRules), "--store", "redis", "--redis-addr", srv.Addr(),
		"--redis-mode", "standalone", "--hmac-secret-redis-key", sharedKey}
}

// awaitChecks waits until the running replicas have checked the key n more
// times: each check announces its secret again under the in-use key, which
// the test deletes before each.
func awaitChecks(t *testing.T, srv *redistest.Server, n int) {
	t.Helper()
	for range n {
		srv.MustDo("DEL", compat.InUseKey(sharedKey))
		waitFor(t, func() bool { return srv.MustDo("EXISTS", compat.InUseKey(sharedKey)) == int64(1) })
	}
}

// TestSharedSecretKeptInRedis: with --hmac-secret-redis-key and no secret,
// the replica stores its secret once (in the checked form), stores it again
// when Redis loses it, and reports another value once per change (an error
// log, envoy_rls_shared_secret_mismatch 1) while it keeps its own secret
// and announces it; its own value back, the gauge is 0 again.
func TestSharedSecretKeptInRedis(t *testing.T) {
	srv := redistest.Standalone(t, redistest.Local())
	r := startServe(t, sharedSecretArgs(t, srv), nil, hooks{secretRecheck: secretRecheck})
	first, ok := srv.MustDo("GET", sharedKey).(string)
	own, legacy, err := compat.DecodeSharedSecret(sharedKey, []byte(first))
	if !ok || err != nil || legacy {
		t.Fatalf("GET %s = %q: %v", sharedKey, first, err)
	}
	if !strings.Contains(r.logs.String(), "the replicas share a random secret stored in Redis") {
		t.Errorf("no warning about the shared secret:\n%s", r.logs)
	}
	mismatch := func() string {
		_, m := r.get(t, "/metrics")
		for _, l := range strings.Split(m, "\n") {
			if strings.HasPrefix(l, "envoy_rls_shared_secret_mismatch ") {
				return strings.TrimPrefix(l, "envoy_rls_shared_secret_mismatch ")
			}
		}
		return "absent"
	}
	if got := mismatch(); got != "0" {
		t.Fatalf("envoy_rls_shared_secret_mismatch %s at start, want 0", got)
	}

	srv.MustDo("DEL", sharedKey)
	// The log line follows the write: wait for it, then read the key.
	waitFor(t, func() bool { return strings.Contains(r.logs.String(), compat.MsgSecretRestored) })
	if got := srv.MustDo("GET", sharedKey); got != first {
		t.Errorf("restored %v, want the replica's own value", got)
	}

	other := compat.EncodeSharedSecret(sharedKey, bytes.Repeat([]byte{'o'}, compat.SharedSecretBytes))
	srv.MustDo("SET", sharedKey, other)
	waitFor(t, func() bool { return mismatch() == "1" })
	awaitChecks(t, srv, 3)
	if n := strings.Count(r.logs.String(), compat.MsgSecretChanged); n != 1 {
		t.Errorf("%d change reports over 4 checks of one change, want 1:\n%s", n, r.logs)
	}
	if got := srv.MustDo("GET", compat.InUseKey(sharedKey)); got != compat.Fingerprint(sharedKey, own) {
		t.Errorf("announced %v, want this replica's fingerprint", got)
	}
	if srv.MustDo("GET", sharedKey) != other {
		t.Error("the replica replaced the key's value")
	}
	// Another change is reported again.
	srv.MustDo("SET", sharedKey, "x")
	waitFor(t, func() bool { return strings.Count(r.logs.String(), compat.MsgSecretChanged) == 2 })

	srv.MustDo("SET", sharedKey, first)
	waitFor(t, func() bool { return mismatch() == "0" })
	if !strings.Contains(r.logs.String(), compat.MsgSecretBack) {
		t.Errorf("no log of the secret back:\n%s", r.logs)
	}
	if resp := r.check(t, "alice"); resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Errorf("call: %v", resp.OverallCode)
	}
}

// TestSharedSecretRefusedAtStart: a replica does not start on a key it
// must not adopt — a secret other than the running replicas', a list, a
// value that is no secret — and says which key and what to do, at once.
func TestSharedSecretRefusedAtStart(t *testing.T) {
	srv := redistest.Standalone(t, redistest.Local())
	args := sharedSecretArgs(t, srv)
	running := startServe(t, args, nil, hooks{secretRecheck: secretRecheck})
	other := compat.EncodeSharedSecret(sharedKey, bytes.Repeat([]byte{'o'}, compat.SharedSecretBytes))
	for _, c := range []struct {
		name  string
		set   func()
		wants []string
	}{
		{"another secret", func() { srv.MustDo("SET", sharedKey, other) },
			[]string{`--hmac-secret-redis-key="test:shared-secret": the Redis key "test:shared-secret" holds a secret other than the one the running replicas announce`, "delete the key (DEL test:shared-secret)"}},
		{"a list", func() { srv.MustDo("DEL", sharedKey); srv.MustDo("RPUSH", sharedKey, "x") },
			[]string{`the Redis key "test:shared-secret" holds a list, hash, set or stream, not a string (WRONGTYPE)`, "Delete the key (DEL test:shared-secret)"}},
		{"one byte", func() { srv.MustDo("DEL", sharedKey); srv.MustDo("SET", sharedKey, "x") },
			[]string{`holds 1 bytes that are neither the v1 form`, "written by something else or damaged"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.set()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			start := time.Now()
			err := Run(ctx, append([]string{"serve", "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"}, args...), noEnv, io.Discard, io.Discard)
			if err == nil || ctx.Err() != nil {
				t.Fatalf("serve: %v after %v, want a start-up error", err, time.Since(start))
			}
			for _, w := range c.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error\n%v\nwant it to hold\n%s", err, w)
				}
			}
		})
	}
	// The running replica kept its secret and serves.
	if resp := running.check(t, "bob"); resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Errorf("call: %v", resp.OverallCode)
	}
}

// TestSharedSecretNoPermission: a Redis user the ACL does not let use the
// shared secret's keys stops the start with an error that says so, at
// once, instead of retrying.
func TestSharedSecretNoPermission(t *testing.T) {
	srv := redistest.Standalone(t, redistest.Local())
	srv.MustDo("ACL", "SETUSER", "rls", "on", ">rls-password", "resetkeys", "~rate:*", "-@all", "+hello", "+ping", "+client|setname")
	pw := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pw, []byte("rls-password"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	args := append([]string{"serve", "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--redis-username", "rls", "--redis-password-file", pw},
		sharedSecretArgs(t, srv)...)
	err := Run(ctx, args, noEnv, io.Discard, io.Discard)
	if err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), "the Redis user may not use the shared secret's keys") || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("serve: %v, want the ACL named at once", err)
	}
}

// TestSharedSecretRedisDownAtStart: with the secret shared through a Redis
// that does not answer yet, serve listens at once and answers every call
// by its policy's failure mode (closed here: OVER_LIMIT), reports the
// store down and why on /healthz while /readyz and /healthcheck stay 200,
// and keeps trying. Once Redis answers, the secret is stored and the calls
// are decided by Redis under it: a replica started afterwards counts with
// this one.
func TestSharedSecretRedisDownAtStart(t *testing.T) {
	srv := redistest.Standalone(t, redistest.Local())
	srv.Kill()
	args := sharedSecretArgs(t, srv)
	// A day's window: the three counted calls fall in one window (the
	// minute of testRules could roll over between them).
	args[1] = writeRules(t, t.TempDir(), strings.Replace(testRules, "unit: minute", "unit: day", 1))
	r := startServe(t, args, nil, hooks{secretRecheck: secretRecheck})

	if resp := r.check(t, "alice"); resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("a call before the secret is read: %v, want OVER_LIMIT (failure mode closed)", resp.OverallCode)
	}
	waitFor(t, func() bool {
		code, body := r.get(t, "/healthz")
		return code == 200 && strings.Contains(body, "store redis: down since") && strings.Contains(body, compat.ErrSecretNotRead.Error())
	})
	if code, body := r.get(t, "/readyz"); code != 200 || !strings.Contains(body, compat.ErrSecretNotRead.Error()) {
		t.Errorf("/readyz before the secret is read: %d %q, want 200 with the store's state", code, body)
	}
	if code, body := r.get(t, "/healthcheck"); code != 200 {
		t.Errorf("/healthcheck before the secret is read: %d %q, want 200", code, body)
	}
	waitFor(t, func() bool { return strings.Contains(r.logs.String(), compat.MsgSecretNotYet) })

	srv.Restart()
	polltest.Eventually(t, 30*time.Second, 20*time.Millisecond, "a call decided by Redis", func() error {
		if resp := r.check(t, "bob"); resp.OverallCode != rlsv3.RateLimitResponse_OK {
			return fmt.Errorf("%v", resp.OverallCode)
		}
		return nil
	})
	if !strings.Contains(r.logs.String(), compat.MsgSecretRead) {
		t.Errorf("no %q line", compat.MsgSecretRead)
	}
	stored, ok := srv.MustDo("GET", sharedKey).(string)
	if _, _, err := compat.DecodeSharedSecret(sharedKey, []byte(stored)); !ok || err != nil {
		t.Fatalf("GET %s = %q: %v", sharedKey, stored, err)
	}
	// bob has used 1 of 2: a replica started now shares the secret and the
	// count.
	other := startServe(t, args, nil, hooks{secretRecheck: secretRecheck})
	if resp := other.check(t, "bob"); resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("bob's second call, on another replica: %v, want OK", resp.OverallCode)
	}
	if resp := r.check(t, "bob"); resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("bob's third call: %v, want OVER_LIMIT: the first replica does not count under the shared secret", resp.OverallCode)
	}
	waitFor(t, func() bool {
		_, body := r.get(t, "/healthz")
		return strings.Contains(body, "store redis: up since")
	})
}

// TestSharedSecretRefusedAfterStart: a replica serving before Redis
// answered stops, with the error of a refused start, when Redis then holds
// a key it must not adopt.
func TestSharedSecretRefusedAfterStart(t *testing.T) {
	srv := redistest.Standalone(t, redistest.Local())
	// The user is off: its attempts fail as Redis not answering would.
	srv.MustDo("ACL", "SETUSER", "rls", "off", ">rls-password", "~*", "+@all")
	pw := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pw, []byte("rls-password"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--redis-username", "rls", "--redis-password-file", pw}, sharedSecretArgs(t, srv)...)
	r := startServe(t, args, nil, hooks{secretRecheck: secretRecheck})
	if resp := r.check(t, "alice"); resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("a call before the secret is read: %v, want OVER_LIMIT", resp.OverallCode)
	}
	srv.MustDo("RPUSH", sharedKey, "x")
	srv.MustDo("ACL", "SETUSER", "rls", "on")
	select {
	case err := <-r.done:
		close(r.done)
		if err == nil || !strings.Contains(err.Error(), `the Redis key "test:shared-secret" holds a list`) {
			t.Fatalf("serve returned %v, want the refusal of the key", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("serve still running 30s after the key became readable\nlogs:\n%s", r.logs)
	}
}
