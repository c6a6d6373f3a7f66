package options

import (
	"bytes"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/pkg/limiter/memory"
)

// serveCase is one Serve call and the error it must return.
type serveCase struct {
	name string
	args []string
	env  map[string]string
	want string // "" = accepted
}

// checkServe runs each case as a subtest: Serve refuses everything serve
// would refuse at start that needs no file and no network, naming the flag
// or variable as the user set it, the value and what is accepted.
func checkServe(t *testing.T, cases []serveCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Serve(tc.args, func(k string) string { return tc.env[k] }, nil)
			if got := fmt.Sprint(err); tc.want == "" && err != nil || tc.want != "" && got != tc.want {
				t.Fatalf("Serve(%q) = %v, want %q", tc.args, err, tc.want)
			}
		})
	}
}

func TestServeErrors(t *testing.T) {
	const rules = "rules.yaml"
	listen := []string{"--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"}
	checkServe(t, []serveCase{
		{"no config", nil, nil, "--config (or ENVOY_RLS_CONFIG) is not set: must be the rule file or directory to serve"},
		{"argument", []string{"--config", rules, "extra"}, nil, `serve takes no arguments (got ["extra"]): the rules are --config PATH`},
		{"unknown flag", []string{"--config", rules, "--colour"}, nil, `unknown flag --colour ("envoy-rls serve --help" lists the flags)`},
		{"no value", []string{"--config"}, nil, `--config needs a value ("envoy-rls serve --help" says which)`},
		{"bad store", []string{"--config", rules, "--store", "etcd"}, nil, `--store="etcd": must be memory or redis`},
		{"bad headers", []string{"--config", rules, "--default-headers", "some"}, nil, `--default-headers="some": must be full, retry_after or none`},
		{"bad env duration", []string{"--config", rules}, map[string]string{"ENVOY_RLS_DRAIN_TIMEOUT": "soon"}, `ENVOY_RLS_DRAIN_TIMEOUT="soon": must be a positive duration such as 15s`},
		{"env duration zero", []string{"--config", rules}, map[string]string{"ENVOY_RLS_DRAIN_TIMEOUT": "0s"}, `ENVOY_RLS_DRAIN_TIMEOUT="0s": must be a positive duration such as 15s`},
		{"bad env int", []string{"--config", rules}, map[string]string{"ENVOY_RLS_REDIS_POOL_SIZE": "abc"}, `ENVOY_RLS_REDIS_POOL_SIZE="abc": must be an integer between 1 and 256`},
		{"bad flag int", []string{"--config", rules, "--redis-pool-size=abc"}, nil, `--redis-pool-size="abc": must be an integer between 1 and 256`},
		{"bad env bool", []string{"--config", rules}, map[string]string{"ENVOY_RLS_LOCAL_CACHE": "yes"}, `ENVOY_RLS_LOCAL_CACHE="yes": must be true or false`},
		{"bad level", []string{"--config", rules, "--log-level", "loud"}, nil, `--log-level="loud": must be debug, info, warn or error`},
		{"gc percent too low", []string{"--config", rules, "--gc-percent", "5"}, nil, `--gc-percent="5": must be 0 (automatic) or an integer between 10 and 10000`},
		{"gc percent too high", []string{"--config", rules}, map[string]string{"ENVOY_RLS_GC_PERCENT": "20000"}, `ENVOY_RLS_GC_PERCENT="20000": must be 0 (automatic) or an integer between 10 and 10000`},
		{"readiness", []string{"--config", rules, "--readiness", "redis"}, nil, `--readiness="redis": must be rules or store`},
		{"readiness env", []string{"--config", rules}, map[string]string{"ENVOY_RLS_READINESS": "always"}, `ENVOY_RLS_READINESS="always": must be rules or store`},
		{"default failure mode", []string{"--config", rules, "--default-failure-mode", "fallback"}, nil, `--default-failure-mode="fallback": must be closed, open or local`},
		{"replicas hint zero", []string{"--config", rules, "--replicas-hint", "0"}, nil, `--replicas-hint="0": must be an integer between 1 and 10000`},
		{"replicas hint env", []string{"--config", rules}, map[string]string{"ENVOY_RLS_REPLICAS_HINT": "two"}, `ENVOY_RLS_REPLICAS_HINT="two": must be an integer between 1 and 10000`},
		{"local fallback entries", []string{"--config", rules, "--local-fallback-max-entries", "0"}, nil, `--local-fallback-max-entries="0": must be a positive integer`},
		{"journal entries zero", []string{"--config", rules, "--journal-max-entries", "0"}, nil, `--journal-max-entries="0": must be an integer between 1 and 10000000`},
		{"journal entries env", []string{"--config", rules}, map[string]string{"ENVOY_RLS_JOURNAL_MAX_ENTRIES": "20000000"}, `ENVOY_RLS_JOURNAL_MAX_ENTRIES="20000000": must be an integer between 1 and 10000000`},
		{"journal file memory", []string{"--config", rules, "--journal-file", "/var/lib/envoy-rls/journal"}, nil, `--journal-file="/var/lib/envoy-rls/journal": must be empty with --store memory (the journal holds what Redis could not record)`},
		{"flag wins over env", []string{"--config", rules, "--redis-timeout", "2m"}, map[string]string{"ENVOY_RLS_REDIS_TIMEOUT": "1s"}, `--redis-timeout="2m": must be a duration between 1ms and 1m0s`},
		{"several problems", []string{"--config", rules, "--store", "etcd"}, map[string]string{"ENVOY_RLS_LOG_LEVEL": "loud", "ENVOY_RLS_MEMORY_MAX_ENTRIES": "x"},
			`ENVOY_RLS_MEMORY_MAX_ENTRIES="x": must be 0 (automatic) or a positive integer` + "\n" + `--store="etcd": must be memory or redis` + "\n" + `ENVOY_RLS_LOG_LEVEL="loud": must be debug, info, warn or error`},
		{"redis without address", []string{"--config", rules, "--store", "redis"}, map[string]string{SecretEnv: "a-shared-secret-of-32-bytes-----"}, "--redis-addr (or ENVOY_RLS_REDIS_ADDR) is not set: must be at least one host:port"},
		{"redis without secret", append([]string{"--config", rules, "--store", "redis", "--redis-addr", "127.0.0.1:1"}, listen...), nil, "--store redis needs an HMAC secret shared by every replica: set --hmac-secret-file (or ENVOY_RLS_HMAC_SECRET_FILE) or ENVOY_RLS_HMAC_SECRET"},
		{"short secret", append([]string{"--config", rules}, listen...), map[string]string{SecretEnv: "short"}, "ENVOY_RLS_HMAC_SECRET: must be at least 16 bytes (it holds 5)"},
		{"local cache size", []string{"--config", rules, "--local-cache-size", "3"}, nil, `--local-cache-size="3": must be an integer of at least 64`},
	})
}

