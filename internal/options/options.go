// Package options is the serve command's settings: its flags, the
// ENVOY_RLS_* variable of each, the checks that report every refused value
// at once (naming the flag or variable as the user wrote it, the value and
// what is accepted), the help text, and the conversion of the values to
// the configurations of the packages that serve (reading the files the
// flags name). It runs nothing.
package options

import (
	"flag"
	"fmt"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/grpcserve"
	"github.com/envoy-rls/envoy-rls/internal/observe"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/denycache"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/memory"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/redis"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
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
	// memory.MaxBytesPerEntry: the rest holds everything else (the
	// process's own memory under load, docs/performance.md), the garbage
	// of a table that doubles, and the collector's headroom. With a 256 MiB
	// limit: 256 MiB × 0.5 / 272 bytes = 493,447 entries.
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
	// target unless GOGC is set: RedisGCPercent with the Redis store,
	// MemoryGCPercent with the memory store.
	DefaultGCPercent = 0
	// RedisGCPercent is the automatic target with the Redis store. Its heap
	// holds no limit state (rules, pools, buffers), so letting it grow to
	// three times that before a cycle costs little memory and saves server
	// CPU per decision; a higher target saved no more and took more memory
	// (docs/performance.md, --gc-percent).
	RedisGCPercent = 200
	// MemoryGCPercent is the automatic target with the memory store, whose
	// live heap grows with its entries (up to hundreds of MiB): without
	// GOMEMLIMIT, serve also sets a soft memory limit (MemoryHeapLimit), so
	// that a store near its entry bound peaks no higher than it does with
	// Go's default target (100), while a small heap is collected less
	// often.
	MemoryGCPercent = 200
	// MemoryHeapBase and MemoryPeakBytesPerEntry make MemoryHeapLimit: the
	// process's memory beyond the store (rules, top-k sketches,
	// connections and their buffers), and the peak per entry of the bound
	// measured with Go's default target on a full store
	// (docs/deploy.md, the memory store's sizing).
	MemoryHeapBase          = 64 << 20
	MemoryPeakBytesPerEntry = 360
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
	// OverrideMaxPolicies is rls.Config.MaxOverridePolicies.
	OverrideMaxPolicies int
	DrainTimeout        time.Duration
	Pprof               bool
	LocalCache          bool
	LocalCacheSize      int
	GCPercent           int
	Tracing             bool
	// ConfigLimits bound the whole rule set (rules.go).
	ConfigLimits RuleLimits

	// The --redis-* values as given (files not read): redisValues
	// (redis.go) is their one conversion to a redis.Config.
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
	// RedisPassword is the Redis password given other than by a file (the
	// reference's REDIS_AUTH); --redis-password-file wins.
	RedisPassword string

	// Readiness and the local fallback (fallback.go).
	Readiness               string
	DefaultFailureMode      string
	ReplicasHint            int
	LocalFallbackMaxEntries int
	// The charge journal's flags (journal.go).
	journalOptions
	// GRPC holds the --grpc-* limits on connections, streams and receive
	// time (grpc.go).
	GRPC grpcserve.Limits
	// The --grpc-tls-* flags (grpc.go).
	grpcTLSOptions
	// The --statsd-* flags and --near-limit-ratio (observability.go).
	statsdOptions
	// The --audit-* flags (observability.go).
	auditOptions
	// The --top-* flags (observability.go).
	topOptions
	// The --reference-metrics-* flags (refmetrics.go).
	refMetricsOptions

	// --config-source and the xDS client's flags (xds.go).
	xdsOptions

	// The settings of the reference service's deployments (reference.go).
	referenceOptions
	// CompatWarnings are the reference settings accepted and ignored, to
	// log at start.
	CompatWarnings []string

	// Given records, by flag name, the text of each value set on the
	// command line, from the environment or from presets, so errors quote
	// what the user wrote and where.
	Given map[string]Given
}

