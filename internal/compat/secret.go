package compat

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/internal/options"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/redis"
)

// sharedSecretTimeout bounds one attempt to read the shared HMAC secret.
const sharedSecretTimeout = 5 * time.Second

// SharedSecretRecheck is how often a running replica checks the shared
// secret's key (SecretKeeper.Check): it stores its secret again should
// Redis have lost it, reports another one, and renews its announcement.
const SharedSecretRecheck = 30 * time.Second

// AnnouncePeriods is how many rechecks an announcement of the secret in
// use outlives: a replica stopped (or cut off from Redis) stops vouching
// for its secret that long after its last check.
const AnnouncePeriods = 3

// MsgSharedSecret is the start-up warning of a secret shared through Redis.
const MsgSharedSecret = "no HMAC secret configured: the replicas share a random secret stored in Redis under --hmac-secret-redis-key; " +
	"whoever can read that Redis can read the secret and test guesses of low-entropy descriptor values (IP addresses, user IDs) against the keys. " +
	"Configure a secret (ENVOY_RLS_HMAC_SECRET or --hmac-secret-file) to keep it out of Redis"

// MsgSecretRead is logged when a replica serving by failure mode has read
// the shared secret: Redis decides from then on.
const MsgSecretRead = "the shared HMAC secret is read from Redis: the limits are decided by the store from now on"

// Log messages of a running replica's checks, which docs/deploy.md
// quotes.
const (
	MsgSecretChanged  = "the shared HMAC secret in Redis is not this replica's: this replica keeps its own and goes on counting with the replicas that use it; replicas started now refuse the key's value while this one announces its own"
	MsgSecretRestored = "the shared HMAC secret was missing from Redis: this replica stored its own again"
	MsgSecretBack     = "the shared HMAC secret in Redis is this replica's again"
)

// UsesSharedSecret reports whether the HMAC secret is shared through
// Redis: the Redis store, the key set and no secret configured.
func UsesSharedSecret(o *options.Options, getenv func(string) string) bool {
	return o.Store == "redis" && o.HMACSecretRedisKey != "" && o.HMACSecretFile == "" && getenv(options.SecretEnv) == ""
}

// MsgSecretNotYet is logged after each failed attempt to read the shared
// secret (docs/deploy.md quotes it).
const MsgSecretNotYet = "cannot read the shared HMAC secret from Redis yet: answering by each policy's failure mode; retrying"

// SecretFetch reads the secret the replicas share under
// --hmac-secret-redis-key, offering a fresh random one, and announces it for
// AnnouncePeriods rechecks. Only Redis not answering is retried: a key
// whose value must not be adopted (secretError) or a user the
// ACL refuses is an error naming the key and the fix. Use it from one
// goroutine.
type SecretFetch struct {
	cfg       redis.Config
	key       string
	label     string // the flag or variable that named the key
	candidate []byte
	recheck   time.Duration
	log       *zap.Logger
	attempts  int
	notYet    error // why the last attempt did not read the secret
}

// NewSecretFetch reads the Redis settings (redisConfig: the store's
// flags') and draws the secret offered should the key of o be missing;
// recheck is the running replicas' recheck (SharedSecretRecheck outside
// tests).
func NewSecretFetch(o *options.Options, redisConfig func() (redis.Config, error), recheck time.Duration, log *zap.Logger) (*SecretFetch, error) {
	cfg, err := redisConfig()
	if err != nil {
		return nil, fmt.Errorf("redis store: %w", err)
	}
	candidate := make([]byte, SharedSecretBytes)
	if _, err := rand.Read(candidate); err != nil {
		return nil, fmt.Errorf("generating a random HMAC secret: %w", err)
	}
	return &SecretFetch{cfg: cfg, key: o.HMACSecretRedisKey, label: options.Label("hmac-secret-redis-key", o.Given),
		candidate: candidate, recheck: recheck, log: log}, nil
}

// First makes one attempt: the secret once read; or, while Redis does not
// answer, a nil secret and why (notYet: Wait goes on trying); or the error
// of a key that must not be adopted.
func (f *SecretFetch) First(ctx context.Context) (secret []byte, notYet, err error) {
	secret, err = f.attempt(ctx)
	return secret, f.notYet, err
}

// Wait tries again, spaced as redis.Connect spaces its dials (waits
// doubling from 100ms up to 5s, each drawn between half and all of it),
// until the secret is read, a refusal (as First's), or ctx ends. Each
// failed attempt, First's included, is logged (MsgSecretNotYet) and its
// cause given to onFailure, if not nil.
func (f *SecretFetch) Wait(ctx context.Context, onFailure func(cause error)) ([]byte, error) {
	backoff := redis.Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second}
	for {
		if f.notYet != nil {
			if onFailure != nil {
				onFailure(f.notYet)
			}
			wait := backoff.Wait(f.attempts, mrand.Float64())
			f.log.Warn(MsgSecretNotYet, zap.String("key", f.key), zap.Int("attempt", f.attempts), zap.Duration("retry_in", wait), zap.Error(f.notYet))
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, fmt.Errorf("stopped before the shared HMAC secret could be read from Redis: %w", context.Cause(ctx))
			case <-t.C:
			}
		}
		if secret, err := f.attempt(ctx); err != nil || secret != nil {
			return secret, err
		}
	}
}

