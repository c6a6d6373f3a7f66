package redis

import (
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// TestSuite runs the store suite (internal/limitertest) on standalone
// Redis: the batch table, resets (TestClusterBatch runs them on a Cluster),
// the lease scripts (lease-v2.lua) and reservations (the batch program). Redis decides with its own TIME,
// which no test sets: the timed cases run on the stores with an injected
// clock, and Redis's side of time is the program's parity with
// algorithm.Apply at TIME (parity_test.go, calendar_test.go,
// calendar_penalty_test.go).
func TestSuite(t *testing.T) {
	e := newEnv(t)
	limitertest.RunSuite(t, limitertest.Suite{
		Store:        func(*testing.T) limiter.Store { return e.store },
		Leases:       true,
		Reservations: true,
	}, limitertest.Config{Prefix: limitertest.Prefix()})
}
