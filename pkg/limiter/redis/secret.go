package redis

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"github.com/redis/rueidis"
)

// The shared secret's protocol uses GET and SETNX on the secret's key and
// GET and SET (with PX) on its InUseKey, nothing else: an ACL can let a
// user create the secret once and never overwrite or delete it
// (docs/redis.md, Least privilege).

// SharedSecretState is what a replica found when it adopted the secret.
type SharedSecretState struct {
	// Secret is the secret the replicas share.
	Secret []byte
	// Created: this call stored its candidate.
	Created bool
	// Legacy: the key holds the 32 raw bytes of an earlier version.
	Legacy bool
}

// SharedSecret makes replicas agree on one secret through Redis and
// announces it. Under InUseKey(key) the running replicas keep the
// fingerprint of the secret they use, for announce; then:
//
//   - the key missing and nothing announced: candidate is stored (SETNX, no
//     expiry) unless another replica stored one first, which is then read;
//   - the key missing while a secret is announced: SecretMissing (the
//     running replicas store theirs again at their next check);
//   - a value that is not a secret: SecretMalformed or SecretWrongType;
//   - a secret other than the one announced: SecretChanged;
//
// and, when the secret is adopted, its fingerprint is announced for
// announce. A *SharedSecretError must not be retried; any other error is
// Redis not answering. It opens its own short-lived connection from cfg
// and closes it.
func SharedSecret(ctx context.Context, cfg Config, key string, candidate []byte, announce time.Duration) (SharedSecretState, error) {
	if len(candidate) != sharedSecretBytes || key == "" || announce <= 0 {
		return SharedSecretState{}, fmt.Errorf("redis store: shared secret: want a key, a %d-byte candidate and an announcement period", sharedSecretBytes)
	}
	c, err := secretClient(ctx, cfg)
	if err != nil {
		return SharedSecretState{}, err
	}
	defer c.Close()
	inUse, err := announced(ctx, c, key)
	if err != nil {
		return SharedSecretState{}, err
	}
	var st SharedSecretState
	v, err := getString(ctx, c, key)
	if err == nil && v == nil {
		if inUse != "" {
			return st, &SharedSecretError{Key: key, Kind: SecretMissing, InUse: inUse,
				Problem: fmt.Sprintf("is missing while running replicas announce the secret they use under %q", InUseKey(key))}
		}
		v = []byte(EncodeSharedSecret(key, candidate))
		if st.Created, err = setNX(ctx, c, key, v); err == nil && !st.Created {
			v, err = getString(ctx, c, key)
		}
	}
	if err != nil {
		return SharedSecretState{}, err
	}
	if v == nil {
		return SharedSecretState{}, fmt.Errorf("redis store: shared secret under %q: stored by another replica, then gone", key)
	}
	if st.Secret, st.Legacy, err = DecodeSharedSecret(key, v); err != nil {
		return SharedSecretState{}, err
	}
	if fp := Fingerprint(key, st.Secret); inUse != "" && inUse != fp {
		return SharedSecretState{}, &SharedSecretError{Key: key, Kind: SecretChanged, Stored: fp, InUse: inUse,
			Problem: fmt.Sprintf("holds a secret other than the one the running replicas announce under %q", InUseKey(key))}
	}
	if err := announceSecret(ctx, c, key, st.Secret, announce); err != nil {
		return SharedSecretState{}, err
	}
	return st, nil
}

// SecretCheck is what a running replica found under the secret's key.
type SecretCheck struct {
	// Restored: the key was missing and this replica's secret was stored
	// again.
	Restored bool
	// Matches: the key holds this replica's secret.
	Matches bool
	// Found identifies what the key holds (a digest of the value, or of
	// the problem), so that a change is reported once.
	Found [sha256.Size]byte
}