// attempt reads (or stores) the secret once, bounded by
// sharedSecretTimeout: the secret, or a refusal, or neither with f.notYet
// saying why Redis did not answer.
func (f *SecretFetch) attempt(ctx context.Context) ([]byte, error) {
	f.attempts++
	f.notYet = nil
	actx, cancel := context.WithTimeout(ctx, sharedSecretTimeout)
	st, err := adoptSecret(actx, f.cfg, f.key, f.candidate, AnnouncePeriods*f.recheck)
	cancel()
	var se *secretError
	switch {
	case err == nil:
		if st.legacy {
			f.log.Warn("the shared HMAC secret in Redis is in the form of earlier versions (32 raw bytes, no check value): adopted as it is",
				zap.String("key", f.key))
		}
		return st.secret, nil
	case errors.As(err, &se):
		return nil, sharedSecretRefusal(f.label, se, f.recheck)
	case isNoPerm(err):
		return nil, fmt.Errorf("%s: the Redis user may not use the shared secret's keys: %w (the ACL it needs: docs/redis.md, Least privilege)", f.label, err)
	case ctx.Err() != nil:
		return nil, fmt.Errorf("stopped before the shared HMAC secret could be read from Redis: %w", context.Cause(ctx))
	}
	f.notYet = err
	return nil, nil
}

// sharedSecretRefusal is the start-up error of a key whose value a
// replica must not adopt: what the key holds and what to do.
func sharedSecretRefusal(label string, se *secretError, recheck time.Duration) error {
	const configure = "; to keep the secret out of Redis altogether, configure one (ENVOY_RLS_HMAC_SECRET or --hmac-secret-file)"
	var fix string
	switch se.Kind {
	case secretChanged:
		fix = fmt.Sprintf("the secret under the key changed while replicas using another one (fingerprint %s, the key's is %s) run, and a replica adopting it would count apart from them: this replica does not start. "+
			"If nobody changed it on purpose, delete the key (DEL %s): the running replicas store theirs again within %v, and this replica then starts with it. "+
			"To change the secret on purpose, stop every replica first and wait %v (or delete %s too)",
			se.InUse, se.Stored, se.Key, recheck, AnnouncePeriods*recheck, InUseKey(se.Key))
	case secretMissing:
		fix = fmt.Sprintf("the running replicas store their secret again within %v; start this replica again then", recheck)
	default:
		fix = fmt.Sprintf("envoy-rls writes v1:<64 hex digits>:<16 hex digits> there; the value was written by something else or damaged. "+
			"Delete the key (DEL %s) and start the replicas again (replicas still running with another secret count apart until restarted), or choose another key (--hmac-secret-redis-key, CACHE_KEY_PREFIX)", se.Key)
	}
	return fmt.Errorf("%s: the Redis key %q %s: %s%s", label, se.Key, se.Problem, fix, configure)
}

// isNoPerm reports a NOPERM reply: the ACL does not allow a command.
func isNoPerm(err error) bool {
	return err != nil && strings.Contains(err.Error(), "NOPERM")
}

// NewMismatchGauge registers on reg the gauge a SecretKeeper sets:
// envoy_rls_shared_secret_mismatch, 0 until then (and without a shared
// secret).
func NewMismatchGauge(reg prometheus.Registerer) (prometheus.Gauge, error) {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "envoy_rls_shared_secret_mismatch",
		Help: "1 while the Redis key of the HMAC secret shared through Redis (--hmac-secret-redis-key) holds another value than the secret this replica uses; 0 otherwise, and without a shared secret.",
	})
	if err := reg.Register(g); err != nil {
		return nil, fmt.Errorf("registering envoy_rls_shared_secret_mismatch: %w", err)
	}
	return g, nil
}

// SecretKeeper is a running replica's watch on the secret it shares
// through Redis; Check runs every SharedSecretRecheck.
type SecretKeeper struct {
	cfg      redis.Config
	key      string
	secret   []byte
	announce time.Duration
	log      *zap.Logger
	mismatch prometheus.Gauge

	mu sync.Mutex
	// seen identifies the other value last reported; zero while the key
	// holds this replica's secret.
	seen     [32]byte
	reported bool
}

// NewSecretKeeper watches secret under key, rechecked every recheck; the
// gauge is 1 while the key holds another value.
func NewSecretKeeper(cfg redis.Config, key string, secret []byte, recheck time.Duration, mismatch prometheus.Gauge, log *zap.Logger) *SecretKeeper {
	return &SecretKeeper{cfg: cfg, key: key, secret: secret, announce: AnnouncePeriods * recheck, log: log, mismatch: mismatch}
}

// Check stores the secret again if Redis lost it, and reports, once per
// change of the key's value, a value that is not this replica's secret:
// an error log and the gauge at 1. The replica keeps its own secret, so it
// goes on counting with the replicas that share it, and it keeps
// announcing it, so that replicas started meanwhile refuse the key's value.
func (k *SecretKeeper) Check(ctx context.Context) {
	actx, cancel := context.WithTimeout(ctx, sharedSecretTimeout)
	defer cancel()
	chk, err := keepSecret(actx, k.cfg, k.key, k.secret, k.announce)
	k.mu.Lock()
	defer k.mu.Unlock()
	switch {
	case err != nil:
		k.log.Warn("cannot check the shared HMAC secret in Redis", zap.String("key", k.key), zap.Error(err))
	case chk.matches:
		if chk.restored {
			k.log.Warn(MsgSecretRestored, zap.String("key", k.key))
		} else if k.reported {
			k.log.Info(MsgSecretBack, zap.String("key", k.key))
		}
		k.reported = false
		k.mismatch.Set(0)
	default:
		if !k.reported || chk.found != k.seen {
			k.log.Error(MsgSecretChanged, zap.String("key", k.key),
				zap.String("fingerprint", Fingerprint(k.key, k.secret)))
		}
		k.reported, k.seen = true, chk.found
		k.mismatch.Set(1)
	}
}
