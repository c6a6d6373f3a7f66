package memory_test

import (
	"context"
	"fmt"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/memory"
)

// stoppedClock always reads the same instant.
type stoppedClock struct{ t time.Time }

func (c stoppedClock) Now() time.Time { return c.t }

func Example() {
	policy, err := limiter.NewPolicy(limiter.PolicySpec{
		ID:        "api/login",
		Algorithm: limiter.FixedWindow,
		Params:    limiter.FixedWindowParams{Limit: 2, Window: time.Minute},
	})
	if err != nil {
		panic(err)
	}
	// Production code leaves Clock nil (the wall clock) and calls
	// store.SweepExpired on a ticker.
	store, err := memory.New(memory.Config{
		Clock:      stoppedClock{time.Date(2026, 1, 1, 12, 0, 30, 0, time.UTC)},
		MaxEntries: 10_000,
	})
	if err != nil {
		panic(err)
	}
	batch := []limiter.Request{{Policy: policy, Subject: limiter.SubjectDigest{1}, Cost: 1}}
	out := make([]limiter.Outcome, len(batch)) // reused: no allocation per call
	for range 3 {
		store.Evaluate(context.Background(), batch, out)
		d := out[0].Decision
		fmt.Println(out[0].Kind, d.Allowed, d.Remaining, d.RetryAfter, d.Source)
	}
	// Output:
	// evaluated true 1 0s memory
	// evaluated true 0 0s memory
	// evaluated false 0 30s memory
}
