package store

import (
	"context"
	"fmt"
	"math"
	"runtime/debug"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/envoy-rls/envoy-rls/internal/redact"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/denycache"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/memory"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/redis"
)

// memorySweepInterval is how often expired memory states are dropped.
const memorySweepInterval = 10 * time.Second

// Config is what Open and Answering take besides the flags.
type Config struct {
	// Kind is --store: memory or redis. (Required)
	Kind string
	// Clock is the memory store's and the local fallback's clock.
	// (Optional, default the system clock)
	Clock limiter.Clock
	// Metrics are the stores' collectors (NewMetrics). (Required)
	Metrics *Metrics
	// TracerProvider traces the Redis store's program runs. (Optional)
	TracerProvider trace.TracerProvider
	// Log receives the store's start lines and transitions. (Required)
	Log *zap.Logger
	// GCAutomatic: serve chose the garbage collector's target, so that the
	// memory store without GOMEMLIMIT also sets a soft memory limit
	// (MemoryHeapLimit).
	GCAutomatic bool
	// Every runs fn with the tick's time every d, in the background work
	// of the caller, until the context it gave Open ends. (Required)
	Every func(d time.Duration, fn func(now time.Time))
}

// Open opens the store of c.Kind; closeStore, called once the background
// work has ended, closes it.
func Open(ctx context.Context, f *Flags, c Config) (st limiter.Store, closeStore func(), err error) {
	switch c.Kind {
	case "memory":
		return openMemory(ctx, f, c)
	case "redis":
		return openRedis(ctx, f, c)
	}
	return nil, nil, fmt.Errorf("--store %q: must be memory or redis", c.Kind)
}

// openMemory is the memory store of f, swept every memorySweepInterval.
func openMemory(ctx context.Context, f *Flags, c Config) (limiter.Store, func(), error) {
	limit := debug.SetMemoryLimit(-1)
	entries, from := f.MemoryBound(limit)
	fields := []zap.Field{zap.Int("memory_max_entries", entries), zap.String("from", from)}
	if limit != math.MaxInt64 {
		fields = append(fields, zap.Int64("gomemlimit_bytes", limit))
	}
	c.Log.Info("memory store bound", fields...)
	st, err := memory.New(memory.Config{MaxEntries: entries, Observer: c.Metrics.Memory, Clock: c.Clock})
	if err != nil {
		return nil, nil, fmt.Errorf("memory store: %w", err)
	}
	restore := func() {}
	if c.GCAutomatic && limit == math.MaxInt64 {
		// The automatic GC target collects a small heap less often; this
		// limit collects a heap near the entry bound as Go's default
		// target would. Process-wide: put back on close for in-process
		// callers (tests).
		heap := MemoryHeapLimit(entries)
		prev := debug.SetMemoryLimit(heap)
		restore = func() { debug.SetMemoryLimit(prev) }
		c.Log.Info("memory limit", zap.Int64("bytes", heap), zap.String("from", "automatic (memory store)"))
	}
	c.Every(memorySweepInterval, func(now time.Time) {
		if c.Clock != nil {
			now = c.Clock.Now()
		}
		st.Sweep(now)
		c.Metrics.Memory.Entries(st.Len())
		c.Metrics.Memory.Sketches(st.Sketches())
		c.Metrics.Memory.SketchBytes(st.SketchBytes())
	})
	return st, restore, nil
}

// WithDenyCache is st behind the local deny cache when --local-cache is
// on, st otherwise. The cache repeats the store's own denials.
func (f *Flags) WithDenyCache(st limiter.Store, c Config) (limiter.Store, error) {
	if !f.LocalCache {
		return st, nil
	}
	return denycache.New(denycache.Config{Store: st, Size: f.LocalCacheSize, Observer: c.Metrics.Cache, Clock: c.Clock})
}

// openRedis builds the Redis store from the --redis-* flags. Configuration
// that can never work (a bad flag value, an unreadable password or TLS
// file) fails start. Redis not answering does not: in Kubernetes, Redis
// and the service often start together, and exiting would only crash-loop.
// The store connects in the background (redis.Connect: waits doubling from
// 100–200 ms to 5–10 s, jittered) and, until it is connected, every request
// is answered by its policy's failure mode and the store is reported down
// (/healthz, store_up; /readyz too with --readiness store), as during any
// Redis outage. Each failed attempt is logged once,
// with its cause and the next wait: at error level when it needs an
// operator (credentials, TLS, mode), else at warn.
//
// openRedis waits for the first attempt (at most redisFirstAttemptWait), so
// that when Redis is up the first requests are decided by Redis.
func openRedis(ctx context.Context, f *Flags, c Config) (limiter.Store, func(), error) {
	cfg, err := f.RedisConfig()
	if err != nil {
		return nil, nil, fmt.Errorf("redis store: %w", err)
	}
	cfg.TracerProvider = c.TracerProvider
	cfg.Metrics = c.Metrics.Redis
	log := c.Log.With(zap.String("redis_addr", redact.URLs(strings.Join(cfg.Addrs, ","))))
	cfg.OnFallback = func(reason string) {
		log.Warn("redis store: Redis functions refused; the rate program runs by EVALSHA (docs/redis.md#least-privilege)", zap.String("reason", reason))
	}
	conn, err := redis.Connect(cfg, redis.ConnectOptions{
		OnFailure: func(a redis.Attempt) {
			level := zapcore.WarnLevel
			if a.Operator {
				level = zapcore.ErrorLevel
			}
			log.Log(level, MsgRedisNotConnected,
				zap.Int("attempt", a.N),
				zap.Duration("retry_in", a.Wait),
				zap.Bool("needs_operator", a.Operator),
				zap.Error(a.Err))
		},
		OnConnect: func(attempts int) {
			log.Info(MsgRedisConnected, zap.Int("attempts", attempts))
		},
	})
	if err != nil {
		return nil, nil, err
	}
	wait := time.NewTimer(redisFirstAttemptWait)
	defer wait.Stop()
	select {
	case <-conn.Tried():
	case <-wait.C:
		log.Warn("redis store: the first connection attempt is still running; serving meanwhile", zap.Duration("waited", redisFirstAttemptWait))
	case <-ctx.Done():
	}
	return conn, conn.Close, nil
}

// redisFirstAttemptWait bounds waiting for the first connection attempt
// before serving. One attempt is bounded by the dial timeout (2 s) per
// connection it opens; with several seeds or a Sentinel set it can take
// longer, and start should not wait for that.
const redisFirstAttemptWait = 5 * time.Second

// Log messages of the Redis connection, which docs/redis.md quotes.
const (
	MsgRedisNotConnected = "redis store not connected: answering by each policy's failure mode; retrying"
	MsgRedisConnected    = "redis store connected"
)
