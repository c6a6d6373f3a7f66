package redis

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// The value of a shared secret's key is
//
//	v1:<the secret, 64 lower-case hex digits>:<its fingerprint, 16 hex digits>
//
// where the fingerprint is the first 8 bytes of
// HMAC-SHA256(secret, "envoy-rls shared secret v1\x00" + key). The check
// ties the value to its key and to itself: a value written by anything
// else than envoy-rls, damaged, or copied from another key is refused
// (SharedSecretError). It authenticates nothing: whoever can write the key
// can compute it, which is why the replicas also announce the fingerprint
// of the secret they use (InUseKey) and docs/redis.md gives the ACL that
// lets them create the key once and only read it after.
const (
	sharedSecretPrefix  = "v1:"
	sharedSecretBytes   = 32
	fingerprintBytes    = 8
	sharedSecretContext = "envoy-rls shared secret v1\x00"
)

// SharedSecretBytes is the length of a secret SharedSecret stores.
const SharedSecretBytes = sharedSecretBytes

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
// *SharedSecretError of kind SecretMalformed.
func DecodeSharedSecret(key string, v []byte) (secret []byte, legacy bool, err error) {
	bad := func(what string) ([]byte, bool, error) {
		return nil, false, &SharedSecretError{Key: key, Kind: SecretMalformed, Problem: what}
	}
	rest, ok := bytes.CutPrefix(v, []byte(sharedSecretPrefix))
	if !ok {
		if len(v) == sharedSecretBytes {
			return bytes.Clone(v), true, nil
		}
		return bad(fmt.Sprintf("holds %d bytes that are neither the v1 form nor the %d raw bytes of earlier versions", len(v), sharedSecretBytes))
	}
	hexSecret, check, ok := strings.Cut(string(rest), ":")
	if !ok || len(hexSecret) != 2*sharedSecretBytes || len(check) != 2*fingerprintBytes {
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

// SecretProblem is what is wrong with a shared secret's keys.
type SecretProblem int

const (
	// SecretMalformed: the key holds a string that is not a shared secret.
	SecretMalformed SecretProblem = iota + 1
	// SecretWrongType: the key holds a list, hash, set… (WRONGTYPE).
	SecretWrongType
	// SecretChanged: the key holds a secret other than the one the
	// running replicas announce (InUseKey).
	SecretChanged
	// SecretMissing: the key is missing while running replicas announce
	// the secret they use: they store it again at their next check.
	SecretMissing
)

// SharedSecretError is a shared secret that a replica must not adopt: a
// start-up error, never retried. Key is the Redis key at fault (the
// secret's or its InUseKey); Problem says what of it, after the key.
type SharedSecretError struct {
	Key     string
	Kind    SecretProblem
	Problem string
	// Stored and InUse are the fingerprints of the secret under the key
	// and of the one the running replicas announce (SecretChanged).
	Stored, InUse string
}

func (e *SharedSecretError) Error() string {
	return fmt.Sprintf("redis store: shared secret: the key %q %s", e.Key, e.Problem)
}
