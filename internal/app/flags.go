package app

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"time"

	"go.uber.org/zap/zapcore"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/denycache"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/failover"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/memory"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/redis"
)

// EnvPrefix prefixes the environment variable of every flag: --grpc-addr is
// also ENVOY_RLS_GRPC_ADDR. A flag given on the command line wins over its
// variable.
const EnvPrefix = "ENVOY_RLS_"

// SecretEnv holds the HMAC secret itself when --hmac-secret-file is not set.
const SecretEnv = "ENVOY_RLS_HMAC_SECRET"

// Defaults of the serve flags.
const (
	DefaultGRPCAddr         = ":8081"
	DefaultAdminAddr        = ":8080"
	DefaultStore            = "memory"
	DefaultLogLevel         = "info"
	DefaultHeaders          = "full"
	DefaultMemoryMaxEntries = memory.DefaultMaxEntries
	// MemoryShare is the part of the Go runtime's memory limit (GOMEMLIMIT)
	// that the automatic memory bound lets a full store take, at
	// memory.MaxBytesPerEntry: the rest holds everything else (32-36 MiB
	// RSS under load with the memory store, docs/performance.md), the
	// garbage of a table that doubles, and the collector's headroom. With
	// a 256 MiB limit: 493,447 entries, whose full tables take 100 MiB.
	MemoryShare            = 0.5
	DefaultDrainTimeout    = 15 * time.Second
	DefaultRedisMode       = "auto"
	DefaultRedisTimeout    = redis.DefaultTimeout
	DefaultRedisPoolSize   = redis.DefaultPoolSize
	DefaultRedisFlushDelay = redis.DefaultMaxFlushDelay
	DefaultRedisGroupKeys  = redis.DefaultGroupMaxKeys
	DefaultRedisInFlight   = redis.DefaultGroupInFlight
	DefaultLocalCache      = true
	DefaultLocalCacheSize  = denycache.DefaultSize
	// DefaultGCPercent (0) lets the binary pick the garbage collector's
	// target: RedisGCPercent with the Redis store unless GOGC is set, the
	// Go runtime's own (GOGC, default 100) otherwise.
	DefaultGCPercent = 0
	// RedisGCPercent is the automatic target with the Redis store. Its heap
	// holds no limit state (a few MiB live: rules, pools, buffers), so
	// letting it grow to three times that before a cycle costs little
	// memory. Measured under load (docs/performance.md): 400 against Go's
	// 100 served 0–21 % more decisions/s with 5–18 µs less server CPU per
	// decision; 200 did as well as 400 within noise, with peak RSS 37 /
	// 45.5 MiB at 64 / 256 calls instead of 46 / 60. The memory store keeps
	// Go's default: its live heap can be hundreds of MiB.
	RedisGCPercent = 200
	// MinGCPercent and MaxGCPercent bound an explicit --gc-percent.
	MinGCPercent = 10
	MaxGCPercent = 10_000
)

// Options are the parsed serve flags.
type Options struct {
	Config           string
	GRPCAddr         string
	AdminAddr        string
	AdminTokenFile   string
	Store            string
	HMACSecretFile   string
	LogLevel         string
	DefaultHeaders   string
	MemoryMaxEntries int
	DrainTimeout     time.Duration
	Pprof            bool
	LocalCache       bool
	LocalCacheSize   int
	GCPercent        int
	Tracing          bool
	// ConfigLimits bound the whole rule set (rulelimits.go).
	ConfigLimits ruleLimits

	// The --redis-* values as given (files not read): redisValues
	// (redisflags.go) is their one conversion to a redis.Config.
	RedisAddr           string
	RedisMode           string
	RedisSentinelMaster string
	RedisUsername       string
	RedisPasswordFile   string
	RedisTLS            bool
	RedisTLSCA          string
	RedisTLSCert        string
	RedisTLSKey         string
	RedisTimeout        time.Duration
	RedisPoolSize       int
	RedisMaxFlushDelay  time.Duration
	RedisGroupMaxKeys   int
	RedisGroupInFlight  int

	// RedisTLSSkipHostname verifies the server's certificate chain but not
	// the name in it.
	RedisTLSSkipHostname bool

	// Readiness and the local fallback (fallbackflags.go).
	Readiness               string
	DefaultFailureMode      string
	ReplicasHint            int
	LocalFallbackMaxEntries int
	// The --grpc-* limits on connections, streams and receive time
	// (transport.go).
	transportOptions
	// The --statsd-* flags and --near-limit-ratio (statsd.go).
	statsdOptions
	// The --audit-* flags (audit.go).
	auditOptions
	// --config-source and the --xds-* flags (xds.go).
	xdsOptions
	// The --top-* flags (topflags.go).
	topOptions

	// Compatibility with the reference service's deployments (compat.go).
	compatOptions

	// given records, by flag name, the text of each value set on the
	// command line or from the environment, so errors quote what the user
	// wrote and where.
	given map[string]given
}

