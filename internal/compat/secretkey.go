package compat

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/envoy-rls/envoy-rls/pkg/limiter/redis"
)

// The value of a shared secret's key is
//
//	v1:<the secret, 64 lower-case hex digits>:<its fingerprint, 16 hex digits>
//
// where the fingerprint is the first 8 bytes of
// HMAC-SHA256(secret, "envoy-rls shared secret v1\x00" + key). The check
// ties the value to its key and to itself: a value written by anything
// else than envoy-rls, damaged, or copied from another key is refused
// (secretError). It authenticates nothing: whoever can write the key can
// compute it, which is why the replicas also announce the fingerprint of
// the secret they use (InUseKey) and docs/redis.md gives the ACL that lets
// them create the key once and only read it after.
//
// The protocol uses GET and SETNX on the secret's key and GET and SET
// (with PX) on its InUseKey, nothing else: an ACL can let a user create the
// secret once and never overwrite or delete it (docs/redis.md, Least
// privilege).
const (
	sharedSecretPrefix  = "v1:"
	fingerprintBytes    = 8
	sharedSecretContext = "envoy-rls shared secret v1\x00"
)

// SharedSecretBytes is the length of a secret the replicas share.
const SharedSecretBytes = 32

// InUseKey is the key under which the replicas sharing the secret of key
// announce its fingerprint, with an expiry a few rechecks long: while it
// lives, a replica refuses a secret of another fingerprint under key.
func InUseKey(key string) string { return key + ":in-use" }

// Fingerprint is the check of secret under key: 16 hex digits that name
// the secret without revealing it.
func Fingerprint(key string, secret []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(sharedSecretContext))
	m.Write([]byte(key))
	return hex.EncodeToString(m.Sum(nil)[:fingerprintBytes])
}

// EncodeSharedSecret is the value stored under key for secret.
func EncodeSharedSecret(key string, secret []byte) string {
	return sharedSecretPrefix + hex.EncodeToString(secret) + ":" + Fingerprint(key, secret)
}

// DecodeSharedSecret reads the value v of key: the secret, and legacy when
// v is the 32 raw bytes that envoy-rls stored before the v1 form (read as
// they are; there is no check to verify). Any other value is a
// *secretError of kind secretMalformed.
func DecodeSharedSecret(key string, v []byte) (secret []byte, legacy bool, err error) {
	bad := func(what string) ([]byte, bool, error) {
		return nil, false, &secretError{Key: key, Kind: secretMalformed, Problem: what}
	}
	rest, ok := bytes.CutPrefix(v, []byte(sharedSecretPrefix))
	if !ok {
		if len(v) == SharedSecretBytes {
			return bytes.Clone(v), true, nil
		}
		return bad(fmt.Sprintf("holds %d bytes that are neither the v1 form nor the %d raw bytes of earlier versions", len(v), SharedSecretBytes))
	}
	hexSecret, check, ok := strings.Cut(string(rest), ":")
	if !ok || len(hexSecret) != 2*SharedSecretBytes || len(check) != 2*fingerprintBytes {
		return bad("holds a v1 value of the wrong form")
	}
	secret, err = hex.DecodeString(hexSecret)
	if err != nil {
		return bad("holds a v1 value whose secret is not hex")
	}
	if !hmac.Equal([]byte(check), []byte(Fingerprint(key, secret))) {
		return bad("holds a v1 value whose check does not match its secret (damaged, or copied from another key)")
	}
	return secret, false, nil
}