// NewFlagSet defines the serve flags on o's fields.
func NewFlagSet(o *Options) *flag.FlagSet {
	fs := flag.NewFlagSet("envoy-rls serve", flag.ContinueOnError)
	fs.StringVar(&o.Config, "config", "", "rule file or directory of rule files (required)")
	fs.StringVar(&o.GRPCAddr, "grpc-addr", DefaultGRPCAddr, "gRPC listen address (RateLimitService, health, reflection); unix:PATH listens on a unix socket")
	fs.StringVar(&o.AdminAddr, "admin-addr", DefaultAdminAddr, "admin HTTP listen address (/healthz, /readyz, /metrics, /config)")
	fs.StringVar(&o.AdminTokenFile, "admin-token-file", "", "file of admin bearer tokens, one name:token per line, mode 0600 (several for rotation; re-read every second; a file that turns bad leaves no token in force, a bad file at start stops it); guards the admin API (/v1/...), the console (/ui), /config and the profiles; without it the API and the console are off and /config shows rule values as digests")
	fs.StringVar(&o.Store, "store", DefaultStore, "limit store: memory or redis")
	fs.StringVar(&o.HMACSecretFile, "hmac-secret-file", "", "file holding the HMAC secret that pseudonymizes subjects (else $"+SecretEnv+"; required with --store redis)")
	fs.StringVar(&o.LogLevel, "log-level", DefaultLogLevel, "log level: debug, info, warn, error")
	fs.StringVar(&o.DefaultHeaders, "default-headers", DefaultHeaders, "response headers of the rules that set no headers field of their own: full, retry_after or none")
	fs.IntVar(&o.MemoryMaxEntries, "memory-max-entries", 0, "memory store: the most subjects held at once; 0 = automatic: 1000000, or fewer when GOMEMLIMIT is set, so that a full store takes at most half of it (docs/deploy.md)")
	fs.IntVar(&o.OverrideMaxPolicies, "override-max-policies", rls.DefaultMaxOverridePolicies, fmt.Sprintf("the most override policies (key lists and windows of descriptors that carry their own limit) each domain tracks at once, 1–%d; a descriptor whose override would be one more is answered OVER_LIMIT (docs/config.md, Overrides)", rls.MaxOverridePoliciesBound))
	fs.DurationVar(&o.DrainTimeout, "drain-timeout", DefaultDrainTimeout, "on SIGTERM/SIGINT, how long in-flight calls may take to finish")
	fs.BoolVar(&o.LocalCache, "local-cache", DefaultLocalCache, "answer repeated store denials (fixed window, token bucket, GCRA, sliding log; the blocks of a penalty box, any algorithm) locally until their retry time: a hot subject costs one store call per window instead of one per request; exact (see docs/performance.md)")
	fs.IntVar(&o.LocalCacheSize, "local-cache-size", DefaultLocalCacheSize, fmt.Sprintf("local deny cache: the most denials held at once (at least %d)", denycache.Shards))
	fs.IntVar(&o.GCPercent, "gc-percent", DefaultGCPercent, "garbage collector target, as GOGC: 0 = automatic (200 unless GOGC is set; with --store memory and no GOMEMLIMIT also a soft memory limit of 64 MiB + 360 bytes per entry of its bound), or 10–10000")
	fs.BoolVar(&o.Pprof, "pprof", false, "serve net/http/pprof profiles under /debug/pprof/ on the admin address (CPU profiles of at most 60 s and heap profiles of live traffic; behind the token of --admin-token-file when set; off by default)")
	AddRuleLimitFlags(fs, &o.ConfigLimits)
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
	fs.BoolVar(&o.Tracing, "tracing", false, "export OpenTelemetry traces by OTLP, configured by the OTEL_* variables (docs/observe.md, Tracing); also on when OTEL_EXPORTER_OTLP_ENDPOINT is set, off when OTEL_SDK_DISABLED=true")
	fallbackFlags(fs, o)
	journalFlags(fs, &o.journalOptions)
	transportFlags(fs, &o.GRPC)
	grpcTLSFlags(fs, &o.grpcTLSOptions)
	statsdFlags(fs, &o.statsdOptions)
	auditFlags(fs, &o.auditOptions)
	topFlags(fs, &o.topOptions)
	refMetricsFlags(fs, &o.refMetricsOptions)
	referenceFlags(fs, &o.referenceOptions)
	xdsFlags(fs, &o.xdsOptions)
	return fs
}

// TracingFlag is --tracing as the user set it.
func (o *Options) TracingFlag() observe.TracingFlag {
	_, given := o.Given["tracing"]
	return observe.TracingFlag{On: o.Tracing, Given: given, Label: Label("tracing", o.Given)}
}
