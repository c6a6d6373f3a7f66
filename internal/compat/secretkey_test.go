package compat

import (
	"bytes"
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/redis"
)

// announceFor is the announcement period of the tests: longer than any
// test.
const announceFor = time.Minute

func secretOf(b byte) []byte { return bytes.Repeat([]byte{b}, SharedSecretBytes) }

func TestSharedSecretFormat(t *testing.T) {
	key := "envoy-rls:hmac-secret"
	s := secretOf('a')
	v := EncodeSharedSecret(key, s)
	if !strings.HasPrefix(v, "v1:"+strings.Repeat("61", 32)+":") || len(v) != 3+64+1+16 {
		t.Fatalf("EncodeSharedSecret = %q", v)
	}
	got, legacy, err := DecodeSharedSecret(key, []byte(v))
	if err != nil || legacy || !bytes.Equal(got, s) {
		t.Fatalf("DecodeSharedSecret(%q) = %q, %v, %v", v, got, legacy, err)
	}
	// The 32 raw bytes earlier versions stored are read as they are.
	if got, legacy, err := DecodeSharedSecret(key, s); err != nil || !legacy || !bytes.Equal(got, s) {
		t.Fatalf("legacy value: %q, %v, %v", got, legacy, err)
	}
	flip := []byte(v)
	flip[10] ^= 1 // a hex digit of the secret
	for _, c := range []struct {
		name, value, want string
	}{
		{"one byte", "x", "holds 1 bytes that are neither the v1 form"},
		{"short", strings.Repeat("s", 31), "holds 31 bytes"},
		{"long", strings.Repeat("s", 33), "holds 33 bytes"},
		{"v1 truncated", v[:len(v)-1], "a v1 value of the wrong form"},
		{"v1 without check", v[:3+64], "a v1 value of the wrong form"},
		{"v1 not hex", "v1:" + strings.Repeat("zz", 32) + v[3+64:], "whose secret is not hex"},
		{"v1 damaged", string(flip), "whose check does not match"},
		{"v1 of another key", EncodeSharedSecret("other:key", s), "whose check does not match"},
	} {
		_, _, err := DecodeSharedSecret(key, []byte(c.value))
		var se *secretError
		if !errors.As(err, &se) || se.Kind != secretMalformed || se.Key != key || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want a malformed-secret error with %q", c.name, err, c.want)
		}
	}
	if Fingerprint(key, s) == Fingerprint(key, secretOf('b')) || Fingerprint(key, s) == Fingerprint("k2", s) || !validFingerprint(Fingerprint(key, s)) {
		t.Error("fingerprints must differ by secret and key")
	}
}

// sharedSecretEnv is a Redis and a key of its own for one test.
func sharedSecretEnv(t *testing.T) (srv *redistest.Server, cfg redis.Config, key string, ctx context.Context) {
	t.Helper()
	srv = redistest.Standalone(t, redistest.Local())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return srv, redis.Config{Addrs: []string{srv.Addr()}}, "test:shared-secret", ctx
}

func wantSecretError(t *testing.T, err error, kind secretProblem, key string) *secretError {
	t.Helper()
	var se *secretError
	if !errors.As(err, &se) || se.Kind != kind || se.Key != key {
		t.Fatalf("%v, want a shared-secret error of kind %d on %q", err, kind, key)
	}
	return se
}

func TestSharedSecretFirstStoredWins(t *testing.T) {
	srv, cfg, key, ctx := sharedSecretEnv(t)
	a, b := secretOf('a'), secretOf('b')
	st, err := adoptSecret(ctx, cfg, key, a, announceFor)
	if err != nil || !st.created || st.legacy || !bytes.Equal(st.secret, a) {
		t.Fatalf("first call: %+v, %v; want its own candidate, created", st, err)
	}
	st, err = adoptSecret(ctx, cfg, key, b, announceFor)
	if err != nil || st.created || !bytes.Equal(st.secret, a) {
		t.Fatalf("second call: %+v, %v; want the first candidate", st, err)
	}
	if v := srv.MustDo("GET", key); v != EncodeSharedSecret(key, a) {
		t.Errorf("GET %s = %v", key, v)
	}
	if v := srv.MustDo("GET", InUseKey(key)); v != Fingerprint(key, a) {
		t.Errorf("GET %s = %v, want the fingerprint", InUseKey(key), v)
	}
	if ttl, _ := srv.MustDo("PTTL", InUseKey(key)).(int64); ttl <= 0 || ttl > announceFor.Milliseconds() {
		t.Errorf("PTTL %s = %d, want at most %v", InUseKey(key), ttl, announceFor)
	}
	if _, err := adoptSecret(ctx, cfg, key, nil, announceFor); err == nil {
		t.Error("empty candidate accepted")
	}
}