func serveFlags(o *Options) *flag.FlagSet {
	fs := flag.NewFlagSet("envoy-rls serve", flag.ContinueOnError)
	fs.StringVar(&o.Config, "config", "", "rule file or directory of rule files (required)")
	fs.StringVar(&o.GRPCAddr, "grpc-addr", DefaultGRPCAddr, "gRPC listen address (RateLimitService, health, reflection); unix:PATH listens on a unix socket")
	fs.StringVar(&o.AdminAddr, "admin-addr", DefaultAdminAddr, "admin HTTP listen address (/healthz, /readyz, /metrics, /config)")
	fs.StringVar(&o.AdminTokenFile, "admin-token-file", "", "file of admin API bearer tokens, one name:token per line (several for rotation; re-read when it changes); without it the admin API (/v1/...) and the console (/ui) are off")
	fs.StringVar(&o.Store, "store", DefaultStore, "limit store: memory or redis")
	fs.StringVar(&o.HMACSecretFile, "hmac-secret-file", "", "file holding the HMAC secret that pseudonymizes subjects (else $"+SecretEnv+"; required with --store redis)")
	fs.StringVar(&o.LogLevel, "log-level", DefaultLogLevel, "log level: debug, info, warn, error")
	fs.StringVar(&o.DefaultHeaders, "default-headers", DefaultHeaders, "response headers of the rules that set no headers field of their own: full, retry_after or none")
	fs.IntVar(&o.MemoryMaxEntries, "memory-max-entries", 0, "memory store: the most subjects held at once; 0 = automatic: 1000000, or fewer when GOMEMLIMIT is set, so that a full store takes at most half of it (docs/operations.md)")
	fs.DurationVar(&o.DrainTimeout, "drain-timeout", DefaultDrainTimeout, "on SIGTERM/SIGINT, how long in-flight calls may take to finish")
	fs.BoolVar(&o.LocalCache, "local-cache", DefaultLocalCache, "answer repeated store denials (fixed window, token bucket) locally until their retry time: a hot subject costs one store call per window instead of one per request; exact (see docs/performance.md)")
	fs.IntVar(&o.LocalCacheSize, "local-cache-size", DefaultLocalCacheSize, fmt.Sprintf("local deny cache: the most denials held at once (at least %d)", denycache.Shards))
	fs.IntVar(&o.GCPercent, "gc-percent", DefaultGCPercent, "garbage collector target, as GOGC: 0 = automatic (200 with --store redis unless GOGC is set, else the Go runtime's), or 10–10000")
	fs.BoolVar(&o.Pprof, "pprof", false, "serve net/http/pprof profiles under /debug/pprof/ on the admin address (CPU and heap profiles of live traffic; off by default)")
	addRuleLimitFlags(fs, &o.ConfigLimits)
	fs.StringVar(&o.RedisAddr, "redis-addr", "", "Redis address(es), comma-separated (sentinels in sentinel mode, seeds in cluster mode), or the absolute path of a standalone server's Unix socket")
	fs.StringVar(&o.RedisMode, "redis-mode", DefaultRedisMode, "Redis deployment: auto (asks the server), standalone, sentinel or cluster")
	fs.StringVar(&o.RedisSentinelMaster, "redis-sentinel-master", "", "Redis Sentinel master name (sentinel mode)")
	fs.StringVar(&o.RedisUsername, "redis-username", "", "Redis ACL user name")
	fs.StringVar(&o.RedisPasswordFile, "redis-password-file", "", "file holding the Redis password")
	fs.BoolVar(&o.RedisTLS, "redis-tls", false, "connect to Redis over TLS")
	fs.StringVar(&o.RedisTLSCA, "redis-tls-ca", "", "PEM CA bundle that verifies the Redis server (default: system roots)")
	fs.StringVar(&o.RedisTLSCert, "redis-tls-cert", "", "PEM client certificate for Redis mutual TLS")
	fs.StringVar(&o.RedisTLSKey, "redis-tls-key", "", "PEM client key for Redis mutual TLS")
	fs.BoolVar(&o.RedisTLSSkipHostname, "redis-tls-skip-hostname-verification", false, "verify the Redis server's certificate against the CA but not the name in it (for servers reached by an address their certificate does not name)")
	fs.DurationVar(&o.RedisTimeout, "redis-timeout", DefaultRedisTimeout, fmt.Sprintf("upper bound of one Redis round trip, 1ms–%v (the gRPC deadline may cut it shorter)", redis.MaxTimeout))
	fs.IntVar(&o.RedisPoolSize, "redis-pool-size", DefaultRedisPoolSize, fmt.Sprintf("pipelined Redis connections per node, 1–%d", redis.MaxPoolSize))
	fs.DurationVar(&o.RedisMaxFlushDelay, "redis-max-flush-delay", DefaultRedisFlushDelay, "how long a Redis connection may wait to gather pipelined commands into one write (0: flush at once; at most 1ms)")
	fs.IntVar(&o.RedisGroupMaxKeys, "redis-group-max-keys", DefaultRedisGroupKeys, fmt.Sprintf("group commit: the most limits one Redis program run evaluates for concurrent Envoy requests, 1–%d (1: every request runs alone)", redis.MaxGroupMaxKeys))
	fs.IntVar(&o.RedisGroupInFlight, "redis-group-in-flight", DefaultRedisInFlight, fmt.Sprintf("group commit: program runs of one Redis hash slot in progress at once, 1–%d", redis.MaxGroupInFlight))
	fs.BoolVar(&o.Tracing, "tracing", false, "export OpenTelemetry traces by OTLP, configured by the OTEL_* variables (docs/operations.md, Tracing); also on when OTEL_EXPORTER_OTLP_ENDPOINT is set, off when OTEL_SDK_DISABLED=true")
	fallbackFlags(fs, o)
	transportFlags(fs, &o.transportOptions)
	statsdFlags(fs, &o.statsdOptions)
	auditFlags(fs, &o.auditOptions)
	xdsFlags(fs, &o.xdsOptions)
	topFlags(fs, &o.topOptions)
	compatFlags(fs, &o.compatOptions)
	return fs
}

