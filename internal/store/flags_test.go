package store

import (
	"fmt"
	"math"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/options"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/memory"
)

// serveCase is one options.Serve call with the store's flags and the
// error it must return.
type serveCase struct {
	name string
	args []string
	env  map[string]string
	want string // "" = accepted
}

// checkServe runs each case as a subtest: the store's flags, as a group
// of serve's options, are refused naming the flag or variable as the user
// set it, the value and what is accepted.
func checkServe(t *testing.T, cases []serveCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var f Flags
			_, _, err := options.Serve(tc.args, func(k string) string { return tc.env[k] }, nil, &f)
			if got := fmt.Sprint(err); tc.want == "" && err != nil || tc.want != "" && got != tc.want {
				t.Fatalf("Serve(%q) = %v, want %q", tc.args, err, tc.want)
			}
		})
	}
}

func TestServeErrors(t *testing.T) {
	const rules = "rules.yaml"
	checkServe(t, []serveCase{
		{"bad env int", []string{"--config", rules}, map[string]string{"ENVOY_RLS_REDIS_POOL_SIZE": "abc"}, `ENVOY_RLS_REDIS_POOL_SIZE="abc": must be an integer between 1 and 256`},
		{"bad flag int", []string{"--config", rules, "--redis-pool-size=abc"}, nil, `--redis-pool-size="abc": must be an integer between 1 and 256`},
		{"bad env bool", []string{"--config", rules}, map[string]string{"ENVOY_RLS_LOCAL_CACHE": "yes"}, `ENVOY_RLS_LOCAL_CACHE="yes": must be true or false`},
		{"gc percent too low", []string{"--config", rules, "--gc-percent", "5"}, nil, `--gc-percent="5": must be 0 (automatic) or an integer between 10 and 10000`},
		{"gc percent too high", []string{"--config", rules}, map[string]string{"ENVOY_RLS_GC_PERCENT": "20000"}, `ENVOY_RLS_GC_PERCENT="20000": must be 0 (automatic) or an integer between 10 and 10000`},
		{"replicas hint zero", []string{"--config", rules, "--replicas-hint", "0"}, nil, `--replicas-hint="0": must be an integer between 1 and 10000`},
		{"replicas hint env", []string{"--config", rules}, map[string]string{"ENVOY_RLS_REPLICAS_HINT": "two"}, `ENVOY_RLS_REPLICAS_HINT="two": must be an integer between 1 and 10000`},
		{"local fallback entries", []string{"--config", rules, "--local-fallback-max-entries", "0"}, nil, `--local-fallback-max-entries="0": must be a positive integer`},
		{"journal entries zero", []string{"--config", rules, "--journal-max-entries", "0"}, nil, `--journal-max-entries="0": must be an integer between 1 and 10000000`},
		{"journal entries env", []string{"--config", rules}, map[string]string{"ENVOY_RLS_JOURNAL_MAX_ENTRIES": "20000000"}, `ENVOY_RLS_JOURNAL_MAX_ENTRIES="20000000": must be an integer between 1 and 10000000`},
		{"journal file memory", []string{"--config", rules, "--journal-file", "/var/lib/envoy-rls/journal"}, nil, `--journal-file="/var/lib/envoy-rls/journal": must be empty with --store memory (the journal holds what Redis could not record)`},
		{"flag wins over env", []string{"--config", rules, "--redis-timeout", "2m"}, map[string]string{"ENVOY_RLS_REDIS_TIMEOUT": "1s"}, `--redis-timeout="2m": must be a duration between 1ms and 1m0s`},
		{"several problems", []string{"--config", rules, "--store", "etcd"}, map[string]string{"ENVOY_RLS_LOG_LEVEL": "loud", "ENVOY_RLS_MEMORY_MAX_ENTRIES": "x"},
			`ENVOY_RLS_MEMORY_MAX_ENTRIES="x": must be 0 (automatic) or a positive integer` + "\n" + `--store="etcd": must be memory or redis` + "\n" + `ENVOY_RLS_LOG_LEVEL="loud": must be debug, info, warn or error`},
		{"redis without address", []string{"--config", rules, "--store", "redis"}, map[string]string{options.SecretEnv: "a-shared-secret-of-32-bytes-----"}, "--redis-addr (or ENVOY_RLS_REDIS_ADDR) is not set: must be at least one host:port"},
		{"local cache size", []string{"--config", rules, "--local-cache-size", "3"}, nil, `--local-cache-size="3": must be an integer of at least 64`},
		// Every value that does not parse is reported in one run, the
		// command line's as the environment's.
		{"several bad flags", []string{"--redis-timeout", "5sec", "--drain-timeout=abc", "--local-cache=maybe", "--store", "etcd"}, map[string]string{"ENVOY_RLS_REDIS_POOL_SIZE": "x"},
			`--redis-timeout="5sec": must be a duration between 1ms and 1m0s` + "\n" + `--drain-timeout="abc": must be a positive duration such as 15s` + "\n" + `--local-cache="maybe": must be true or false` + "\n" +
				`ENVOY_RLS_REDIS_POOL_SIZE="x": must be an integer between 1 and 256` + "\n" + "--config (or ENVOY_RLS_CONFIG) is not set: must be the rule file or directory to serve" + "\n" + `--store="etcd": must be memory or redis`},
		{"bad flags then an unknown one", []string{"--redis-timeout", "5sec", "--colour", "--drain-timeout=abc"}, nil,
			`--redis-timeout="5sec": must be a duration between 1ms and 1m0s` + "\n" + `unknown flag --colour ("envoy-rls serve --help" lists the flags)`},
	})
}