// TestSharedSecretRefused: what a replica must not adopt is an error of
// its own kind, never retried: a value that is no secret, another type, a
// secret other than the one announced, a key lost while one is announced.
func TestSharedSecretRefused(t *testing.T) {
	srv, cfg, key, ctx := sharedSecretEnv(t)
	a, b := secretOf('a'), secretOf('b')

	srv.MustDo("SET", key, "x")
	_, err := adoptSecret(ctx, cfg, key, a, announceFor)
	wantSecretError(t, err, secretMalformed, key)

	srv.MustDo("DEL", key)
	srv.MustDo("RPUSH", key, "x")
	_, err = adoptSecret(ctx, cfg, key, a, announceFor)
	wantSecretError(t, err, secretWrongType, key)

	// A deployment runs with a; the key is overwritten with b, well formed.
	srv.MustDo("DEL", key)
	if _, err := adoptSecret(ctx, cfg, key, a, announceFor); err != nil {
		t.Fatal(err)
	}
	srv.MustDo("SET", key, EncodeSharedSecret(key, b))
	se := wantSecretError(t, func() error { _, err := adoptSecret(ctx, cfg, key, a, announceFor); return err }(), secretChanged, key)
	if se.InUse != Fingerprint(key, a) || se.Stored != Fingerprint(key, b) {
		t.Errorf("fingerprints %s (in use), %s (stored); want a's, b's", se.InUse, se.Stored)
	}
	// Raw bytes of the legacy length do not pass either.
	srv.MustDo("SET", key, string(b))
	_, err = adoptSecret(ctx, cfg, key, a, announceFor)
	wantSecretError(t, err, secretChanged, key)
	// Lost while announced: nothing stored.
	srv.MustDo("DEL", key)
	_, err = adoptSecret(ctx, cfg, key, b, announceFor)
	wantSecretError(t, err, secretMissing, key)
	if n := srv.MustDo("EXISTS", key); n != int64(0) {
		t.Errorf("EXISTS %s = %v: a refused replica stored its candidate", key, n)
	}
	// A damaged announcement.
	srv.MustDo("SET", InUseKey(key), "nonsense")
	_, err = adoptSecret(ctx, cfg, key, b, announceFor)
	wantSecretError(t, err, secretMalformed, InUseKey(key))
	// Once the announcement is gone (every replica stopped), a legacy
	// value is adopted as it is.
	srv.MustDo("DEL", InUseKey(key))
	srv.MustDo("SET", key, string(b))
	st, err := adoptSecret(ctx, cfg, key, a, announceFor)
	if err != nil || !st.legacy || !bytes.Equal(st.secret, b) {
		t.Fatalf("legacy value: %+v, %v", st, err)
	}
}

// TestKeepSharedSecret: a running replica stores its secret again when the
// key is lost, reports another value with a digest that changes with it,
// never replaces it, and announces its own secret every time.
func TestKeepSharedSecret(t *testing.T) {
	srv, cfg, key, ctx := sharedSecretEnv(t)
	a, b := secretOf('a'), secretOf('b')
	keep := func() secretCheck {
		t.Helper()
		chk, err := keepSecret(ctx, cfg, key, a, announceFor)
		if err != nil {
			t.Fatal(err)
		}
		if v := srv.MustDo("GET", InUseKey(key)); v != Fingerprint(key, a) {
			t.Fatalf("announced %v, want a's fingerprint", v)
		}
		return chk
	}
	if chk := keep(); !chk.restored || !chk.matches {
		t.Fatalf("on a missing key: %+v, want restored", chk)
	}
	if chk := keep(); chk.restored || !chk.matches {
		t.Fatalf("on its own key: %+v", chk)
	}
	srv.MustDo("SET", key, EncodeSharedSecret(key, b))
	first := keep()
	if first.matches || first.restored {
		t.Fatalf("on another secret: %+v", first)
	}
	if again := keep(); again.found != first.found {
		t.Error("the same value found twice has two digests")
	}
	if v := srv.MustDo("GET", key); v != EncodeSharedSecret(key, b) {
		t.Errorf("the key was replaced: %v", v)
	}
	srv.MustDo("DEL", key)
	srv.MustDo("RPUSH", key, "x")
	if list := keep(); list.matches || list.found == first.found {
		t.Fatalf("on a list: %+v", list)
	}
	// A legacy value holding its own secret matches.
	srv.MustDo("DEL", key)
	srv.MustDo("SET", key, string(a))
	if chk := keep(); !chk.matches {
		t.Fatalf("on its own secret in the legacy form: %+v", chk)
	}
}

