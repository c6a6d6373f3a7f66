package redis_test

import (
	"context"
	"fmt"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/redis"
)

// Check a Config with Validate before starting anything, connect once with
// New and share the Store between all requests. (Not run: it needs a
// Redis. A service that must start before Redis answers uses Connect
// instead, see ExampleConnect.)
func Example() {
	cfg := redis.Config{
		Addrs:   []string{"127.0.0.1:6379"},
		Mode:    redis.ModeAuto,
		Timeout: 250 * time.Millisecond,
	}
	if _, err := cfg.Validate(); err != nil {
		panic(err) // a *redis.FieldError: which field, the value, what it accepts
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
