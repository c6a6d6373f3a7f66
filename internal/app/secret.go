package app

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/internal/compat"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// sharedSecret is the HMAC secret shared through Redis (compat), when the
// replicas share one.
type sharedSecret struct {
	recheck time.Duration
	// read is the secret, read before serving; nil when none is shared,
	// or while it is not read yet (wait).
	read []byte
	// wait, when the secret could not be read before serving, goes on
	// reading it while gate answers every call by its policy's failure
	// mode (awaitSecret); notYet is why the first attempt did not read
	// it. Nil otherwise.
	wait   *compat.SecretFetch
	gate   *compat.SecretGate
	notYet error
}

// secretRefusal is the refusal of the shared secret read while serving:
// the start-up error a refused start would have printed.
type secretRefusal struct{ error }

// readSharedSecret makes one attempt to read the shared secret, when the
// replicas share one, before serving: a key that must not be adopted stops
// the start at once. Redis not answering does not: the replica serves by
// failure mode meanwhile (awaitSecret).
func (s *server) readSharedSecret(ctx context.Context) error {
	o := s.opts
	s.secret.recheck = compat.SharedSecretRecheck
	if s.hooks.secretRecheck > 0 {
		s.secret.recheck = s.hooks.secretRecheck
	}
	if !compat.UsesSharedSecret(o.Options, s.getenv) {
		return nil
	}
	fetch, err := compat.NewSecretFetch(o.Options, o.store.RedisConfig, s.secret.recheck, s.log)
	if err != nil {
		return err
	}
	if s.secret.read, s.secret.notYet, err = fetch.First(ctx); err != nil {
		return err
	}
	if s.secret.read != nil {
		s.log.Warn(compat.MsgSharedSecret, zap.String("key", o.HMACSecretRedisKey))
	} else {
		s.secret.wait = fetch
	}
	return nil
}

// guardStore keeps the shared secret read before serving, or puts st
// behind the gate while it is not read yet.
func (s *server) guardStore(ctx context.Context, st limiter.Store) limiter.Store {
	if s.secret.read != nil {
		s.keepSecret(ctx, s.secret.read)
	}
	if s.secret.wait != nil {
		s.secret.gate = compat.NewSecretGate(st, s.secret.notYet)
		return s.secret.gate
	}
	return st
}

// awaitSecret reads, in the background, the shared HMAC secret that could
// not be read before serving, then keys the rules with it and opens the
// gate: the calls that were answered by their policies' failure mode are
// decided by Redis from then on. errc receives the refusal of a key that
// must not be adopted (secretRefusal).
//
// A call that matched its rules just before they were keyed with the
// secret and reaches the store just after the gate opened is counted under
// the placeholder key once (a fresh state, which expires); every later
// call uses the shared secret's keys.
func (s *server) awaitSecret(ctx context.Context, errc chan<- error) {
	if s.secret.wait == nil {
		return
	}
	s.background(func() {
		secret, err := s.secret.wait.Wait(ctx, s.secret.gate.Waiting)
		if err == nil {
			err = s.rules.SetSecret(secret)
		}
		if err != nil {
			if ctx.Err() == nil {
				errc <- secretRefusal{err}
			}
			return
		}
		s.secret.gate.Open()
		key := zap.String("key", s.opts.HMACSecretRedisKey)
		s.log.Warn(compat.MsgSharedSecret, key)
		s.log.Info(compat.MsgSecretRead, key)
		s.storeState.Probe(ctx)
		s.keepSecret(ctx, secret)
	})
}

// keepSecret checks the shared secret's key every recheck
// (compat.SecretKeeper) until ctx ends.
func (s *server) keepSecret(ctx context.Context, secret []byte) {
	cfg, _ := s.opts.store.RedisConfig() // checked by compat.NewSecretFetch
	keeper := compat.NewSecretKeeper(cfg, s.opts.HMACSecretRedisKey, secret, s.secret.recheck, s.secretMismatch, s.log)
	s.every(ctx, s.secret.recheck, func(time.Time) { keeper.Check(ctx) })
}