func TestSharedSecretUnreachable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// A port nothing listens on: a closed listener's.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	_, err = adoptSecret(ctx, redis.Config{Addrs: []string{addr}}, "k", secretOf('a'), announceFor)
	var se *secretError
	if err == nil || errors.As(err, &se) {
		t.Errorf("%v, want a connection error", err)
	}
}

// TestSharedSecretACL: the ACL of docs/redis.md lets the user create the
// secret once and read it, announce its fingerprint, and nothing else on
// those keys: no overwrite, no delete, no expiry, not even from a script.
func TestSharedSecretACL(t *testing.T) {
	srv := redistest.Standalone(t, redistest.Local())
	const key = "envoy-rls:hmac-secret"
	// docs/redis.md, Least privilege: the store's rules, then the two
	// selectors of the shared secret.
	srv.MustDo("ACL", "SETUSER", "envoy-rls", "on", ">s3cret-pw", "resetkeys", "~rate:*", "-@all",
		"+hello", "+ping", "+client|setname",
		"+evalsha", "+eval", "+time", "+mget", "+get", "+exists", "+set", "+pexpire", "+hmget",
		"(~envoy-rls:hmac-secret +get +setnx)", "(~envoy-rls:hmac-secret:in-use +get +set)")
	user := redis.Config{Addrs: []string{srv.Addr()}, Username: "envoy-rls", Password: "s3cret-pw"}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a := secretOf('a')
	st, err := adoptSecret(ctx, user, key, a, announceFor)
	if err != nil || !st.created {
		t.Fatalf("creating the secret as the ACL user: %+v, %v", st, err)
	}
	if st, err := adoptSecret(ctx, user, key, secretOf('b'), announceFor); err != nil || !bytes.Equal(st.secret, a) {
		t.Fatalf("reading it: %+v, %v", st, err)
	}
	if chk, err := keepSecret(ctx, user, key, a, announceFor); err != nil || !chk.matches {
		t.Fatalf("checking it: %+v, %v", chk, err)
	}
	conn, err := redistest.Dial(srv.Addr(), nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Do(ctx, "AUTH", "envoy-rls", "s3cret-pw"); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range [][]string{
		{"SET", key, "x"},
		{"DEL", key},
		{"PEXPIRE", key, "1"},
		{"SET", key, "x", "NX", "GET"},
		{"EVAL", "return redis.call('PEXPIRE', KEYS[1], 1)", "1", key},
		{"EVAL", "return redis.call('SET', KEYS[1], 'x')", "1", key},
		{"GETDEL", key},
		{"RENAME", key, "rate:x"},
	} {
		if _, err := conn.Do(ctx, cmd...); err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Errorf("%q as the ACL user: %v, want NOPERM", cmd, err)
		}
	}
	if v := srv.MustDo("GET", key); v != EncodeSharedSecret(key, a) {
		t.Errorf("the secret changed: %v", v)
	}
}

// TestSharedSecretUnixSocket: the secret is shared over a standalone
// server's Unix socket, as the reference's default (REDIS_SOCKET_TYPE=unix)
// reaches Redis.
func TestSharedSecretUnixSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "redis.sock")
	redistest.Standalone(t, redistest.Local(), redistest.WithArgs("--unixsocket", sock, "--unixsocketperm", "700"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := adoptSecret(ctx, redis.Config{Addrs: []string{sock}}, "k", secretOf('k'), announceFor); err != nil {
		t.Errorf("adoptSecret over the socket: %v", err)
	}
}

// TestSharedSecretDocACL: the user of docs/redis.md's first ACL line may
// not share a secret; with the optional lines it may, and Redis denies it
// nothing (its ACL LOG stays empty).
func TestSharedSecretDocACL(t *testing.T) {
	srv := redistest.Standalone(t, redistest.Local())
	acl, err := redistest.DocACL("../../docs/redis.md", "s3cret-pw")
	if err != nil {
		t.Fatal(err)
	}
	srv.MustDo(acl[0]...)
	user := redis.Config{Addrs: []string{srv.Addr()}, Username: "envoy-rls", Password: "s3cret-pw"}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	candidate := secretOf('s')
	if _, err := adoptSecret(ctx, user, DefaultHMACSecretRedisKey, candidate, announceFor); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("shared secret without the ACL's secret line: %v, want NOPERM", err)
	}
	srv.MustDo("ACL", "LOG", "RESET")
	for _, l := range acl[1:] {
		srv.MustDo(l...)
	}
	if got, err := adoptSecret(ctx, user, DefaultHMACSecretRedisKey, candidate, announceFor); err != nil || !bytes.Equal(got.secret, candidate) || !got.created {
		t.Fatalf("shared secret with the ACL's secret line: %+v, %v", got, err)
	}
	if l := srv.MustDo("ACL", "LOG").([]any); len(l) != 0 {
		t.Fatalf("ACL LOG: %v, want no denial", l)
	}
}