// validFingerprint is the form of an announced fingerprint.
func validFingerprint(s string) bool {
	if len(s) != 2*fingerprintBytes {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil && strings.ToLower(s) == s
}

// secretProblem is what is wrong with a shared secret's keys.
type secretProblem int

const (
	// secretMalformed: the key holds a string that is not a shared secret.
	secretMalformed secretProblem = iota + 1
	// secretWrongType: the key holds a list, hash, set… (WRONGTYPE).
	secretWrongType
	// secretChanged: the key holds a secret other than the one the running
	// replicas announce (InUseKey).
	secretChanged
	// secretMissing: the key is missing while running replicas announce
	// the secret they use: they store it again at their next check.
	secretMissing
)

// secretError is a shared secret that a replica must not adopt: a start-up
// error, never retried. Key is the Redis key at fault (the secret's or its
// InUseKey); Problem says what of it, after the key.
type secretError struct {
	Key     string
	Kind    secretProblem
	Problem string
	// Stored and InUse are the fingerprints of the secret under the key
	// and of the one the running replicas announce (secretChanged).
	Stored, InUse string
}

func (e *secretError) Error() string {
	return fmt.Sprintf("redis store: shared secret: the key %q %s", e.Key, e.Problem)
}

// sharedState is what a replica found when it adopted the secret.
type sharedState struct {
	// secret is the secret the replicas share.
	secret []byte
	// created: this call stored its candidate.
	created bool
	// legacy: the key holds the 32 raw bytes of an earlier version.
	legacy bool
}

// adoptSecret makes replicas agree on one secret through Redis and
// announces it. Under InUseKey(key) the running replicas keep the
// fingerprint of the secret they use, for announce; then:
//
//   - the key missing and nothing announced: candidate is stored (SETNX, no
//     expiry) unless another replica stored one first, which is then read;
//   - the key missing while a secret is announced: secretMissing (the
//     running replicas store theirs again at their next check);
//   - a value that is not a secret: secretMalformed or secretWrongType;
//   - a secret other than the one announced: secretChanged;
//
// and, when the secret is adopted, its fingerprint is announced for
// announce. A *secretError must not be retried; any other error is Redis
// not answering. It opens its own short-lived connection from cfg and
// closes it.
func adoptSecret(ctx context.Context, cfg redis.Config, key string, candidate []byte, announce time.Duration) (sharedState, error) {
	if len(candidate) != SharedSecretBytes || key == "" || announce <= 0 {
		return sharedState{}, fmt.Errorf("redis store: shared secret: want a key, a %d-byte candidate and an announcement period", SharedSecretBytes)
	}
	c, err := secretClient(ctx, cfg)
	if err != nil {
		return sharedState{}, err
	}
	defer c.Close()
	inUse, err := announced(ctx, c, key)
	if err != nil {
		return sharedState{}, err
	}
	var st sharedState
	v, err := getString(ctx, c, key)
	if err == nil && v == nil {
		if inUse != "" {
			return st, &secretError{Key: key, Kind: secretMissing, InUse: inUse,
				Problem: fmt.Sprintf("is missing while running replicas announce the secret they use under %q", InUseKey(key))}
		}
		v = []byte(EncodeSharedSecret(key, candidate))
		if st.created, err = setNX(ctx, c, key, v); err == nil && !st.created {
			v, err = getString(ctx, c, key)
		}
	}
	if err != nil {
		return sharedState{}, err
	}
	if v == nil {
		return sharedState{}, fmt.Errorf("redis store: shared secret under %q: stored by another replica, then gone", key)
	}
	if st.secret, st.legacy, err = DecodeSharedSecret(key, v); err != nil {
		return sharedState{}, err
	}
	if fp := Fingerprint(key, st.secret); inUse != "" && inUse != fp {
		return sharedState{}, &secretError{Key: key, Kind: secretChanged, Stored: fp, InUse: inUse,
			Problem: fmt.Sprintf("holds a secret other than the one the running replicas announce under %q", InUseKey(key))}
	}
	if err := announceSecret(ctx, c, key, st.secret, announce); err != nil {
		return sharedState{}, err
	}
	return st, nil
}

// secretCheck is what a running replica found under the secret's key.
type secretCheck struct {
	// restored: the key was missing and this replica's secret was stored
	// again.
	restored bool
	// matches: the key holds this replica's secret.
	matches bool
	// found identifies what the key holds (a digest of the value, or of
	// the problem), so that a change is reported once.
	found [sha256.Size]byte
}

// keepSecret is a running replica's check of the secret it uses: it
// stores it again if the key is missing (SETNX), reads what the key holds
// otherwise, and announces the secret's fingerprint for announce
// (InUseKey) either way, so that replicas started while the key holds
// another secret refuse it. It never replaces a secret the key holds.
func keepSecret(ctx context.Context, cfg redis.Config, key string, secret []byte, announce time.Duration) (secretCheck, error) {
	var chk secretCheck
	c, err := secretClient(ctx, cfg)
	if err != nil {
		return chk, err
	}
	defer c.Close()
	if chk.restored, err = setNX(ctx, c, key, []byte(EncodeSharedSecret(key, secret))); err != nil {
		return chk, err
	}
	chk.matches = chk.restored
	if !chk.restored {
		v, err := getString(ctx, c, key)
		var se *secretError
		switch {
		case errors.As(err, &se):
			chk.found = sha256.Sum256([]byte(se.Problem))
		case err != nil:
			return chk, err
		default:
			chk.found = sha256.Sum256(v)
			got, _, derr := DecodeSharedSecret(key, v)
			chk.matches = derr == nil && bytes.Equal(got, secret)
		}
	}
	return chk, announceSecret(ctx, c, key, secret, announce)
}

// secretClient opens a short-lived connection for the shared secret's
// commands, within ctx: the dial is not cut short by ctx, so a dial still
// running when ctx ends closes its client itself.
func secretClient(ctx context.Context, cfg redis.Config) (rueidis.Client, error) {
	type result struct {
		c   rueidis.Client
		err error
	}
	ch := make(chan result, 1)
	go func() {
		c, err := redis.NewClient(cfg, "envoy-rls")
		ch <- result{c, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, fmt.Errorf("redis store: shared secret: %w", r.err)
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

// getString is GET key: nil when the key is missing; secretWrongType when
// it holds another type than a string.
func getString(ctx context.Context, c rueidis.Client, key string) ([]byte, error) {
	v, err := c.Do(ctx, c.B().Get().Key(key).Build()).AsBytes()
	re, isRedisErr := rueidis.IsRedisErr(err)
	switch {
	case rueidis.IsRedisNil(err):
		return nil, nil
	case isRedisErr && strings.HasPrefix(re.Error(), "WRONGTYPE"):
		return nil, &secretError{Key: key, Kind: secretWrongType, Problem: "holds a list, hash, set or stream, not a string (WRONGTYPE)"}
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
		return "", &secretError{Key: InUseKey(key), Kind: secretMalformed,
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
