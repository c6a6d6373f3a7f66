package app

import (
	"context"
	"fmt"
	"math"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/envoy-rls/envoy-rls/internal/admin"
	"github.com/envoy-rls/envoy-rls/internal/options"
	"github.com/envoy-rls/envoy-rls/internal/redact"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/denycache"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/memory"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/redis"
)

// memorySweepInterval is how often expired memory states are dropped.
const memorySweepInterval = 10 * time.Second

// openStore builds the configured store and returns a function that closes it.
func (s *server) openStore(ctx context.Context, wg *sync.WaitGroup) (limiter.Store, func(), error) {
	switch s.opts.Store {
	case "memory":
		limit := debug.SetMemoryLimit(-1)
		entries, from := options.MemoryBound(s.opts.Options, limit)
		fields := []zap.Field{zap.Int("memory_max_entries", entries), zap.String("from", from)}
		if limit != math.MaxInt64 {
			fields = append(fields, zap.Int64("gomemlimit_bytes", limit))
		}
		s.log.Info("memory store bound", fields...)
		st, err := memory.New(memory.Config{MaxEntries: entries, Observer: s.metrics.Memory, Clock: s.clock})
		if err != nil {
			return nil, nil, fmt.Errorf("memory store: %w", err)
		}
		closeStore := func() {}
		if s.gcAutomatic && limit == math.MaxInt64 {
			// The automatic GC target collects a small heap less often;
			// this limit collects a heap near the entry bound as Go's
			// default target would. Process-wide: put back on close for
			// in-process callers (tests).
			heap := options.MemoryHeapLimit(entries)
			prev := debug.SetMemoryLimit(heap)
			closeStore = func() { debug.SetMemoryLimit(prev) }
			s.log.Info("memory limit", zap.Int64("bytes", heap), zap.String("from", "automatic (memory store)"))
		}
		s.every(ctx, wg, memorySweepInterval, func(now time.Time) {
			if s.clock != nil {
				now = s.clock.Now()
			}
			st.Sweep(now)
			s.metrics.Memory.Entries(st.Len())
			s.metrics.Memory.Sketches(st.Sketches())
			s.metrics.Memory.SketchBytes(st.SketchBytes())
		})
		return st, closeStore, nil
	case "redis":
		return s.openRedis(ctx)
	}
	return nil, nil, fmt.Errorf("--store %q: must be memory or redis", s.opts.Store)
}

// frontStore sets s.store: store behind the test wrapper, if any, and the
// local deny cache, if enabled. The deny cache sits in front of both: it
// repeats the store's own denials.
func (s *server) frontStore(store limiter.Store, h hooks) error {
	if h.wrapStore != nil {
		store = h.wrapStore(store)
	}
	if p, ok := store.(admin.Pinger); ok {
		s.ping = p
	}
	if s.opts.LocalCache {
		var err error
		if store, err = denycache.New(denycache.Config{Store: store, Size: s.opts.LocalCacheSize, Observer: s.metrics.Cache, Clock: s.clock}); err != nil {
			return err
		}
	}
	s.store = store
	return nil
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
func (s *server) openRedis(ctx context.Context) (limiter.Store, func(), error) {
	cfg, err := s.opts.RedisConfig()
	if err != nil {
		return nil, nil, fmt.Errorf("redis store: %w", err)
	}
	cfg.TracerProvider = s.tracing.Provider()
	cfg.Metrics = s.metrics.Redis
	log := s.log.With(zap.String("redis_addr", redact.URLs(strings.Join(cfg.Addrs, ","))))
	cfg.OnFallback = func(reason string) {
		log.Warn("redis store: Redis functions refused; the rate program runs by EVALSHA (docs/redis.md#least-privilege)", zap.String("reason", reason))
	}
	c, err := redis.Connect(cfg, redis.ConnectOptions{
		OnFailure: func(a redis.Attempt) {
			level := zapcore.WarnLevel
			if a.Operator {
				level = zapcore.ErrorLevel
			}
			log.Log(level, msgRedisNotConnected,
				zap.Int("attempt", a.N),
				zap.Duration("retry_in", a.Wait),
				zap.Bool("needs_operator", a.Operator),
				zap.Error(a.Err))
		},
		OnConnect: func(attempts int) {
			log.Info(msgRedisConnected, zap.Int("attempts", attempts))
		},
	})
	if err != nil {
		return nil, nil, err
	}
	wait := time.NewTimer(redisFirstAttemptWait)
	defer wait.Stop()
	select {
	case <-c.Tried():
	case <-wait.C:
		log.Warn("redis store: the first connection attempt is still running; serving meanwhile", zap.Duration("waited", redisFirstAttemptWait))
	case <-ctx.Done():
	}
	return c, c.Close, nil
}

// redisFirstAttemptWait bounds waiting for the first connection attempt
// before serving. One attempt is bounded by the dial timeout (2 s) per
// connection it opens; with several seeds or a Sentinel set it can take
// longer, and start should not wait for that.
const redisFirstAttemptWait = 5 * time.Second

// Log messages of the Redis connection, which docs/redis.md quotes.
const (
	msgRedisNotConnected = "redis store not connected: answering by each policy's failure mode; retrying"
	msgRedisConnected    = "redis store connected"
)
