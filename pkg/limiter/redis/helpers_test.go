package redis

import (
	"context"
	"crypto/sha256"
	"strconv"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/lua"
)

// env is one Redis server, a Store on it and a raw connection for seeding
// and inspecting state.
type env struct {
	t     testing.TB
	srv   *redistest.Server
	conn  *redistest.Conn
	store *Store
}

func newEnv(t testing.TB, opts ...redistest.Option) *env {
	t.Helper()
	srv := redistest.Standalone(t, opts...)
	return newEnvOn(t, srv, Config{Addrs: []string{srv.Addr()}})
}

func newEnvOn(t testing.TB, srv *redistest.Server, cfg Config) *env {
	t.Helper()
	conn, err := redistest.Dial(srv.Addr(), nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &env{t: t, srv: srv, conn: conn, store: newStore(t, cfg)}
}

func newStore(t testing.TB, cfg Config) *Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := New(ctx, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

func (e *env) do(args ...string) any {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	v, err := e.conn.Do(ctx, args...)
	if err != nil {
		e.t.Fatalf("%v: %v", args, err)
	}
	return v
}

// serverNow reads Redis TIME in milliseconds.
func (e *env) serverNow() int64 {
	e.t.Helper()
	a := e.do("TIME").([]any)
	sec, _ := strconv.ParseInt(a[0].(string), 10, 64)
	usec, _ := strconv.ParseInt(a[1].(string), 10, 64)
	return sec*1000 + usec/1000
}

// seed writes st as the program's hash (all eight fields) with a TTL.
func (e *env) seed(key string, st limiter.State) {
	e.t.Helper()
	e.do("DEL", key)
	e.do("HSET", key, "schema", strconv.FormatInt(st.Schema, 10), "alg", st.Algorithm.String(),
		"policy", st.PolicyID, "rev", strconv.FormatUint(uint64(st.Revision), 10),
		"last", strconv.FormatInt(st.LastObservedMs, 10), "a", strconv.FormatInt(st.A, 10),
		"b", strconv.FormatInt(st.B, 10), "c", strconv.FormatInt(st.C, 10))
	e.do("PEXPIRE", key, "600000")
}

// hash returns the key's hash fields.
func (e *env) hash(key string) map[string]string {
	e.t.Helper()
	a, _ := e.do("HGETALL", key).([]any)
	m := make(map[string]string, len(a)/2)
	for i := 0; i+1 < len(a); i += 2 {
		m[a[i].(string)] = a[i+1].(string)
	}
	return m
}

func (e *env) dump(key string) any {
	e.t.Helper()
	return e.do("DUMP", key)
}

func (e *env) pttl(key string) int64 {
	e.t.Helper()
	return e.do("PTTL", key).(int64)
}

// v1Scripts holds the single-key v1 programs (index: limiter.Algorithm),
// which the store no longer runs but whose parity with limiter.Apply (and
// with the batch program, on the same state) the tests keep checking.
var v1Scripts = func() [4]*rueidis.Lua {
	var s [4]*rueidis.Lua
	for _, p := range lua.Programs() {
		s[p.Algorithm] = rueidis.NewLuaScript(p.Source)
	}
	return s
}()

// run executes the policy's single-key v1 program directly and returns the
// parsed reply.
func (e *env) run(p *limiter.Policy, key string, cost int64) limiter.Reply {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res := v1Scripts[p.Algorithm()].Exec(ctx, e.store.client, []string{key}, lua.AppendArgs(nil, p, cost))
	msgs, err := res.ToArray()
	if err != nil {
		e.t.Fatalf("run %s: %v", p.ID(), err)
	}
	fields := make([]string, len(msgs))
	for i := range msgs {
		if fields[i], err = msgs[i].ToString(); err != nil {
			e.t.Fatalf("run %s: field %d: %v", p.ID(), i, err)
		}
	}
	r, err := lua.ParseReply(p, fields)
	if err != nil {
		e.t.Fatalf("run %s: %v (fields %q)", p.ID(), err, fields)
	}
	return r
}

// evaluate runs one request through the Store.
func (e *env) evaluate(p *limiter.Policy, subject limiter.SubjectDigest, cost int64) limiter.Outcome {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out := make([]limiter.Outcome, 1)
	e.store.Evaluate(ctx, []limiter.Request{{Policy: p, Subject: subject, Cost: cost}}, out)
	return out[0]
}

func stateHash(st limiter.State) map[string]string {
	return map[string]string{
		"schema": strconv.FormatInt(st.Schema, 10), "alg": st.Algorithm.String(), "policy": st.PolicyID,
		"rev": strconv.FormatUint(uint64(st.Revision), 10), "last": strconv.FormatInt(st.LastObservedMs, 10),
		"a": strconv.FormatInt(st.A, 10), "b": strconv.FormatInt(st.B, 10), "c": strconv.FormatInt(st.C, 10),
	}
}

func subjectOf(s string) limiter.SubjectDigest { return sha256.Sum256([]byte(s)) }

func keyOf(p *limiter.Policy, subject limiter.SubjectDigest) string {
	return string(StorageKey(nil, p, subject, limiter.Tag{}))
}

func mustPolicy(t testing.TB, spec limiter.PolicySpec) *limiter.Policy {
	t.Helper()
	p, err := limiter.NewPolicy(spec)
	if err != nil {
		t.Fatalf("NewPolicy(%+v): %v", spec, err)
	}
	return p
}

func fixed(t testing.TB, id string, limit int64, window time.Duration) *limiter.Policy {
	return mustPolicy(t, limiter.PolicySpec{ID: id, Algorithm: limiter.FixedWindow,
		Params: limiter.FixedWindowParams{Limit: limit, Window: window}})
}

func sliding(t testing.TB, id string, limit int64, window time.Duration) *limiter.Policy {
	return mustPolicy(t, limiter.PolicySpec{ID: id, Algorithm: limiter.SlidingWindow,
		Params: limiter.SlidingWindowParams{Limit: limit, Window: window}})
}

func bucket(t testing.TB, id string, capacity, amount int64, period time.Duration) *limiter.Policy {
	return mustPolicy(t, limiter.PolicySpec{ID: id, Algorithm: limiter.TokenBucket,
		Params: limiter.TokenBucketParams{Capacity: capacity, RefillAmount: amount, RefillPeriod: period}})
}
