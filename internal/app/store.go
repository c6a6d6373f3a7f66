package app

import (
	"context"
	"fmt"
	"math"
	"runtime/debug"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/internal/options"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/memory"
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
		wg.Add(1)
		go func() {
			defer wg.Done()
			every(ctx, memorySweepInterval, func(now time.Time) {
				if s.clock != nil {
					now = s.clock.Now()
				}
				st.Sweep(now)
				s.metrics.Memory.Entries(st.Len())
				s.metrics.Memory.Sketches(st.Sketches())
			})
		}()
		return st, func() {}, nil
	case "redis":
		return s.openRedis(ctx)
	}
	return nil, nil, fmt.Errorf("--store %q: must be memory or redis", s.opts.Store)
}
