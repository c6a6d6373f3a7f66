package e2e_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/compat"
	"github.com/envoy-rls/envoy-rls/internal/deploytest"
	"github.com/envoy-rls/envoy-rls/internal/polltest"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
)

// Credentials of the output tests: each must appear nowhere in what the
// binary writes.
const (
	redisPassword = "redis-pw-5ecr3t"
	bearerToken   = "t0ken-5ecr3t"
)

// msgPlaintext is the start-up warning of credential headers sent without
// TLS (redact.MsgPlaintextCredentials).
const msgPlaintext = "credential headers are sent without TLS"

// with is base and more in a slice of their own.
func with(base []string, more ...string) []string {
	return append(append([]string(nil), base...), more...)
}

// checkNoSecret fails the test when out holds a credential of this file.
func checkNoSecret(t *testing.T, name, out string) {
	t.Helper()
	for _, s := range []string{redisPassword, bearerToken} {
		if strings.Contains(out, s) {
			t.Errorf("%s: the output shows a credential (%s):\n%s", name, s, out)
		}
	}
}

// TestNoSecretInOutput: a Redis password (REDIS_URL, REDIS_AUTH,
// ENVOY_RLS_REDIS_ADDR) or a credential header (--xds-header,
// OTEL_EXPORTER_OTLP_HEADERS) given to the binary appears nowhere in its
// output — stdout and stderr whole, whether it fails at start, serves, or
// cannot reach Redis — and credential headers sent without TLS are named in
// one warning at start.
func TestNoSecretInOutput(t *testing.T) {
	binary(t)
	srv := redistest.Standalone(t, redistest.Local())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	user := unique("envoy-rls")
	if _, err := srv.Do(ctx, "ACL", "SETUSER", user, "on", ">"+redisPassword, "~*", "+@all"); err != nil {
		t.Fatal(err)
	}
	link := ratelimitLink(t)
	compatEnv, _ := referenceRuntime(t, "")
	compatEnv = with(compatEnv, "USE_STATSD=false", "LOG_LEVEL=debug", "REDIS_SOCKET_TYPE=tcp", "CACHE_KEY_PREFIX="+unique("secrets")+":")
	rules := rulesDir(t, hourlyRules(3, "user"))
	serve := []string{"serve", "--config", rules, "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"}
	xds := with(serve, "--config-source", "xds", "--xds-server", deploytest.FreeAddr(t))
	header := "authorization:Bearer " + bearerToken

	// Starts that fail.
	for _, c := range []struct {
		name      string
		bin       string
		env       []string
		args      []string
		plaintext bool // the warning is due
	}{
		{"REDIS_URL with a password", link, with(compatEnv, "REDIS_URL=redis://"+user+":"+redisPassword+"@"+srv.Addr()), nil, false},
		{"--redis-addr URL", "", []string{"ENVOY_RLS_REDIS_ADDR=rediss://:" + redisPassword + "@" + srv.Addr()}, with(serve, "--store", "redis"), false},
		{"no rules from a plaintext xDS server", "", nil, with(xds, "--xds-header", header, "--xds-initial-timeout", "1s"), true},
		{"xDS header name refused", "", nil, with(xds, "--xds-header", "Authorization:Bearer "+bearerToken), false},
		{"xDS header cut at a space", "", nil, with(xds, "--xds-header", "authorization:Bearer", bearerToken), false},
		{"OTLP header with ':'", "", []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + deploytest.FreeAddr(t), "OTEL_EXPORTER_OTLP_HEADERS=" + header}, serve, false},
	} {
		res := startCommand(t, c.bin, c.env, c.args...).finish(t, runTimeout)
		out := res.stdout + res.stderr
		if res.code != 1 {
			t.Errorf("%s: exit %d, want 1\n%s", c.name, res.code, out)
		}
		checkNoSecret(t, c.name, out)
		if got := strings.Count(out, msgPlaintext); got != map[bool]int{true: 1}[c.plaintext] {
			t.Errorf("%s: %d plaintext warnings, want %v\n%s", c.name, got, c.plaintext, out)
		}
	}

	// Starts that serve: with the Redis password of REDIS_AUTH (the secret
	// shared through that Redis), with a wrong one (Redis refuses it; the
	// store retries in the background), and with credential headers to a
	// plaintext xDS server and OTLP endpoint.
	for _, c := range []struct {
		name      string
		cfg       replicaConfig
		use       func(t *testing.T, r *replica)
		plaintext int
	}{
		{"REDIS_AUTH", replicaConfig{Compat: true, Env: with(compatEnv, "REDIS_URL="+srv.Addr(), "REDIS_AUTH="+user+":"+redisPassword)},
			func(t *testing.T, r *replica) { r.checkAdmits(t, entry{"user", unique("u")}, 3, 4) }, 0},
		{"REDIS_AUTH refused", replicaConfig{Compat: true, Unready: true, Env: with(compatEnv, "REDIS_URL="+srv.Addr(), "REDIS_AUTH="+user+":wrong-"+redisPassword,
			"ENVOY_RLS_HMAC_SECRET=e2e-secret-of-at-least-16-bytes")},
			func(t *testing.T, r *replica) {
				polltest.Eventually(t, startTimeout, 20*time.Millisecond, "a refused connection logged", func() error {
					if !r.log.contains("WRONGPASS") {
						return errors.New("no WRONGPASS in the log yet")
					}
					return nil
				})
			}, 0},
		{"plaintext headers", replicaConfig{Rules: rules, Args: []string{"--config-source", "xds", "--xds-server", deploytest.FreeAddr(t), "--xds-header", header,
			"--force-start-without-initial-config", "--tracing"}, Env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + deploytest.FreeAddr(t),
			"OTEL_EXPORTER_OTLP_HEADERS=x-api-key=" + bearerToken}},
			func(t *testing.T, r *replica) { r.mustCall(t, entry{"user", unique("u")}) }, 2},
	} {
		r := startReplica(t, c.name, c.cfg)
		c.use(t, r)
		if err := r.stop(); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
		out := r.log.tail(logTail)
		checkNoSecret(t, c.name, out)
		if got := strings.Count(out, msgPlaintext); got != c.plaintext {
			t.Errorf("%s: %d plaintext warnings, want %d\n%s", c.name, got, c.plaintext, out)
		}
	}
}

