package redis_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/redis"
)

// Connect returns at once, even when Redis does not answer yet: the store
// keeps trying in the background and reports each failed attempt, and
// requests are Unavailable (not_connected) until it connects, so that the
// caller answers them by its failure policy.
func ExampleConnect() {
	// A loopback port where nothing listens.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	addr := l.Addr().String()
	l.Close()

	failed := make(chan redis.Attempt, 1)
	store, err := redis.Connect(redis.Config{Addrs: []string{addr}}, redis.ConnectOptions{
		OnFailure: func(a redis.Attempt) {
			// A service logs it: a.Err is the cause, a.Wait the next wait.
			select {
			case failed <- a:
			default:
			}
		},
		OnConnect: func(attempts int) { fmt.Println("connected after", attempts, "attempts") },
	})
	if err != nil {
		panic(err) // only configuration that can never work
	}
	defer store.Close()

	a := <-failed
	fmt.Println("attempt", a.N, "failed; needs an operator:", a.Operator)

	policy, err := limiter.NewPolicy(limiter.PolicySpec{
		ID:        "api/login",
		Algorithm: limiter.FixedWindow,
		Params:    limiter.FixedWindowParams{Limit: 10, Window: time.Minute},
	})
	if err != nil {
		panic(err)
	}
	out := make([]limiter.Outcome, 1)
	store.Evaluate(context.Background(), []limiter.Request{{Policy: policy, Subject: limiter.SubjectDigest{1}, Cost: 1}}, out)
	fmt.Println(out[0].Kind, out[0].Category)
	// Output:
	// attempt 1 failed; needs an operator: false
	// unavailable not_connected
}
