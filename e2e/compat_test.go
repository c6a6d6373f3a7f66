package e2e_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/envoy-rls/envoy-rls/internal/compat"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/internal/statsd/statsdtest"
)

// ratelimitLink returns a link named ratelimit to the binary, in a
// temporary directory: the reference service's entry point (/bin/ratelimit
// in the image).
func ratelimitLink(t testing.TB) string {
	t.Helper()
	link := filepath.Join(t.TempDir(), "ratelimit")
	if err := os.Symlink(binary(t), link); err != nil {
		t.Fatal(err)
	}
	return link
}

// compatRules are the reference-format rules of the compatibility tests:
// 3 calls an hour per user (a window no test outlives).
var compatRules = hourlyRules(3, "user")

// referenceRuntime lays out a reference service's runtime directory:
// RUNTIME_ROOT with compatRules in sub/config (sub may be ""). It returns
// the environment that points the binary at it, with its listeners on free
// loopback ports, and the rule directory.
func referenceRuntime(t *testing.T, sub string) (env []string, dir string) {
	t.Helper()
	root := t.TempDir()
	dir = filepath.Join(root, sub, "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "rules.yaml", compatRules)
	env = []string{"RUNTIME_ROOT=" + root, "HOST=127.0.0.1", "PORT=0", "GRPC_HOST=127.0.0.1", "GRPC_PORT=0"}
	if sub != "" {
		env = append(env, "RUNTIME_SUBDIRECTORY="+sub)
	}
	return env, dir
}

// redisRuntime is referenceRuntime (no subdirectory) with a Redis at srv
// over TCP and log level info, then more: the environment and the rule
// directory.
func redisRuntime(t *testing.T, srv *redistest.Server, more ...string) (env []string, dir string) {
	t.Helper()
	env, dir = referenceRuntime(t, "")
	env = append(env, "LOG_LEVEL=info", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+srv.Addr())
	return append(env, more...), dir
}

// envoyGateway is the reference service as Envoy Gateway deploys it,
// adapted to loopback: rule files (CONFIG_TYPE=FILE) instead of its xDS
// server, listeners on free ports, a Redis, certificates made by the test
// for mutual TLS with Envoy, and a statsd server that receives over TCP
// (the reference's default protocol; Envoy Gateway sets none).
type envoyGateway struct {
	env    []string // the reference's environment
	redis  *redistest.Server
	tls    redistest.TLSFiles
	creds  credentials.TransportCredentials // Envoy's side of the mutual TLS
	statsd *statsdtest.Server
}

// startEnvoyGateway starts the Redis and the statsd server (it builds the
// binary first, skipping the test in -short mode) and returns the
// environment with extra added.
func startEnvoyGateway(t *testing.T, extra ...string) *envoyGateway {
	t.Helper()
	binary(t)
	g := &envoyGateway{redis: redistest.Standalone(t), tls: redistest.GenerateTLS(t), statsd: statsdtest.Start(t, "tcp")}
	g.creds = credentials.NewTLS(g.tls.ClientConfig(t))
	env, dir := referenceRuntime(t, "ratelimit")
	// A dot-file that would not load: RUNTIME_IGNOREDOTFILES=true skips it.
	writeFile(t, dir, ".rules.yaml.swp", "domain: [broken")
	writeFile(t, dir, ".editor.yaml", "domain: [broken")
	_, statsdPort, _ := net.SplitHostPort(g.statsd.Addr)
	g.env = append(append(env,
		"RUNTIME_IGNOREDOTFILES=true", "RUNTIME_WATCH_ROOT=false",
		"LOG_LEVEL=info", "USE_STATSD=true", "STATSD_HOST=127.0.0.1", "STATSD_PORT="+statsdPort,
		"CONFIG_TYPE=FILE",
		"GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_TLS_CERT="+g.tls.ServerCert, "GRPC_SERVER_TLS_KEY="+g.tls.ServerKey,
		"GRPC_SERVER_TLS_CA_CERT="+g.tls.CA, "GRPC_CLIENT_TLS_CACERT="+g.tls.CA,
		"FORCE_START_WITHOUT_INITIAL_CONFIG=true", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+g.redis.Addr(),
	), extra...)
	return g
}

// TestRatelimitEntryPoint: the binary started as ratelimit with Envoy
// Gateway's environment serves Envoy over mutual TLS, shares its limits
// with a second replica through one Redis without a configured HMAC
// secret, sends the reference's stat names to the statsd server of
// USE_STATSD/STATSD_HOST/STATSD_PORT, answers the probes' /healthcheck, and
// stops cleanly on SIGTERM.
func TestRatelimitEntryPoint(t *testing.T) {
	prefix := unique("compat") + ":"
	g := startEnvoyGateway(t, "CACHE_KEY_PREFIX="+prefix, "LIMIT_RESPONSE_HEADERS_ENABLED=true",
		"STATS_FLUSH_INTERVAL=100ms")
	a := startReplica(t, "ratelimit-a", replicaConfig{Compat: true, Env: g.env, Creds: g.creds})
	b := startReplica(t, "ratelimit-b", replicaConfig{Compat: true, Env: g.env, Creds: g.creds})

	for _, r := range []*replica{a, b} {
		if code, body := r.mustAdmin("/healthcheck"); code != 200 || strings.TrimSpace(body) != "OK" {
			t.Fatalf("%s /healthcheck: %d %q, want 200 OK", r.name, code, body)
		}
		if !r.log.contains("no HMAC secret configured: the replicas share a random secret stored in Redis") {
			t.Errorf("%s: no start-up warning about the secret shared through Redis", r.name)
		}
	}
	// One secret, stored once, under the prefixed key, in the checked form.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	key := prefix + "envoy-rls:hmac-secret"
	v, err := redistest.Do(ctx, g.redis.Addr(), nil, "GET", key)
	if s, ok := v.(string); err != nil || !ok {
		t.Errorf("GET %s: %v, %v", key, v, err)
	} else if secret, legacy, err := compat.DecodeSharedSecret(key, []byte(s)); err != nil || legacy || len(secret) != compat.SharedSecretBytes {
		t.Errorf("the shared secret's value %q: %v", s, err)
	}

	// The limit is shared: 3 calls an hour over both replicas.
	user := entry{"user", unique("u")}
	for i, r := range []*replica{a, b, a, b} {
		res := r.mustCall(t, user)
		if want := i < 3; res.ok() != want {
			t.Fatalf("call %d on %s: %v, want ok=%v (the replicas must share one secret and one count)", i+1, r.name, res, want)
		}
		if i == 0 && res.Headers["RateLimit-Limit"] == "" {
			t.Errorf("headers %v: want the reference's RateLimit-Limit (LIMIT_RESPONSE_HEADERS_ENABLED=true)", res.Headers)
		}
	}

	// An explicit per-descriptor hits_addend of 0 checks without counting:
	// OVER_LIMIT on the full limit; on a fresh subject more probes than the
	// limit all answer OK, since none of them takes anything.
	if res := probeCall(a, user); !res.over() {
		t.Fatalf("probe of the full limit: %v, want OVER_LIMIT", res)
	}
	fresh := entry{"user", unique("u")}
	for i, r := range []*replica{a, b, a, b} {
		if res := probeCall(r, fresh); !res.ok() {
			t.Fatalf("probe %d of a fresh subject on %s: %v, want OK", i+1, r.name, res)
		}
	}

	// Both replicas' counters reach statsd under the reference's names: 4
	// hits of one rule with limit 3 (near_limit from the 3rd hit on, as
	// NEAR_LIMIT_RATIO 0.8 puts the threshold at 2); the 5 probe calls add
	// requests but no hits.
	want := map[string]int64{"ratelimit_server.ShouldRateLimit.total_requests": 4 + 5}
	statsdtest.AddRule(want, domain+".user", "", statsdtest.RuleCounts{Total: 4, Within: 3, Near: 1, Over: 1})
	g.statsd.WaitCounters(t, want, 10*time.Second)
	g.statsd.CheckOnlyCounters(t, want)

	// Envoy's calls must present a client certificate.
	plain := a.fresh(t, insecure.NewCredentials())
	if res := plain.call(callTimeout, 1, user); res.Err == nil {
		t.Errorf("plaintext call answered: %v", res)
	}
	noCert := g.tls.ClientConfig(t)
	noCert.Certificates = nil
	if res := a.fresh(t, credentials.NewTLS(noCert)).call(callTimeout, 1, user); res.Err == nil {
		t.Errorf("call without a client certificate answered: %v", res)
	}

	// SIGTERM: /healthcheck never answers 200 again (500 while draining,
	// then the port closes), and the process exits 0.
	a.terminate(t)
	saw500 := false
	for {
		code, _, err := a.admin("/healthcheck")
		if err != nil {
			break
		}
		if code == 500 {
			saw500 = true
		} else if saw500 {
			t.Fatalf("/healthcheck %d after answering 500 while draining", code)
		}
		select {
		case <-a.done:
		case <-time.After(5 * time.Millisecond):
			continue
		}
		break
	}
	t.Logf("/healthcheck answered 500 while draining: %v", saw500)
	if code, err := a.wait(stopTimeout); err != nil || code != 0 {
		t.Fatalf("exit %d (%v) after SIGTERM, want 0", code, err)
	}
	// The other replica still serves.
	if res := b.mustCall(t, entry{"user", unique("u")}); !res.ok() {
		t.Errorf("replica b after a stopped: %v", res)
	}
}

// probeCall sends one call whose descriptor (entries) has an explicit
// hits_addend of 0: check-only.
func probeCall(r *replica, entries ...entry) result {
	d := &ratelimitv3.RateLimitDescriptor{HitsAddend: wrapperspb.UInt64(0)}
	for _, e := range entries {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value})
	}
	return r.send(callTimeout, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})
}