func TestServeChecks(t *testing.T) {
	base := []string{"--config", "rules"}
	redis := []string{"--config", "rules", "--store", "redis", "--redis-addr", "10.0.0.1:6379", "--hmac-secret-file", "/nonexistent/secret"}
	checkServe(t, []serveCase{
		{"defaults", base, nil, ""},
		{"redis", redis, map[string]string{SecretEnv: "a-shared-secret-of-32-bytes-----"}, ""},
		{"redis with a journal file", append(redis, "--journal-file", "/var/lib/envoy-rls/journal", "--journal-max-entries", "5"), map[string]string{SecretEnv: "a-shared-secret-of-32-bytes-----"}, ""},
		{"redis without a secret", []string{"--config", "rules", "--store", "redis", "--redis-addr", "10.0.0.1:6379"}, nil, "--store redis needs an HMAC secret shared by every replica: set --hmac-secret-file (or ENVOY_RLS_HMAC_SECRET_FILE) or ENVOY_RLS_HMAC_SECRET"},
		{"short secret", base, map[string]string{SecretEnv: "short"}, "ENVOY_RLS_HMAC_SECRET: must be at least 16 bytes (it holds 5)"},
		{"files are not read", append(redis, "--hmac-secret-file", "/nonexistent", "--redis-password-file", "/nonexistent", "--redis-tls-ca", "/nonexistent"), nil, ""},
		{"help", []string{"-h"}, nil, flag.ErrHelp.Error()},
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
		{"log level", append(base, "--log-level", "verbose"), nil, `--log-level="verbose": must be debug, info, warn or error`},
		{"header mode", base, map[string]string{"ENVOY_RLS_DEFAULT_HEADERS": "all"}, `ENVOY_RLS_DEFAULT_HEADERS="all": must be full, retry_after or none`},
		{"gc percent", append(base, "--gc-percent", "-1"), nil, `--gc-percent="-1": must be 0 (automatic) or an integer between 10 and 10000`},
		{"drain timeout", append(base, "--drain-timeout", "-1s"), nil, `--drain-timeout="-1s": must be a positive duration such as 15s`},
		{"memory entries", append(base, "--memory-max-entries", "-5"), nil, `--memory-max-entries="-5": must be 0 (automatic) or a positive integer`},
		{"override policies zero", append(base, "--override-max-policies", "0"), nil, `--override-max-policies="0": must be an integer from 1 to 65536`},
		{"override policies too many", base, map[string]string{"ENVOY_RLS_OVERRIDE_MAX_POLICIES": "65537"}, `ENVOY_RLS_OVERRIDE_MAX_POLICIES="65537": must be an integer from 1 to 65536`},
		{"override policies at the bound", append(base, "--override-max-policies", "65536"), nil, ""},
		{"local cache size", append(base, "--local-cache-size", "3"), nil, `--local-cache-size="3": must be an integer of at least 64`},
	})
}

