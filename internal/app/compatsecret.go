package app

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/internal/options"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/redis"
)

// Waits between attempts to read the shared HMAC secret at start, and the
// period at which a running replica stores it again should Redis have lost
// it (a restart without persistence, a flush).
const (
	sharedSecretFirstWait = 100 * time.Millisecond
	sharedSecretMaxWait   = 5 * time.Second
	sharedSecretRecheck   = 30 * time.Second
	sharedSecretTimeout   = 5 * time.Second
)

// msgSharedSecret is the start-up warning of a secret shared through Redis.
const msgSharedSecret = "no HMAC secret configured: the replicas share a random secret stored in Redis under --hmac-secret-redis-key; " +
	"whoever can read that Redis can read the secret and test guesses of low-entropy descriptor values (IP addresses, user IDs) against the keys. " +
	"Configure a secret (ENVOY_RLS_HMAC_SECRET or --hmac-secret-file) to keep it out of Redis"

// usesSharedSecret reports whether the HMAC secret is shared through
// Redis: the Redis store, the key set and no secret configured.
func usesSharedSecret(o *options.Options, getenv func(string) string) bool {
	return o.Store == "redis" && o.HMACSecretRedisKey != "" && o.HMACSecretFile == "" && getenv(options.SecretEnv) == ""
}

// fetchSharedSecret returns the secret the replicas share under
// --hmac-secret-redis-key, offering a fresh random one. It retries until
// Redis answers or ctx ends: without the secret no key can be computed.
func (s *server) fetchSharedSecret(ctx context.Context) ([]byte, error) {
	cfg, err := s.opts.RedisConfig()
	if err != nil {
		return nil, fmt.Errorf("redis store: %w", err)
	}
	candidate := make([]byte, 32)
	if _, err := rand.Read(candidate); err != nil {
		return nil, fmt.Errorf("generating a random HMAC secret: %w", err)
	}
	wait := sharedSecretFirstWait
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, sharedSecretTimeout)
		secret, err := redis.SharedSecret(actx, cfg, s.opts.HMACSecretRedisKey, candidate)
		cancel()
		if err == nil {
			if len(secret) < descriptors.MinSecretLength {
				return nil, fmt.Errorf("%s: the Redis key holds %d bytes, not a secret of at least %d: delete the key or configure a secret", options.Label("hmac-secret-redis-key", s.opts.Given), len(secret), descriptors.MinSecretLength)
			}
			return secret, nil
		}
		s.log.Warn("cannot read the shared HMAC secret from Redis yet; retrying", zap.Int("attempt", attempt), zap.Duration("retry_in", wait), zap.Error(err))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("stopped before the shared HMAC secret could be read from Redis: %w", context.Cause(ctx))
		case <-t.C:
		}
		wait = min(2*wait, sharedSecretMaxWait)
	}
}

// keepSharedSecret stores secret again under the key whenever Redis has
// lost it, so that a replica starting later gets the same one; it logs an
// error if the key holds another secret (the replicas then disagree and
// each keeps its own count until restarted).
func (s *server) keepSharedSecret(ctx context.Context, wg *sync.WaitGroup, secret []byte, period time.Duration) {
	cfg, err := s.opts.RedisConfig()
	if err != nil {
		return // checked at start
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		every(ctx, period, func(time.Time) {
			actx, cancel := context.WithTimeout(ctx, sharedSecretTimeout)
			defer cancel()
			got, err := redis.SharedSecret(actx, cfg, s.opts.HMACSecretRedisKey, secret)
			switch {
			case err != nil:
				s.log.Warn("cannot check the shared HMAC secret in Redis", zap.Error(err))
			case !bytes.Equal(got, secret):
				s.log.Error("the shared HMAC secret in Redis is not this replica's: replicas started since Redis lost it count separately; restart the replicas (or configure a secret)",
					zap.String("key", s.opts.HMACSecretRedisKey))
			}
		})
	}()
}
