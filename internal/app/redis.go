package app

import (
	"context"
	"fmt"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/redis"
)

// redisConnectTimeout bounds connecting to Redis at start.
const redisConnectTimeout = 10 * time.Second

// openRedis builds the Redis store from the --redis-* flags. Start fails
// when Redis does not answer: a replica that cannot reach the shared store
// would only answer from its failure modes.
func (s *server) openRedis(ctx context.Context) (limiter.Store, func(), error) {
	cfg, err := redis.Flags{
		Addr:           s.opts.RedisAddr,
		Mode:           s.opts.RedisMode,
		SentinelMaster: s.opts.RedisSentinelMaster,
		Username:       s.opts.RedisUsername,
		PasswordFile:   s.opts.RedisPasswordFile,
		TLS:            s.opts.RedisTLS,
		TLSCA:          s.opts.RedisTLSCA,
		TLSCert:        s.opts.RedisTLSCert,
		TLSKey:         s.opts.RedisTLSKey,
		Timeout:        s.opts.RedisTimeout,
		PoolSize:       s.opts.RedisPoolSize,
		MaxFlushDelay:  s.opts.RedisMaxFlushDelay,
	}.Config()
	if err != nil {
		return nil, nil, fmt.Errorf("redis store: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, redisConnectTimeout)
	defer cancel()
	st, err := redis.New(cctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	return st, st.Close, nil
}
