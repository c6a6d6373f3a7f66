package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/redis"
	"github.com/envoy-rls/envoy-rls/pkg/lua"
	"github.com/envoy-rls/envoy-rls/pkg/rlqs"
)

// Exchange is the RLQS demand exchange of st, the store Open returned
// for c.Kind: nil for the memory store, which serves one replica alone
// (RLQS then divides each limit among this replica's proxies); for the
// Redis store, the replicas on that Redis publish their proxies' demands
// there, each entry living ttl (whole ms, at most lua.MaxDemandTTL) after
// its last Swap. This replica's identity is 8 random bytes, new at each
// call: a restarted replica's old entry expires with its ttl.
func (c Config) Exchange(st limiter.Store, ttl time.Duration) (rlqs.Exchange, error) {
	if c.Kind == "memory" {
		return nil, nil
	}
	sw, ok := st.(demandSwapper)
	if !ok {
		return nil, fmt.Errorf("rlqs: the %s store (%T) does not exchange demands", c.Kind, st)
	}
	if _, err := lua.DemandArgs("r", ttl, nil); err != nil {
		return nil, fmt.Errorf("rlqs: demand ttl: %w", err)
	}
	var id [8]byte
	_, _ = rand.Read(id[:]) // never fails (crypto/rand)
	return &exchange{st: sw, replica: hex.EncodeToString(id[:]), ttl: ttl}, nil
}

// demandSwapper is the Redis store's exchange (redis.Store.SwapDemands).
type demandSwapper interface {
	SwapDemands(ctx context.Context, replica string, ttl time.Duration, batch []redis.DemandSwap) error
}

// exchange is rlqs.Exchange over the Redis store, safe for concurrent
// use.
type exchange struct {
	st      demandSwapper
	replica string
	ttl     time.Duration
}

func (e *exchange) Swap(ctx context.Context, batch []rlqs.Demand) error {
	swaps := make([]redis.DemandSwap, len(batch))
	for i, d := range batch {
		swaps[i] = redis.DemandSwap{Policy: d.Policy, Subject: d.Subject, Tag: d.Tag, Mine: d.Mine, Others: d.Others[:0]}
	}
	err := e.st.SwapDemands(ctx, e.replica, e.ttl, swaps)
	for i := range batch {
		batch[i].Others = swaps[i].Others
	}
	return err
}