// accepts says what a flag takes, as errors put it after "must be": for
// the flags Options.check refuses by name, and for those whose type alone
// does not say it when a value does not parse; acceptsOf falls back on the
// type. (A --redis-* value that parses is checked by Options.redisCheck,
// whose flagError says what the redis package accepts; the redis entries
// here are the package's words too, see redisWant.) Read only.
var accepts = map[string]string{
	"store":                 "memory or redis",
	"log-level":             "debug, info, warn or error",
	"default-headers":       "full, retry_after or none",
	"memory-max-entries":    "0 (automatic) or a positive integer",
	"drain-timeout":         "a positive duration such as 15s",
	"local-cache-size":      fmt.Sprintf("an integer of at least %d", denycache.Shards),
	"gc-percent":            fmt.Sprintf("0 (automatic) or an integer between %d and %d", MinGCPercent, MaxGCPercent),
	"redis-timeout":         redisWant(redis.Config{Timeout: -1}),
	"redis-pool-size":       redisWant(redis.Config{PoolSize: -1}),
	"redis-max-flush-delay": redisWant(redis.Config{MaxFlushDelay: -1}),
	"redis-group-max-keys":  redisWant(redis.Config{GroupMaxKeys: -1}),
	"redis-group-in-flight": redisWant(redis.Config{GroupInFlight: -1}),

	"readiness":                  ReadinessRules + " or " + ReadinessStore,
	"default-failure-mode":       "closed, open or local",
	"replicas-hint":              fmt.Sprintf("an integer between 1 and %d", failover.MaxReplicas),
	"local-fallback-max-entries": "a positive integer",
	// rulelimits.go
	"config-max-bytes":       "a positive number of bytes",
	"config-max-descriptors": "a positive integer",
}

// acceptsOf is what f takes: its entry in accepts, else what its type
// parses.
func acceptsOf(f *flag.Flag) string {
	if a, ok := accepts[f.Name]; ok {
		return a
	}
	if a, ok := xdsAccepts[f.Name]; ok {
		return a
	}
	if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
		return "true or false"
	}
	if _, err := time.ParseDuration(f.DefValue); err == nil {
		return "a duration such as 500ms or 2s"
	}
	return "an integer"
}

