// Package store is serve's limit store: the flags that choose its bounds
// and reach Redis, their check (every refused value at once), and the
// store they describe, opened and wrapped for the service: the memory
// store with its sweep, or the Redis store and its connection; the local
// deny cache in front; the charge journal and the failure modes (failover)
// around it; their metrics and logs.
package store

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter/denycache"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/failover"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/journal"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/memory"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/redis"
)

// Defaults of the store's flags.
const (
	DefaultMemoryMaxEntries = memory.DefaultMaxEntries
	// MemoryShare is the part of the Go runtime's memory limit (GOMEMLIMIT)
	// that the automatic memory bound lets a full store take, at
	// memory.MaxBytesPerEntry: the rest holds everything else (the
	// process's own memory under load, docs/performance.md), the garbage
	// of a table that doubles, and the collector's headroom. With a 256 MiB
	// limit: 256 MiB × 0.5 / 272 bytes = 493,447 entries.
	MemoryShare                    = 0.5
	DefaultRedisMode               = "auto"
	DefaultRedisTimeout            = redis.DefaultTimeout
	DefaultRedisPoolSize           = redis.DefaultPoolSize
	DefaultRedisFlushDelay         = redis.DefaultMaxFlushDelay
	DefaultRedisGroupKeys          = redis.DefaultGroupMaxKeys
	DefaultRedisInFlight           = redis.DefaultGroupInFlight
	DefaultLocalCache              = true
	DefaultLocalCacheSize          = denycache.DefaultSize
	DefaultReplicasHint            = 1
	DefaultLocalFallbackMaxEntries = failover.DefaultMaxEntries
	DefaultJournalMaxEntries       = journal.DefaultMaxEntries
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

// Flags are the store's flags of the serve command (a group of its
// options, internal/options); --store, which chooses the store, is
// options' own.
type Flags struct {
	MemoryMaxEntries int
	LocalCache       bool
	LocalCacheSize   int
	GCPercent        int

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
	// RedisPassword is the Redis password given other than by a flag (the
	// reference's REDIS_AUTH); --redis-password-file wins.
	RedisPassword string

	// failure_mode local (pkg/limiter/failover).
	ReplicasHint            int
	LocalFallbackMaxEntries int
	// The charge journal (pkg/limiter/journal).
	JournalMaxEntries int
	JournalFile       string
}

// parseAccepts says what the flags take when a value does not parse, as
// errors put it after "must be"; for the --redis-* ones, in the redis
// package's words (redisWant). Read only.
var parseAccepts = map[string]string{
	"memory-max-entries":         "0 (automatic) or a positive integer",
	"local-cache-size":           fmt.Sprintf("an integer of at least %d", denycache.Shards),
	"gc-percent":                 fmt.Sprintf("0 (automatic) or an integer between %d and %d", MinGCPercent, MaxGCPercent),
	"redis-timeout":              redisWant(redis.Config{Timeout: -1}),
	"redis-pool-size":            redisWant(redis.Config{PoolSize: -1}),
	"redis-max-flush-delay":      redisWant(redis.Config{MaxFlushDelay: -1}),
	"redis-group-max-keys":       redisWant(redis.Config{GroupMaxKeys: -1}),
	"redis-group-in-flight":      redisWant(redis.Config{GroupInFlight: -1}),
	"replicas-hint":              fmt.Sprintf("an integer between 1 and %d", failover.MaxReplicas),
	"local-fallback-max-entries": "a positive integer",
}

// journalAccepts says what each journal flag takes. Read only.
var journalAccepts = map[string]string{
	"journal-max-entries": fmt.Sprintf("an integer between 1 and %d", journal.MaxMaxEntries),
	"journal-file":        "empty with --store memory (the journal holds what Redis could not record)",
}

// Define defines the flags on fs.
func (f *Flags) Define(fs *flag.FlagSet) map[string]string {
	fs.IntVar(&f.MemoryMaxEntries, "memory-max-entries", 0, "memory store: the most subjects held at once; 0 = automatic: 1000000, or fewer when GOMEMLIMIT is set, so that a full store takes at most half of it (docs/deploy.md)")
	fs.BoolVar(&f.LocalCache, "local-cache", DefaultLocalCache, "answer repeated store denials (fixed window, token bucket, GCRA, sliding log; the blocks of a penalty box, any algorithm) locally until their retry time: a hot subject costs one store call per window instead of one per request; exact (see docs/performance.md)")
	fs.IntVar(&f.LocalCacheSize, "local-cache-size", DefaultLocalCacheSize, fmt.Sprintf("local deny cache: the most denials held at once (at least %d)", denycache.Shards))
	fs.IntVar(&f.GCPercent, "gc-percent", DefaultGCPercent, "garbage collector target, as GOGC: 0 = automatic (200 unless GOGC is set; with --store memory and no GOMEMLIMIT also a soft memory limit of 64 MiB + 360 bytes per entry of its bound), or 10–10000")
	fs.StringVar(&f.RedisAddr, "redis-addr", "", "Redis address(es), comma-separated (sentinels in sentinel mode, seeds in cluster mode), or the absolute path of a standalone server's Unix socket")
	fs.StringVar(&f.RedisMode, "redis-mode", DefaultRedisMode, "Redis deployment: auto (asks the server), standalone, sentinel or cluster")
	fs.StringVar(&f.RedisSentinelMaster, "redis-sentinel-master", "", "Redis Sentinel master name (sentinel mode)")
	fs.StringVar(&f.RedisUsername, "redis-username", "", "Redis ACL user name")
	fs.StringVar(&f.RedisPasswordFile, "redis-password-file", "", "file holding the Redis password")
	fs.BoolVar(&f.RedisTLS, "redis-tls", false, "connect to Redis over TLS")
	fs.StringVar(&f.RedisTLSCA, "redis-tls-ca", "", "PEM CA bundle that verifies the Redis server (default: system roots)")
	fs.StringVar(&f.RedisTLSCert, "redis-tls-cert", "", "PEM client certificate for Redis mutual TLS")
	fs.StringVar(&f.RedisTLSKey, "redis-tls-key", "", "PEM client key for Redis mutual TLS")
	fs.BoolVar(&f.RedisTLSSkipHostname, "redis-tls-skip-hostname-verification", false, "verify the Redis server's certificate against the CA but not the name in it (for servers reached by an address their certificate does not name)")
	fs.DurationVar(&f.RedisTimeout, "redis-timeout", DefaultRedisTimeout, fmt.Sprintf("upper bound of one Redis round trip, 1ms–%v (the gRPC deadline may cut it shorter)", redis.MaxTimeout))
	fs.IntVar(&f.RedisPoolSize, "redis-pool-size", DefaultRedisPoolSize, fmt.Sprintf("pipelined Redis connections per node, 1–%d", redis.MaxPoolSize))
	fs.DurationVar(&f.RedisMaxFlushDelay, "redis-max-flush-delay", DefaultRedisFlushDelay, "how long a Redis connection may wait to gather pipelined commands into one write (0: flush at once; at most 1ms)")
	fs.IntVar(&f.RedisGroupMaxKeys, "redis-group-max-keys", DefaultRedisGroupKeys, fmt.Sprintf("group commit: the most limits one Redis program run evaluates for concurrent Envoy requests, 1–%d (1: every request runs alone)", redis.MaxGroupMaxKeys))
	fs.IntVar(&f.RedisGroupInFlight, "redis-group-in-flight", DefaultRedisInFlight, fmt.Sprintf("group commit: program runs of one Redis hash slot in progress at once, 1–%d", redis.MaxGroupInFlight))
	fs.IntVar(&f.ReplicasHint, "replicas-hint", DefaultReplicasHint, fmt.Sprintf("replicas sharing each limit: failure_mode local limits admit limit/replicas-hint (rounded down, at least 1) per replica while the store fails; 1–%d", failover.MaxReplicas))
	fs.IntVar(&f.LocalFallbackMaxEntries, "local-fallback-max-entries", DefaultLocalFallbackMaxEntries, fmt.Sprintf("failure_mode local: the most subjects this replica's local limiter holds exactly; a policy's new subjects beyond are limited by an overflow sketch that never admits more than the share (answered closed when more than %d policies are in overflow at once)", memory.DefaultMaxSketches))
	fs.IntVar(&f.JournalMaxEntries, "journal-max-entries", DefaultJournalMaxEntries, fmt.Sprintf("--store redis: the most charges, lease releases and reservation settles that Redis could not record this replica holds, to apply when Redis answers again (at most %d bytes each; more are dropped and counted); 1–%d", journal.MaxBytesPerEntry, journal.MaxMaxEntries))
	fs.StringVar(&f.JournalFile, "journal-file", "", "--store redis: the file, of this replica alone, where a graceful stop writes the charges and releases it could not apply, read back and applied at the next start (empty: they are lost at stop); its directory must be writable")
	return parseAccepts
}

// Check refuses, one error each, the values the store would refuse at
// start that can be decided without reading a file or dialling; --store
// (value) says whether Redis is used.
func (f *Flags) Check(check func(string, bool, string), value func(string) string) {
	bad := func(name string, ok bool) { check(name, ok, "must be "+parseAccepts[name]+journalAccepts[name]) }
	store := value("store")
	bad("memory-max-entries", f.MemoryMaxEntries >= 0)
	bad("local-cache-size", f.LocalCacheSize >= denycache.Shards)
	bad("gc-percent", f.GCPercent == 0 || f.GCPercent >= MinGCPercent && f.GCPercent <= MaxGCPercent)
	// The redis package takes zero as its default; the flags have defaults
	// of their own, so a zero given here is a mistake.
	bad("redis-timeout", f.RedisTimeout != 0)
	bad("redis-pool-size", f.RedisPoolSize != 0)
	bad("replicas-hint", f.ReplicasHint >= 1 && f.ReplicasHint <= failover.MaxReplicas)
	bad("local-fallback-max-entries", f.LocalFallbackMaxEntries >= 1)
	bad("journal-max-entries", f.JournalMaxEntries >= 1 && f.JournalMaxEntries <= journal.MaxMaxEntries)
	bad("journal-file", f.JournalFile == "" || store != "memory")
	err := f.redisCheckValues()
	if store == "redis" {
		err = f.redisCheck()
	}
	var fe *flagError
	switch {
	case errors.As(err, &fe):
		check(fe.Flag, false, "must be "+fe.Want)
	case err != nil:
		check("", false, err.Error())
	}
}

// MemoryBound is the memory store's entry bound and where it comes from.
// memLimit is the Go runtime's memory limit (debug.SetMemoryLimit(-1):
// GOMEMLIMIT, math.MaxInt64 when unset). Automatic (--memory-max-entries
// 0) is DefaultMemoryMaxEntries, lowered under a memory limit to
// floor(memLimit x MemoryShare / memory.MaxBytesPerEntry), so that the
// store refuses new subjects before the process reaches the limit.
func (f *Flags) MemoryBound(memLimit int64) (int, string) {
	switch {
	case f.MemoryMaxEntries > 0:
		return f.MemoryMaxEntries, "--memory-max-entries"
	case memLimit <= 0 || memLimit == math.MaxInt64:
		return DefaultMemoryMaxEntries, "automatic (no GOMEMLIMIT)"
	}
	n := int64(float64(memLimit) * MemoryShare / memory.MaxBytesPerEntry)
	if n >= DefaultMemoryMaxEntries {
		return DefaultMemoryMaxEntries, "automatic (GOMEMLIMIT allows the default)"
	}
	return int(max(n, 1)), "automatic (GOMEMLIMIT)"
}

// GCTarget is the garbage collector target serve sets with the store
// kind ("memory" or "redis"), and where it comes from; 0 means leave the
// runtime's (GOGC's) alone.
func (f *Flags) GCTarget(kind string, getenv func(string) string) (int, string) {
	switch {
	case f.GCPercent != 0:
		return f.GCPercent, "--gc-percent"
	case getenv("GOGC") != "":
		return 0, "GOGC"
	case kind == "redis":
		return RedisGCPercent, "automatic (redis store)"
	case kind == "memory":
		return MemoryGCPercent, "automatic (memory store)"
	default:
		return 0, "Go default"
	}
}

// MemoryHeapLimit is the soft memory limit serve sets with the memory
// store's automatic GC target when GOMEMLIMIT is not set: what a store of
// entries entries peaks at when full with Go's default target.
func MemoryHeapLimit(entries int) int64 {
	return MemoryHeapBase + int64(entries)*MemoryPeakBytesPerEntry
}
