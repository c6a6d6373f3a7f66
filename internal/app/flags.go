package app

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/denycache"
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
	DefaultMemoryMaxEntries = 1_000_000
	DefaultDrainTimeout     = 15 * time.Second
	DefaultRedisMode        = "auto"
	DefaultRedisTimeout     = redis.DefaultTimeout
	DefaultRedisPoolSize    = redis.DefaultPoolSize
	DefaultRedisFlushDelay  = redis.DefaultMaxFlushDelay
	DefaultLocalCache       = true
	DefaultLocalCacheSize   = denycache.DefaultSize
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
}

func serveFlags(o *Options, output io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("envoy-rls serve", flag.ContinueOnError)
	fs.SetOutput(output)
	fs.StringVar(&o.Config, "config", "", "rule file or directory of rule files (required)")
	fs.StringVar(&o.GRPCAddr, "grpc-addr", DefaultGRPCAddr, "gRPC listen address (RateLimitService, health, reflection)")
	fs.StringVar(&o.AdminAddr, "admin-addr", DefaultAdminAddr, "admin HTTP listen address (/healthz, /readyz, /metrics, /config)")
	fs.StringVar(&o.Store, "store", DefaultStore, "limit store: memory or redis")
	fs.StringVar(&o.HMACSecretFile, "hmac-secret-file", "", "file holding the HMAC secret that pseudonymizes subjects (else $"+SecretEnv+"; required with --store redis)")
	fs.StringVar(&o.LogLevel, "log-level", DefaultLogLevel, "log level: debug, info, warn, error")
	fs.StringVar(&o.DefaultHeaders, "default-headers", DefaultHeaders, "response headers for rules that do not set `headers`: full, retry_after or none")
	fs.IntVar(&o.MemoryMaxEntries, "memory-max-entries", 0, "memory store: the most subjects held at once; 0 = automatic (1000000)")
	fs.DurationVar(&o.DrainTimeout, "drain-timeout", DefaultDrainTimeout, "on SIGTERM/SIGINT, how long in-flight calls may take to finish")
	fs.BoolVar(&o.LocalCache, "local-cache", DefaultLocalCache, "answer repeated store denials (fixed window, token bucket) locally until their retry time: a hot subject costs one store call per window instead of one per request; exact (see docs/performance.md)")
	fs.IntVar(&o.LocalCacheSize, "local-cache-size", DefaultLocalCacheSize, "local deny cache: the most denials held at once")
	fs.IntVar(&o.GCPercent, "gc-percent", DefaultGCPercent, "garbage collector target, as GOGC: 0 = automatic (200 with --store redis unless GOGC is set, else the Go runtime's), or 10–10000")
	fs.BoolVar(&o.Pprof, "pprof", false, "serve net/http/pprof profiles under /debug/pprof/ on the admin address (CPU and heap profiles of live traffic; off by default)")
	fs.StringVar(&o.RedisAddr, "redis-addr", "", "Redis address(es), comma-separated (sentinels in sentinel mode, seeds in cluster mode)")
	fs.StringVar(&o.RedisMode, "redis-mode", DefaultRedisMode, "Redis deployment: auto (asks the server), standalone, sentinel or cluster")
	fs.StringVar(&o.RedisSentinelMaster, "redis-sentinel-master", "", "Redis Sentinel master name (sentinel mode)")
	fs.StringVar(&o.RedisUsername, "redis-username", "", "Redis ACL user name")
	fs.StringVar(&o.RedisPasswordFile, "redis-password-file", "", "file holding the Redis password")
	fs.BoolVar(&o.RedisTLS, "redis-tls", false, "connect to Redis over TLS")
	fs.StringVar(&o.RedisTLSCA, "redis-tls-ca", "", "PEM CA bundle that verifies the Redis server (default: system roots)")
	fs.StringVar(&o.RedisTLSCert, "redis-tls-cert", "", "PEM client certificate for Redis mutual TLS")
	fs.StringVar(&o.RedisTLSKey, "redis-tls-key", "", "PEM client key for Redis mutual TLS")
	fs.DurationVar(&o.RedisTimeout, "redis-timeout", DefaultRedisTimeout, "upper bound of one Redis round trip (the gRPC deadline may cut it shorter)")
	fs.IntVar(&o.RedisPoolSize, "redis-pool-size", DefaultRedisPoolSize, "pipelined Redis connections per node")
	fs.DurationVar(&o.RedisMaxFlushDelay, "redis-max-flush-delay", DefaultRedisFlushDelay, "how long a Redis connection may wait to gather pipelined commands into one write (0: flush at once; at most 1ms)")
	return fs
}

// envName is the environment variable of a flag.
func envName(flagName string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// parseFlags parses args, then fills every flag not given on the command
// line from its ENVOY_RLS_* variable when that is set and not empty.
func parseFlags(fs *flag.FlagSet, args []string, getenv func(string) string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] {
			return
		}
		v := getenv(envName(f.Name))
		if v == "" {
			return
		}
		if err := fs.Set(f.Name, v); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", envName(f.Name), err))
		}
	})
	return errors.Join(errs...)
}

// check validates option values that the flag package cannot.
func (o *Options) check() error {
	if o.Config == "" {
		return fmt.Errorf("--config (or %s) is required: the rule file or directory to serve", envName("config"))
	}
	switch o.Store {
	case "memory", "redis":
	default:
		return fmt.Errorf("--store %q: must be memory or redis", o.Store)
	}
	if _, err := headerMode(o.DefaultHeaders); err != nil {
		return err
	}
	if o.MemoryMaxEntries < 0 {
		return fmt.Errorf("--memory-max-entries %d: must be 0 (automatic) or positive", o.MemoryMaxEntries)
	}
	if o.LocalCacheSize < denycache.Shards {
		return fmt.Errorf("--local-cache-size %d: must be at least %d", o.LocalCacheSize, denycache.Shards)
	}
	if o.DrainTimeout <= 0 {
		return fmt.Errorf("--drain-timeout %v: must be positive", o.DrainTimeout)
	}
	if o.GCPercent != 0 && (o.GCPercent < MinGCPercent || o.GCPercent > MaxGCPercent) {
		return fmt.Errorf("--gc-percent %d: must be 0 (automatic) or between %d and %d", o.GCPercent, MinGCPercent, MaxGCPercent)
	}
	if _, err := redis.ParseMode(o.RedisMode); err != nil {
		return fmt.Errorf("--redis-mode: %w", err)
	}
	if o.RedisTimeout <= 0 {
		return fmt.Errorf("--redis-timeout %v: must be positive", o.RedisTimeout)
	}
	if o.RedisPoolSize < 1 || o.RedisPoolSize > redis.MaxPoolSize {
		return fmt.Errorf("--redis-pool-size %d: must be between 1 and %d", o.RedisPoolSize, redis.MaxPoolSize)
	}
	return nil
}

func headerMode(s string) (descriptors.HeaderMode, error) {
	switch s {
	case "full":
		return descriptors.HeadersFull, nil
	case "retry_after":
		return descriptors.HeadersRetryAfter, nil
	case "none":
		return descriptors.HeadersNone, nil
	}
	return 0, fmt.Errorf("--default-headers %q: must be full, retry_after or none", s)
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