// check validates option values that the flag package cannot: every value
// the binary would refuse at start that can be decided without reading a
// file or dialling. It reports every problem found, one per line.
func (o *Options) check() error {
	var errs []error
	bad := func(name string) {
		errs = append(errs, fmt.Errorf("%s: must be %s", label(name, o.given), accepts[name]))
	}
	if o.Config == "" && o.ConfigSource != SourceXDS {
		errs = append(errs, fmt.Errorf("%s: must be the rule file or directory to serve", label("config", o.given)))
	}
	switch o.Store {
	case "memory", "redis":
	default:
		bad("store")
	}
	if _, err := zapcore.ParseLevel(o.LogLevel); err != nil {
		bad("log-level")
	}
	if _, ok := headerMode(o.DefaultHeaders); !ok {
		bad("default-headers")
	}
	if o.MemoryMaxEntries < 0 {
		bad("memory-max-entries")
	}
	if o.LocalCacheSize < denycache.Shards {
		bad("local-cache-size")
	}
	if o.DrainTimeout <= 0 {
		bad("drain-timeout")
	}
	if o.GCPercent != 0 && (o.GCPercent < MinGCPercent || o.GCPercent > MaxGCPercent) {
		bad("gc-percent")
	}
	errs = append(errs, o.ConfigLimits.check(o.given)...)
	errs = append(errs, o.xdsOptions.check(o.given)...)
	// The redis package takes zero as its default; the flags have defaults
	// of their own, so a zero given here is a mistake.
	if o.RedisTimeout == 0 {
		bad("redis-timeout")
	}
	if o.RedisPoolSize == 0 {
		bad("redis-pool-size")
	}
	for _, name := range o.fallbackCheck() {
		bad(name)
	}
	errs = append(errs, o.transportOptions.check(o.given))
	errs = append(errs, o.statsdOptions.check(o.given))
	errs = append(errs, o.auditOptions.check(o.given, o.RedisAddr))
	errs = append(errs, o.topOptions.check(o.given))
	errs = append(errs, o.compatOptions.check(o.given)...)
	var err error
	if o.Store == "redis" {
		err = o.redisCheck()
	} else {
		err = o.redisCheckValues()
	}
	var fe *flagError
	switch {
	case errors.As(err, &fe):
		errs = append(errs, fmt.Errorf("%s: must be %s", label(fe.Flag, o.given), fe.Want))
	case err != nil:
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// headerMode is the mode a --default-headers value names; false for a
// value it does not know (Options.check reports it).
func headerMode(s string) (descriptors.HeaderMode, bool) {
	switch s {
	case "full":
		return descriptors.HeadersFull, true
	case "retry_after":
		return descriptors.HeadersRetryAfter, true
	case "none":
		return descriptors.HeadersNone, true
	}
	return 0, false
}

// memoryBound is the memory store's entry bound and where it comes from.
// memLimit is the Go runtime's memory limit (debug.SetMemoryLimit(-1):
// GOMEMLIMIT, math.MaxInt64 when unset). Automatic (--memory-max-entries
// 0) is DefaultMemoryMaxEntries, lowered under a memory limit to
// floor(memLimit x MemoryShare / memory.MaxBytesPerEntry), so that the
// store refuses new subjects before the process reaches the limit.
func memoryBound(o *Options, memLimit int64) (int, string) {
	switch {
	case o.MemoryMaxEntries > 0:
		return o.MemoryMaxEntries, "--memory-max-entries"
	case memLimit <= 0 || memLimit == math.MaxInt64:
		return DefaultMemoryMaxEntries, "automatic (no GOMEMLIMIT)"
	}
	n := int64(float64(memLimit) * MemoryShare / memory.MaxBytesPerEntry)
	if n >= DefaultMemoryMaxEntries {
		return DefaultMemoryMaxEntries, "automatic (GOMEMLIMIT allows the default)"
	}
	return int(max(n, 1)), "automatic (GOMEMLIMIT)"
}

// gcPercent is the garbage collector target serve sets, and where it comes
// from; 0 means leave the runtime's (GOGC's) alone.
func gcPercent(o *Options, getenv func(string) string) (int, string) {
	switch {
	case o.GCPercent != 0:
		return o.GCPercent, "--gc-percent"
	case getenv("GOGC") != "":
		return 0, "GOGC"
	case o.Store == "redis":
		return RedisGCPercent, "automatic (redis store)"
	default:
		return 0, "Go default"
	}
}