// sharedSecretRuntime is the reference environment of replicas that share
// their HMAC secret through srv under a key of their own (returned), with
// a limit of 2 calls an hour per user.
func sharedSecretRuntime(t *testing.T, srv *redistest.Server) (env []string, key string) {
	t.Helper()
	prefix := unique("shared") + ":"
	env, dir := redisRuntime(t, srv, "USE_STATSD=false", "CACHE_KEY_PREFIX="+prefix)
	writeFile(t, dir, "rules.yaml", hourlyRules(2, "user"))
	return env, prefix + "envoy-rls:hmac-secret"
}

// TestSharedSecretOverwritten: two replicas share a random secret through
// Redis; the key is then overwritten, with another well-formed secret and
// with 32 raw bytes. A replica started afterwards does not adopt either:
// it exits 1 at once naming the key and the fix. The running replicas keep
// their secret and keep counting together: exactly the limit is admitted
// across them.
func TestSharedSecretOverwritten(t *testing.T) {
	srv, _ := withStandaloneRedis(t)
	env, key := sharedSecretRuntime(t, srv)
	a := startReplica(t, "ratelimit-a", replicaConfig{Compat: true, Env: env})
	b := startReplica(t, "ratelimit-b", replicaConfig{Compat: true, Env: env})
	link := ratelimitLink(t)

	for _, value := range []string{
		compat.EncodeSharedSecret(key, bytes.Repeat([]byte{'x'}, compat.SharedSecretBytes)),
		strings.Repeat("y", compat.SharedSecretBytes),
	} {
		srv.MustDo("SET", key, value)
		start := time.Now()
		res := startCommand(t, link, env).finish(t, runTimeout)
		took := time.Since(start)
		t.Logf("a replica started on the overwritten key exited %d after %v", res.code, took.Round(time.Millisecond))
		want := "holds a secret other than the one the running replicas announce"
		if res.code != 1 || !strings.Contains(res.stderr, want) || !strings.Contains(res.stderr, "DEL "+key) {
			t.Fatalf("a replica started on the overwritten key: exit %d\n%s\nwant exit 1 with %q and the fix", res.code, res.stderr, want)
		}
	}

	awayFromHourBoundary(t)
	user := entry{"user", unique("u")}
	admitted := 0
	for i, r := range []*replica{a, b, a, b, a, b} {
		res := r.mustCall(t, user)
		if res.ok() {
			admitted++
		} else if !res.over() {
			t.Fatalf("call %d on %s: %v", i+1, r.name, res)
		}
	}
	if admitted != 2 {
		t.Fatalf("%d of 6 calls admitted across the running replicas, want the limit, 2", admitted)
	}
}

// TestSharedSecretWrongType: a key of the shared secret that holds a list
// stops the start within seconds with an error naming the key and the fix
// (never a retry without end).
func TestSharedSecretWrongType(t *testing.T) {
	srv, _ := withStandaloneRedis(t)
	env, key := sharedSecretRuntime(t, srv)
	srv.MustDo("RPUSH", key, "x")
	start := time.Now()
	res := startCommand(t, ratelimitLink(t), env).finish(t, runTimeout)
	took := time.Since(start)
	t.Logf("exit %d after %v", res.code, took.Round(time.Millisecond))
	if res.code != 1 || !strings.Contains(res.stderr, `the Redis key "`+key+`" holds a list`) || !strings.Contains(res.stderr, "DEL "+key) {
		t.Fatalf("exit %d\n%s\nwant exit 1 naming the key, its type and the fix", res.code, res.stderr)
	}
	if took > 10*time.Second {
		t.Errorf("the refusal took %v, want seconds", took)
	}
}

