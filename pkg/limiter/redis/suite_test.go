package redis

import (
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
)

// TestSuite runs the store suite (internal/limitertest) on standalone
// Redis: the batch table and resets (TestClusterBatch runs them on a
// Cluster). Redis decides with its own TIME, which no test sets: the timed
// cases run on the stores with an injected clock, and Redis's side of time
// is the program's parity with limiter.Apply at TIME (parity_test.go,
// calendar_test.go, calendar_penalty_test.go).
func TestSuite(t *testing.T) {
	e := newEnv(t)
	t.Run("batch", func(t *testing.T) {
		limitertest.Run(t, e.store, limitertest.Config{Prefix: limitertest.Prefix()})
	})
	t.Run("reset", func(t *testing.T) {
		limitertest.RunReset(t, e.store, limitertest.Config{Prefix: limitertest.Prefix()})
	})
}