// The --grpc-* limits refuse values out of range.
func TestServeTransportChecks(t *testing.T) {
	base := []string{"--config", "rules"}
	checkServe(t, []serveCase{
		{"defaults", base, nil, ""},
		{"all set", append(base, "--grpc-max-concurrent-streams", "1", "--grpc-max-connections", "1048576", "--grpc-first-call-timeout", "0", "--grpc-receive-timeout", "1ms", "--grpc-max-incomplete-requests", "1",
			"--grpc-max-recv-msg-size", "4096", "--grpc-max-connection-idle", "0", "--grpc-max-connection-age", "0", "--grpc-max-connection-age-grace", "0",
			"--grpc-keepalive-time", "1s", "--grpc-keepalive-timeout", "1s", "--grpc-keepalive-min-time", "0", "--grpc-keepalive-permit-without-stream=false"), nil, ""},
		{"streams zero", append(base, "--grpc-max-concurrent-streams", "0"), nil, `--grpc-max-concurrent-streams="0": must be an integer between 1 and 4294967295`},
		{"streams above uint32", base, map[string]string{"ENVOY_RLS_GRPC_MAX_CONCURRENT_STREAMS": "4294967296"}, `ENVOY_RLS_GRPC_MAX_CONCURRENT_STREAMS="4294967296": must be an integer between 1 and 4294967295`},
		{"connections zero", append(base, "--grpc-max-connections", "0"), nil, `--grpc-max-connections="0": must be an integer between 1 and 1048576`},
		{"connections not a number", append(base, "--grpc-max-connections", "many"), nil, `--grpc-max-connections="many": must be an integer`},
		{"first call timeout negative", base, map[string]string{"ENVOY_RLS_GRPC_FIRST_CALL_TIMEOUT": "-1s"}, `ENVOY_RLS_GRPC_FIRST_CALL_TIMEOUT="-1s": must be 0 (never) or a positive duration such as 5s`},
		{"receive timeout zero", base, map[string]string{"ENVOY_RLS_GRPC_RECEIVE_TIMEOUT": "0s"}, `ENVOY_RLS_GRPC_RECEIVE_TIMEOUT="0s": must be a positive duration such as 5s`},
		{"incomplete requests zero", append(base, "--grpc-max-incomplete-requests", "0"), nil, `--grpc-max-incomplete-requests="0": must be an integer between 1 and 1048576`},
		{"message size too small", append(base, "--grpc-max-recv-msg-size", "100"), nil, `--grpc-max-recv-msg-size="100": must be a size in bytes between 4096 and 2147483647`},
		{"idle negative", append(base, "--grpc-max-connection-idle", "-1s"), nil, `--grpc-max-connection-idle="-1s": must be 0 (never) or a positive duration such as 5m`},
		{"age negative", append(base, "--grpc-max-connection-age", "-1s"), nil, `--grpc-max-connection-age="-1s": must be 0 (never) or a positive duration such as 5m`},
		{"grace negative", append(base, "--grpc-max-connection-age-grace", "-1s"), nil, `--grpc-max-connection-age-grace="-1s": must be 0 or a positive duration such as 30s`},
		{"keepalive time below 1s", append(base, "--grpc-keepalive-time", "500ms"), nil, `--grpc-keepalive-time="500ms": must be a duration of at least 1s`},
		{"keepalive timeout below 1s", append(base, "--grpc-keepalive-timeout", "0s"), nil, `--grpc-keepalive-timeout="0s": must be a duration of at least 1s`},
		{"keepalive min time negative", append(base, "--grpc-keepalive-min-time", "-5s"), nil, `--grpc-keepalive-min-time="-5s": must be 0 or a positive duration such as 5s`},
		{"permit without stream", append(base, "--grpc-keepalive-permit-without-stream=maybe"), nil, `--grpc-keepalive-permit-without-stream="maybe": must be true or false`},
	})
}

