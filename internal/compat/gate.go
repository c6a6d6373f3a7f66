package compat

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/redis"
)

// ErrSecretNotRead is the cause of every store failure of a SecretGate not
// yet open.
var ErrSecretNotRead = errors.New("the shared HMAC secret is not read from Redis yet")

// SecretGate is the store of a replica that serves before it could read the
// HMAC secret it shares through Redis. Subjects are digests under that
// secret, so until it is read no request may reach the store: each one is
// Unavailable (limiter.CategoryUnkeyed: nothing sent, nothing
// mutated), which the failover wrapper above answers by each policy's
// failure mode, and Ping fails, so that the store is reported down
// (/healthz, envoy_rls_store_up, /readyz with --readiness store). Open lets
// everything through from then on, at the cost of one atomic load per call.
// A SecretGate is safe for concurrent use.
type SecretGate struct {
	store limiter.Store
	open  atomic.Bool
	cause atomic.Pointer[error] // why it is closed: ErrSecretNotRead and the last attempt's failure
}

var (
	_ limiter.Store    = (*SecretGate)(nil)
	_ limiter.Resetter = (*SecretGate)(nil)
)

// NewSecretGate returns a closed gate in front of store; cause is why the
// secret could not be read yet.
func NewSecretGate(store limiter.Store, cause error) *SecretGate {
	g := &SecretGate{store: store}
	g.Waiting(cause)
	return g
}

// Waiting records why the secret is still not read (the last attempt's
// failure), for the failures and the pings that follow.
func (g *SecretGate) Waiting(cause error) {
	err := ErrSecretNotRead
	if cause != nil {
		err = fmt.Errorf("%w: %w", ErrSecretNotRead, cause)
	}
	g.cause.Store(&err)
}

// Open lets every call through to the store from now on. Call it once the
// rules are keyed with the secret.
func (g *SecretGate) Open() { g.open.Store(true) }

// closed returns why the gate is closed, nil once open.
func (g *SecretGate) closed() error {
	if g.open.Load() {
		return nil
	}
	return *g.cause.Load()
}

// Evaluate implements limiter.Store.
func (g *SecretGate) Evaluate(ctx context.Context, batch []limiter.Request, out []limiter.Outcome) {
	err := g.closed()
	if err == nil {
		g.store.Evaluate(ctx, batch, out)
		return
	}
	for i := range batch {
		out[i] = limiter.UnavailableOutcome(redis.DefaultRetryAfter, limiter.CategoryUnkeyed, err)
	}
}

// Ping fails while the gate is closed; then it is the store's, if it has
// one.
func (g *SecretGate) Ping(ctx context.Context) error {
	if err := g.closed(); err != nil {
		return err
	}
	if p, ok := g.store.(interface{ Ping(context.Context) error }); ok {
		return p.Ping(ctx)
	}
	return nil
}

// Reset implements limiter.Resetter: an error while the gate is closed
// (the states' keys are not known).
func (g *SecretGate) Reset(ctx context.Context, states []limiter.Request) (int, error) {
	if err := g.closed(); err != nil {
		return 0, err
	}
	rs, ok := g.store.(limiter.Resetter)
	if !ok {
		return 0, limiter.ErrResetUnsupported
	}
	return rs.Reset(ctx, states)
}

// ResetPolicy implements limiter.Resetter: an error while the gate is
// closed.
func (g *SecretGate) ResetPolicy(ctx context.Context, policyID string, revision uint32, b limiter.ResetBounds) (limiter.PolicyReset, error) {
	if err := g.closed(); err != nil {
		return limiter.PolicyReset{}, err
	}
	rs, ok := g.store.(limiter.Resetter)
	if !ok {
		return limiter.PolicyReset{}, limiter.ErrResetUnsupported
	}
	return rs.ResetPolicy(ctx, policyID, revision, b)
}
