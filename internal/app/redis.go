package app

import (
	"context"
	"errors"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// openRedis builds the Redis store from the --redis-* flags.
func (s *server) openRedis(_ context.Context) (limiter.Store, func(), error) {
	return nil, nil, errors.New("--store redis: the Redis store is not part of this build yet; use --store memory")
}