// The --grpc-tls-* flags that cannot work together are refused without
// reading the files.
func TestServeTLSChecks(t *testing.T) {
	base := []string{"--config", "rules"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--grpc-tls-cert", "c.pem"}, `--grpc-tls-key (or ENVOY_RLS_GRPC_TLS_KEY) is not set: must be given together with --grpc-tls-cert`},
		{[]string{"--grpc-tls-key", "k.pem"}, `--grpc-tls-cert (or ENVOY_RLS_GRPC_TLS_CERT) is not set: must be given together with --grpc-tls-key`},
		{[]string{"--grpc-tls-client-ca", "ca.pem"}, `--grpc-tls-cert (or ENVOY_RLS_GRPC_TLS_CERT) is not set: must be set when --grpc-tls-client-ca is`},
		{[]string{"--grpc-tls-cert", "c", "--grpc-tls-key", "k", "--grpc-tls-client-san", "x"}, `--grpc-tls-client-ca (or ENVOY_RLS_GRPC_TLS_CLIENT_CA) is not set: must be set when --grpc-tls-client-san is`},
	} {
		_, _, err := Serve(append(base, tc.args...), noEnv, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want %q", tc.args, err, tc.want)
		}
	}
}

func noEnv(string) string { return "" }

// writeFile writes content to the file name in dir and returns its path.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// The serve help lists every flag as --name with its variable and default,
// without the flag package's artefacts.
func TestPrintUsage(t *testing.T) {
	var o Options
	fs := NewFlagSet(&o)
	var out bytes.Buffer
	PrintUsage(&out, ServeUsage, fs)
	help := out.String()
	fs.VisitAll(func(f *flag.Flag) {
		if !strings.Contains(help, "\n  --"+f.Name+" ") && !strings.Contains(help, "\n  --"+f.Name+"\n") {
			t.Errorf("no --%s line", f.Name)
		}
		if !strings.Contains(help, "("+EnvName(f.Name)) {
			t.Errorf("--%s without %s", f.Name, EnvName(f.Name))
		}
	})
	for _, want := range []string{
		"  --default-headers MODE\n      response headers of the rules that set no headers field of their own:\n      full, retry_after or none\n      (ENVOY_RLS_DEFAULT_HEADERS, default \"full\")\n",
		"  --redis-pool-size N\n",
		"(ENVOY_RLS_DRAIN_TIMEOUT, default 15s)",
		"(ENVOY_RLS_CONFIG)\n",
		"  --local-cache\n",
	} {
		if !strings.Contains(help, want) {
			t.Errorf("help lacks %q", want)
		}
	}
	for i, line := range strings.Split(help, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "-") && !strings.HasPrefix(strings.TrimSpace(line), "--") {
			t.Errorf("line %d has a single-dash flag: %q", i+1, line)
		}
		if strings.Contains(line, "`") || len(line) > HelpWidth {
			t.Errorf("line %d: %q", i+1, line)
		}
	}
}

func TestGCPercent(t *testing.T) {
	for _, tc := range []struct {
		name     string
		opts     Options
		gogc     string
		want     int
		wantFrom string
	}{
		{"memory store", Options{Store: "memory"}, "", MemoryGCPercent, "automatic (memory store)"},
		{"GOGC wins over the memory store's", Options{Store: "memory"}, "100", 0, "GOGC"},
		{"redis store", Options{Store: "redis"}, "", RedisGCPercent, "automatic (redis store)"},
		{"GOGC wins over automatic", Options{Store: "redis"}, "150", 0, "GOGC"},
		{"the flag wins over GOGC", Options{Store: "memory", GCPercent: 250}, "150", 250, "--gc-percent"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, from := GCPercent(&tc.opts, func(k string) string {
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
			got, from := MemoryBound(&Options{MemoryMaxEntries: tc.flag}, tc.limit)
			if got != tc.want || from != tc.wantFrom {
				t.Fatalf("memoryBound = %d, %q; want %d, %q", got, from, tc.want, tc.wantFrom)
			}
		})
	}
	// A full store at the bound for 256Mi keeps at most MemoryShare of it.
	n, _ := MemoryBound(&Options{}, 256*mi)
	if float64(n)*memory.MaxBytesPerEntry > MemoryShare*256*mi {
		t.Fatalf("%d entries x %d bytes exceed %v of 256 MiB", n, memory.MaxBytesPerEntry, MemoryShare)
	}
}
