package compat

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	mrand "math/rand/v2"
	"time"

	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/internal/options"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/redis"
)

// sharedSecretTimeout bounds one attempt to read the shared HMAC secret.
const sharedSecretTimeout = 5 * time.Second

// SharedSecretRecheck is how often a running replica is to store the
// shared secret again (KeepSharedSecret) should Redis have lost it (a
// restart without persistence, a flush).
const SharedSecretRecheck = 30 * time.Second

// MsgSharedSecret is the start-up warning of a secret shared through Redis.
const MsgSharedSecret = "no HMAC secret configured: the replicas share a random secret stored in Redis under --hmac-secret-redis-key; " +
	"whoever can read that Redis can read the secret and test guesses of low-entropy descriptor values (IP addresses, user IDs) against the keys. " +
	"Configure a secret (ENVOY_RLS_HMAC_SECRET or --hmac-secret-file) to keep it out of Redis"

// UsesSharedSecret reports whether the HMAC secret is shared through
// Redis: the Redis store, the key set and no secret configured.
func UsesSharedSecret(o *options.Options, getenv func(string) string) bool {
	return o.Store == "redis" && o.HMACSecretRedisKey != "" && o.HMACSecretFile == "" && getenv(options.SecretEnv) == ""
}

// FetchSharedSecret returns the secret the replicas share under
// --hmac-secret-redis-key, offering a fresh random one. It retries until
// Redis answers or ctx ends: without the secret no key can be computed.
func FetchSharedSecret(ctx context.Context, o *options.Options, log *zap.Logger) ([]byte, error) {
	cfg, err := o.RedisConfig()
	if err != nil {
		return nil, fmt.Errorf("redis store: %w", err)
	}
	candidate := make([]byte, 32)
	if _, err := rand.Read(candidate); err != nil {
		return nil, fmt.Errorf("generating a random HMAC secret: %w", err)
	}
	// The attempts are spaced as redis.Connect spaces its dials: waits
	// doubling from 100ms up to 5s, each drawn between half and all of it.
	backoff := redis.Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second}
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, sharedSecretTimeout)
		secret, err := redis.SharedSecret(actx, cfg, o.HMACSecretRedisKey, candidate)
		cancel()
		if err == nil {
			if len(secret) < descriptors.MinSecretLength {
				return nil, fmt.Errorf("%s: the Redis key holds %d bytes, not a secret of at least %d: delete the key or configure a secret", options.Label("hmac-secret-redis-key", o.Given), len(secret), descriptors.MinSecretLength)
			}
			return secret, nil
		}
		wait := backoff.Wait(attempt, mrand.Float64())
		log.Warn("cannot read the shared HMAC secret from Redis yet; retrying", zap.Int("attempt", attempt), zap.Duration("retry_in", wait), zap.Error(err))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("stopped before the shared HMAC secret could be read from Redis: %w", context.Cause(ctx))
		case <-t.C:
		}
	}
}

// KeepSharedSecret stores secret again under the key if Redis has lost it,
// so that a replica starting later gets the same one; it logs an error if
// the key holds another secret (the replicas then disagree and each keeps
// its own count until restarted). Run it every SharedSecretRecheck.
func KeepSharedSecret(ctx context.Context, cfg redis.Config, key string, secret []byte, log *zap.Logger) {
	actx, cancel := context.WithTimeout(ctx, sharedSecretTimeout)
	defer cancel()
	got, err := redis.SharedSecret(actx, cfg, key, secret)
	switch {
	case err != nil:
		log.Warn("cannot check the shared HMAC secret in Redis", zap.Error(err))
	case !bytes.Equal(got, secret):
		log.Error("the shared HMAC secret in Redis is not this replica's: replicas started since Redis lost it count separately; restart the replicas (or configure a secret)",
			zap.String("key", key))
	}
}