func TestServeChecks(t *testing.T) {
	base := []string{"--config", "rules"}
	redis := []string{"--config", "rules", "--store", "redis", "--redis-addr", "10.0.0.1:6379", "--hmac-secret-file", "/nonexistent/secret"}
	checkServe(t, []serveCase{
		{"redis", redis, map[string]string{options.SecretEnv: "a-shared-secret-of-32-bytes-----"}, ""},
		{"redis with a journal file", append(redis, "--journal-file", "/var/lib/envoy-rls/journal", "--journal-max-entries", "5"), map[string]string{options.SecretEnv: "a-shared-secret-of-32-bytes-----"}, ""},
		{"files are not read", append(redis, "--hmac-secret-file", "/nonexistent", "--redis-password-file", "/nonexistent", "--redis-tls-ca", "/nonexistent"), nil, ""},
		{"memory store ignores a missing redis address", append(base, "--redis-mode", "sentinel"), nil, ""},
		{"memory store still refuses a bad redis value", append(base, "--redis-pool-size", "0"), nil, `--redis-pool-size="0": must be an integer between 1 and 256`},
		{"redis without address", []string{"--config", "rules", "--store", "redis", "--hmac-secret-file", "s"}, nil, "--redis-addr (or ENVOY_RLS_REDIS_ADDR) is not set: must be at least one host:port"},
		{"malformed address", []string{"--config", "rules", "--store", "redis", "--hmac-secret-file", "s", "--redis-addr", "10.0.0.1"}, nil, `--redis-addr="10.0.0.1": must be host:port (several separated by commas) or the absolute path of a Unix socket`},
		{"malformed address from env", []string{"--config", "rules", "--store", "redis", "--hmac-secret-file", "s"}, map[string]string{"ENVOY_RLS_REDIS_ADDR": "a:1,b"}, `ENVOY_RLS_REDIS_ADDR="a:1,b": must be host:port (several separated by commas) or the absolute path of a Unix socket`},
		{"redis mode", append(redis, "--redis-mode", "ring"), nil, `--redis-mode="ring": must be auto, standalone, cluster or sentinel`},
		{"sentinel without master", append(redis, "--redis-mode", "sentinel"), nil, "--redis-sentinel-master (or ENVOY_RLS_REDIS_SENTINEL_MASTER) is not set: must be the master set name in sentinel mode"},
		{"master in cluster mode", append(redis, "--redis-mode", "cluster", "--redis-sentinel-master", "m"), nil, `--redis-sentinel-master="m": must be empty unless the mode is sentinel or auto (it is cluster)`},
		{"master in auto mode", append(redis, "--redis-sentinel-master", "m"), nil, ""},
		{"standalone with two addresses", []string{"--config", "rules", "--store", "redis", "--hmac-secret-file", "s", "--redis-mode", "standalone", "--redis-addr", "a:1,b:2"}, nil, `--redis-addr="a:1,b:2": must be exactly one address in standalone mode (got 2)`},
		{"timeout too short", append(redis, "--redis-timeout", "500us"), nil, `--redis-timeout="500us": must be a duration between 1ms and 1m0s`},
		{"timeout too long", append(redis, "--redis-timeout", "61s"), nil, `--redis-timeout="61s": must be a duration between 1ms and 1m0s`},
		{"timeout at the bounds", append(redis, "--redis-timeout", "1ms"), map[string]string{"ENVOY_RLS_REDIS_TIMEOUT": "1m"}, ""},
		{"flush delay negative", append(redis, "--redis-max-flush-delay", "-1us"), nil, `--redis-max-flush-delay="-1us": must be a duration between 0 and 1ms`},
		{"flush delay too long", append(redis, "--redis-max-flush-delay", "2ms"), nil, `--redis-max-flush-delay="2ms": must be a duration between 0 and 1ms`},
		{"flush delay zero", append(redis, "--redis-max-flush-delay", "0"), nil, ""},
		{"pool size zero", append(redis, "--redis-pool-size", "0"), nil, `--redis-pool-size="0": must be an integer between 1 and 256`},
		{"pool size too large", redis, map[string]string{"ENVOY_RLS_REDIS_POOL_SIZE": "257"}, `ENVOY_RLS_REDIS_POOL_SIZE="257": must be an integer between 1 and 256`},
		{"pool size at the bound", append(redis, "--redis-pool-size", "256"), nil, ""},
		{"client cert without key", append(redis, "--redis-tls-cert", "c.pem"), nil, "--redis-tls-key (or ENVOY_RLS_REDIS_TLS_KEY) is not set: must be given together with --redis-tls-cert (mutual TLS needs both)"},
		{"client key without cert", append(redis, "--redis-tls-key", "k.pem"), nil, "--redis-tls-cert (or ENVOY_RLS_REDIS_TLS_CERT) is not set: must be given together with --redis-tls-key (mutual TLS needs both)"},
		{"gc percent", append(base, "--gc-percent", "-1"), nil, `--gc-percent="-1": must be 0 (automatic) or an integer between 10 and 10000`},
		{"memory entries", append(base, "--memory-max-entries", "-5"), nil, `--memory-max-entries="-5": must be 0 (automatic) or a positive integer`},
		{"local cache size", append(base, "--local-cache-size", "3"), nil, `--local-cache-size="3": must be an integer of at least 64`},
	})
}