// KeepSharedSecret is a running replica's check of the secret it uses:
// it stores it again if the key is missing (SETNX), reads what the key
// holds otherwise, and announces the secret's fingerprint for announce
// (InUseKey) either way, so that replicas started while the key holds
// another secret refuse it. It never replaces a secret the key holds.
func KeepSharedSecret(ctx context.Context, cfg Config, key string, secret []byte, announce time.Duration) (SecretCheck, error) {
	var chk SecretCheck
	c, err := secretClient(ctx, cfg)
	if err != nil {
		return chk, err
	}
	defer c.Close()
	if chk.Restored, err = setNX(ctx, c, key, []byte(EncodeSharedSecret(key, secret))); err != nil {
		return chk, err
	}
	chk.Matches = chk.Restored
	if !chk.Restored {
		v, err := getString(ctx, c, key)
		var se *SharedSecretError
		switch {
		case errors.As(err, &se):
			chk.Found = sha256.Sum256([]byte(se.Problem))
		case err != nil:
			return chk, err
		default:
			chk.Found = sha256.Sum256(v)
			got, _, derr := DecodeSharedSecret(key, v)
			chk.Matches = derr == nil && bytes.Equal(got, secret)
		}
	}
	return chk, announceSecret(ctx, c, key, secret, announce)
}

// secretClient opens a short-lived connection for the shared secret's
// commands, which are safe to retry.
func secretClient(ctx context.Context, cfg Config) (rueidis.Client, error) {
	cfg, err := cfg.Validate()
	if err != nil {
		return nil, err
	}
	opt := clientOption(cfg)
	opt.DisableRetry = false
	type result struct {
		c   rueidis.Client
		err error
	}
	ch := make(chan result, 1)
	go func() {
		c, err := rueidis.NewClient(opt)
		ch <- result{c, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, fmt.Errorf("redis store: shared secret: connecting to %v: %w", cfg.Addrs, r.err)
		}
		return r.c, nil
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.err == nil {
				r.c.Close()
			}
		}()
		return nil, fmt.Errorf("redis store: shared secret: %w", ctx.Err())
	}
}

// getString is GET key: nil when the key is missing; SecretWrongType when
// it holds another type than a string.
func getString(ctx context.Context, c rueidis.Client, key string) ([]byte, error) {
	v, err := c.Do(ctx, c.B().Get().Key(key).Build()).AsBytes()
	switch {
	case rueidis.IsRedisNil(err):
		return nil, nil
	case isWrongType(err):
		return nil, &SharedSecretError{Key: key, Kind: SecretWrongType, Problem: "holds a list, hash, set or stream, not a string (WRONGTYPE)"}
	case err != nil:
		return nil, fmt.Errorf("redis store: shared secret: GET %q: %w", key, err)
	}
	return v, nil
}

// setNX is SETNX key v: whether it stored v.
func setNX(ctx context.Context, c rueidis.Client, key string, v []byte) (bool, error) {
	n, err := c.Do(ctx, c.B().Setnx().Key(key).Value(rueidis.BinaryString(v)).Build()).AsInt64()
	if err != nil {
		return false, fmt.Errorf("redis store: shared secret: SETNX %q: %w", key, err)
	}
	return n == 1, nil
}

// announced is the fingerprint announced under InUseKey(key), "" when
// none.
func announced(ctx context.Context, c rueidis.Client, key string) (string, error) {
	v, err := getString(ctx, c, InUseKey(key))
	switch {
	case err != nil:
		return "", err
	case v != nil && !validFingerprint(string(v)):
		return "", &SharedSecretError{Key: InUseKey(key), Kind: SecretMalformed,
			Problem: fmt.Sprintf("holds %d bytes, not the 16 hex digits of a fingerprint", len(v))}
	}
	return string(v), nil
}

// announceSecret stores the fingerprint of secret under InUseKey(key) for
// announce.
func announceSecret(ctx context.Context, c rueidis.Client, key string, secret []byte, announce time.Duration) error {
	in := InUseKey(key)
	err := c.Do(ctx, c.B().Set().Key(in).Value(Fingerprint(key, secret)).PxMilliseconds(max(announce.Milliseconds(), 1)).Build()).Error()
	if err != nil {
		return fmt.Errorf("redis store: shared secret: SET %q: %w", in, err)
	}
	return nil
}
