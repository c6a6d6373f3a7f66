package denycache

import (
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/memory"
)

// newCache returns a Cache over store, reading clock.
func newCache(t testing.TB, store limiter.Store, clock limiter.Clock) *cache {
	t.Helper()
	c, err := New(Config{Store: store, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// newMemory returns a memory store reading clock.
func newMemory(t testing.TB, clock limiter.Clock) *memory.Store {
	t.Helper()
	s, err := memory.New(memory.Config{Clock: clock, MaxEntries: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSuiteOverMemory runs the store suite (internal/limitertest) on a
// cache over the memory store: the batch table, the timed cases with the
// cache and the store on one clock, and resets.
func TestSuiteOverMemory(t *testing.T) {
	limitertest.RunSuite(t, limitertest.Suite{
		Store: func(t *testing.T) limiter.Store { return newCache(t, newMemory(t, limiter.SystemClock{}), nil) },
		Timed: func(t *testing.T, clock *limitertest.Clock) limiter.Store {
			return newCache(t, newMemory(t, clock), clock)
		},
	}, limitertest.Config{Prefix: "cache"})
}