// TestRatelimitEntryPointRefusals: a reference setting envoy-rls cannot
// honour stops the start with one line naming it, and exit status 1.
func TestRatelimitEntryPointRefusals(t *testing.T) {
	link := ratelimitLink(t)
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{[]string{"BACKEND_TYPE=memcache", "MEMCACHE_HOST_PORT=127.0.0.1:11211"}, `envoy-rls: BACKEND_TYPE="memcache": envoy-rls has no memcache backend; use redis (BACKEND_TYPE=redis with REDIS_URL)`},
		{[]string{"REDIS_SOCKET_TYPE=unix", "REDIS_URL=redis:6379"}, `envoy-rls: REDIS_URL="redis:6379": REDIS_SOCKET_TYPE=unix takes the absolute path of the socket`},
		{[]string{"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=127.0.0.1:6379", "LOG_LEVEL=loud"}, `envoy-rls: LOG_LEVEL="loud": must be trace, debug, info, warn, warning, error, fatal or panic (any case)`},
	} {
		res := startCommand(t, link, tc.env).finish(t, runTimeout)
		if res.code != 1 {
			t.Errorf("%v: exit %d, want 1", tc.env, res.code)
		}
		if got := strings.TrimSpace(res.stderr); !strings.HasPrefix(got, tc.want) || strings.Count(got, "\n") != 0 {
			t.Errorf("%v: stderr\n%s\nwant the one line\n%s", tc.env, got, tc.want)
		}
	}
}