func TestGCPercent(t *testing.T) {
	for _, tc := range []struct {
		name     string
		kind     string
		flags    Flags
		gogc     string
		want     int
		wantFrom string
	}{
		{"memory store", "memory", Flags{}, "", MemoryGCPercent, "automatic (memory store)"},
		{"GOGC wins over the memory store's", "memory", Flags{}, "100", 0, "GOGC"},
		{"redis store", "redis", Flags{}, "", RedisGCPercent, "automatic (redis store)"},
		{"GOGC wins over automatic", "redis", Flags{}, "150", 0, "GOGC"},
		{"the flag wins over GOGC", "memory", Flags{GCPercent: 250}, "150", 250, "--gc-percent"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, from := tc.flags.GCTarget(tc.kind, func(k string) string {
				if k == "GOGC" {
					return tc.gogc
				}
				return ""
			})
			if got != tc.want || from != tc.wantFrom {
				t.Fatalf("gcPercent = %d, %q; want %d, %q", got, from, tc.want, tc.wantFrom)
			}
		})
	}
}

// The automatic memory bound follows the Go memory limit (GOMEMLIMIT),
// injected here: the test process's own limit plays no part.
func TestMemoryBound(t *testing.T) {
	const mi = 1 << 20
	for _, tc := range []struct {
		name     string
		flag     int
		limit    int64
		want     int
		wantFrom string
	}{
		{"no limit", 0, math.MaxInt64, 1_000_000, "automatic (no GOMEMLIMIT)"},
		{"the chart's 256Mi", 0, 256 * mi, 493_447, "automatic (GOMEMLIMIT)"}, // 268435456 x 0.5 / 272
		{"128Mi", 0, 128 * mi, 246_723, "automatic (GOMEMLIMIT)"},
		{"1Gi allows the default", 0, 1024 * mi, 1_000_000, "automatic (GOMEMLIMIT allows the default)"},
		{"just below the default", 0, 543_999_999, 999_999, "automatic (GOMEMLIMIT)"},
		{"at the default", 0, 544_000_000, 1_000_000, "automatic (GOMEMLIMIT allows the default)"},
		{"tiny limit still holds one", 0, 100, 1, "automatic (GOMEMLIMIT)"},
		{"the flag wins", 5000, 256 * mi, 5000, "--memory-max-entries"},
		{"the flag above the automatic bound", 2_000_000, 256 * mi, 2_000_000, "--memory-max-entries"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, from := (&Flags{MemoryMaxEntries: tc.flag}).MemoryBound(tc.limit)
			if got != tc.want || from != tc.wantFrom {
				t.Fatalf("memoryBound = %d, %q; want %d, %q", got, from, tc.want, tc.wantFrom)
			}
		})
	}
	// A full store at the bound for 256Mi keeps at most MemoryShare of it.
	n, _ := (&Flags{}).MemoryBound(256 * mi)
	if float64(n)*memory.MaxBytesPerEntry > MemoryShare*256*mi {
		t.Fatalf("%d entries x %d bytes exceed %v of 256 MiB", n, memory.MaxBytesPerEntry, MemoryShare)
	}
}
