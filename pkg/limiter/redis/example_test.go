package redis_test

import (
	"context"
	"fmt"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/redis"
)

// Build the Config from the --redis-* flag values with Flags.Config (which
// reads the password and TLS files), connect once with New and share the
// Store between all requests. (Not run: it needs a Redis. The binary uses
// Connect instead, see ExampleConnect.)
func Example() {
	cfg, err := redis.Flags{
		Addr:    "127.0.0.1:6379",
		Mode:    "auto",
		Timeout: 250 * time.Millisecond,
	}.Config()
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	store, err := redis.New(ctx, cfg)
	if err != nil {
		panic(err)
	}
	defer store.Close()

	policy, err := limiter.NewPolicy(limiter.PolicySpec{
		ID:        "api/login",
		Algorithm: limiter.TokenBucket,
		Params:    limiter.TokenBucketParams{Capacity: 10, RefillAmount: 1, RefillPeriod: time.Second},
	})
	if err != nil {
		panic(err)
	}
	batch := []limiter.Request{{Policy: policy, Subject: limiter.SubjectDigest{1}, Cost: 1}}
	out := make([]limiter.Outcome, len(batch))
	store.Evaluate(ctx, batch, out)
	switch o := out[0]; o.Kind {
	case limiter.Evaluated:
		fmt.Println(o.Decision.Allowed, o.Decision.Remaining)
	default: // Unavailable, Indeterminate, Incompatible: the policy's failure mode answers
		fmt.Println(o.Kind, o.Category)
	}
}