// TestSharedSecretRedisDownAtStart: the drop-in start — the binary started
// as ratelimit with REDIS_URL and no HMAC secret — while nothing listens on
// the Redis address. It serves at once and is ready (/readyz and
// /healthcheck 200, /healthz 200 with the store down because the shared
// secret is not read yet), answers each limit by its failure mode (closed:
// OVER_LIMIT with Retry-After; open: OK) and logs each attempt. Once
// redis-server starts on that port, it stores the shared secret and Redis
// decides: a replica started then counts with it, exactly the limit
// admitted across both.
func TestSharedSecretRedisDownAtStart(t *testing.T) {
	srv, _ := withStandaloneRedis(t, redistest.Local())
	srv.Kill()
	prefix := unique("early") + ":"
	env, dir := redisRuntime(t, srv, "USE_STATSD=false", "CACHE_KEY_PREFIX="+prefix, "LIMIT_RESPONSE_HEADERS_ENABLED=true")
	writeFile(t, dir, "rules.yaml", failureModeRules(2, "closed", "open"))
	key := prefix + "envoy-rls:hmac-secret"

	start := time.Now()
	a := startReplica(t, "early", replicaConfig{Compat: true, Env: env})
	t.Logf("serving and ready %v after the start, Redis down", time.Since(start).Round(time.Millisecond))
	const notYet = "the shared HMAC secret is not read from Redis yet"
	if code, body := a.mustAdmin("/healthz"); code != http.StatusOK || !strings.Contains(body, "store redis: down since") || !strings.Contains(body, notYet) {
		t.Errorf("/healthz before the secret is read: %d %q, want 200 with the store down and why", code, body)
	}
	if code, body := a.mustAdmin("/readyz"); code != http.StatusOK || !strings.Contains(body, notYet) {
		t.Errorf("/readyz before the secret is read: %d %q, want 200 with the store's state", code, body)
	}
	if code, body := a.mustAdmin("/healthcheck"); code != http.StatusOK || strings.TrimSpace(body) != "OK" {
		t.Errorf("/healthcheck before the secret is read: %d %q, want 200 OK", code, body)
	}
	for i := range 3 {
		if res := a.call(outageDeadline, 1, entry{"closed", "down"}); !res.over() || res.Headers["Retry-After"] == "" {
			t.Errorf("closed policy before the secret is read, call %d: %v, want OVER_LIMIT with Retry-After", i, res)
		}
		if res := a.call(outageDeadline, 1, entry{"open", "down"}); !res.ok() {
			t.Errorf("open policy before the secret is read, call %d: %v, want OK", i, res)
		}
	}
	if got := a.metric(`envoy_rls_fallback_total{mode="closed"}`); got < 3 {
		t.Errorf(`envoy_rls_fallback_total{mode="closed"} %v, want at least 3`, got)
	}
	polltest.Eventually(t, 20*time.Second, 20*time.Millisecond, "two failed attempts logged", func() error {
		if n := strings.Count(a.log.tail(logTail), "cannot read the shared HMAC secret from Redis yet: answering by each policy's failure mode; retrying"); n < 2 {
			return fmt.Errorf("%d so far", n)
		}
		return nil
	})

	awayFromHourBoundary(t)
	srv.Restart()
	user := entry{"closed", unique("u")}
	start = time.Now()
	polltest.Eventually(t, 30*time.Second, 20*time.Millisecond, "a call decided by Redis", func() error {
		if res := a.call(outageDeadline, 1, user); !res.ok() {
			return fmt.Errorf("%v", res)
		}
		return nil
	})
	t.Logf("decided by Redis %v after the restart began", time.Since(start).Round(time.Millisecond))
	if !a.log.contains("the shared HMAC secret is read from Redis") {
		t.Error("no log line of the secret read")
	}
	v, err := redistest.Do(context.Background(), srv.Addr(), nil, "GET", key)
	if s, ok := v.(string); err != nil || !ok {
		t.Fatalf("GET %s: %v %v", key, v, err)
	} else if _, _, err := compat.DecodeSharedSecret(key, []byte(s)); err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	// A new user, so that no call of the outage counts for it (a charge
	// Redis failed during the restart is journalled and replayed, so the
	// first user's count depends on when Redis came back): 1 of 2 on a.
	user = entry{"closed", unique("u")}
	if res := a.mustCall(t, user); !res.ok() {
		t.Fatalf("a new user's first call on %s: %v", a.name, res)
	}
	b := startReplica(t, "late", replicaConfig{Compat: true, Env: env})
	for i, c := range []struct {
		r    *replica
		want bool
	}{{b, true}, {a, false}, {b, false}} {
		if res := c.r.mustCall(t, user); res.ok() != c.want || !c.want && !res.over() {
			t.Fatalf("call %d after the first, on %s: %v, want ok=%v: the replicas do not count under one secret", i+2, c.r.name, res, c.want)
		}
	}
	// /healthz follows the store's probe, once a second.
	waitStoreState(t, []*replica{a}, true, 10*time.Second)
}
