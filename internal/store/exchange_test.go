package store

import (
	"context"
	"crypto/sha256"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/lua"
	"github.com/envoy-rls/envoy-rls/pkg/rlqs"
)

// openStore opens the store of kind as serve does, with f's flags.
func openStore(t *testing.T, kind string, f *Flags) (limiter.Store, Config) {
	t.Helper()
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	c := Config{Kind: kind, Metrics: m, Log: zap.NewNop(), Every: func(time.Duration, func(time.Time)) {}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, closeStore, err := Open(ctx, f, c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeStore)
	return st, c
}

// TestExchange: replicas on one Redis store see each other's demands of
// an aggregate, never their own, each with an identity of its own; the
// memory store has no exchange (RLQS divides among one replica's
// proxies); a ttl the program refuses, or a store that cannot exchange,
// fails.
func TestExchange(t *testing.T) {
	srv := redistest.Standalone(t)
	st, c := openStore(t, "redis", &Flags{RedisAddr: srv.Addr()})
	p, err := limiter.NewPolicy(limiter.PolicySpec{ID: limitertest.Prefix() + ".exchange", Algorithm: limiter.FixedWindow,
		Params: limiter.FixedWindowParams{Limit: 10, Window: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	subject := limiter.SubjectDigest(sha256.Sum256([]byte(p.ID())))
	var replicas [2]*exchange
	for i := range replicas {
		x, err := c.Exchange(st, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		var ok bool
		if replicas[i], ok = x.(*exchange); !ok {
			t.Fatalf("the Redis store's exchange is %T", x)
		}
		if len(replicas[i].replica) != 16 {
			t.Errorf("replica identity %q, want 8 bytes in hex", replicas[i].replica)
		}
	}
	if replicas[0].replica == replicas[1].replica {
		t.Fatal("two replicas share an identity")
	}
	swap := func(x rlqs.Exchange, mine ...int64) []int64 {
		t.Helper()
		batch := []rlqs.Demand{{Policy: p, Subject: subject, Mine: mine}}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := x.Swap(ctx, batch); err != nil {
			t.Fatalf("Swap: %v", err)
		}
		return slices.Sorted(slices.Values(batch[0].Others))
	}
	// The Redis store Open returns connects in the background.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := st.(interface{ Ping(context.Context) error }).Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if got := swap(replicas[0], 1000, math.MaxInt64); len(got) != 0 {
		t.Errorf("first replica sees %v", got)
	}
	if got := swap(replicas[1], 5); !slices.Equal(got, []int64{1000, math.MaxInt64}) {
		t.Errorf("second replica sees %v", got)
	}
	if got := swap(replicas[0], 2000); !slices.Equal(got, []int64{5}) {
		t.Errorf("first replica sees %v, want the second's alone", got)
	}

	mem, mc := openStore(t, "memory", &Flags{MemoryMaxEntries: 1000})
	if x, err := mc.Exchange(mem, time.Minute); x != nil || err != nil {
		t.Errorf("memory store: %v, %v; want none", x, err)
	}
	if _, err := c.Exchange(mem, time.Minute); err == nil {
		t.Error("a redis exchange over the memory store")
	}
	for _, ttl := range []time.Duration{0, lua.MaxDemandTTL + time.Millisecond} {
		if _, err := c.Exchange(st, ttl); err == nil {
			t.Errorf("ttl %s accepted", ttl)
		}
	}
}