// TestRatelimitEntryPointUnixSocket: the reference's default way to reach
// Redis, a Unix socket (REDIS_SOCKET_TYPE=unix).
func TestRatelimitEntryPointUnixSocket(t *testing.T) {
	binary(t)
	sock := filepath.Join(t.TempDir(), "redis.sock")
	redistest.Standalone(t, redistest.Local(), redistest.WithArgs("--unixsocket", sock, "--unixsocketperm", "700"))
	env, _ := referenceRuntime(t, "")
	r := startReplica(t, "ratelimit-unix", replicaConfig{Compat: true, Env: append(env,
		"LOG_LEVEL=info", "USE_STATSD=false", "REDIS_SOCKET_TYPE=unix", "REDIS_URL="+sock)})
	r.checkAdmits(t, entry{"user", unique("u")}, 3, 4)
}

// TestReferenceComposeEnvironments: the environments of the reference
// service's two compose files (docker-compose.yml and
// docker-compose-example.yml: the variable names and values as they are,
// with host names and paths pointed at loopback and the test's directory,
// and the listeners on free ports) start the binary as ratelimit without a
// warning about a setting, and it enforces the rules it finds there; the
// example's statsd receives the reference's counters.
func TestReferenceComposeEnvironments(t *testing.T) {
	binary(t)
	redis := redistest.Standalone(t)
	for _, tc := range []struct {
		name   string
		env    []string
		statsd bool
	}{
		{"docker-compose.yml", []string{"USE_STATSD=false", "LOG_LEVEL=debug", "REDIS_SOCKET_TYPE=tcp"}, false},
		{"docker-compose-example.yml", []string{"USE_STATSD=true", "LOG_LEVEL=debug", "REDIS_SOCKET_TYPE=tcp", "RUNTIME_WATCH_ROOT=false"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, _ := referenceRuntime(t, "ratelimit")
			env = append(append(env, tc.env...), "REDIS_URL="+redis.Addr(),
				// Not in the compose files: without a configured secret the
				// replicas share one in Redis, under a key of this test's own.
				"CACHE_KEY_PREFIX="+unique("compose")+":")
			var statsd *statsdtest.Server
			if tc.statsd {
				statsd = statsdtest.Start(t, "tcp")
				_, port, _ := net.SplitHostPort(statsd.Addr)
				env = append(env, "STATSD_HOST=127.0.0.1", "STATSD_PORT="+port, "STATS_FLUSH_INTERVAL=100ms")
			}
			r := startReplica(t, "ratelimit-compose", replicaConfig{Compat: true, Env: env})
			r.checkAdmits(t, entry{"user", unique("u")}, 3, 4)
			if r.log.contains("reference setting") {
				t.Errorf("a reference setting was warned about:\n%s", r.log.tail(4000))
			}
			if statsd != nil {
				want := map[string]int64{"ratelimit_server.ShouldRateLimit.total_requests": 4}
				statsdtest.AddRule(want, domain+".user", "", statsdtest.RuleCounts{Total: 4, Within: 3, Near: 1, Over: 1})
				statsd.WaitCounters(t, want, 10*time.Second)
			}
		})
	}
}
