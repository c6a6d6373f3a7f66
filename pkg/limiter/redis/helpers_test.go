package redis

import (
	"context"
	"crypto/sha256"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/algorithm"
	"github.com/envoy-rls/envoy-rls/pkg/lua"
	"github.com/redis/rueidis"
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
	return newEnvWith(t, Config{}, opts...)
}

// newEnvWith is newEnv with a store of cfg on the server (its Addrs set to
// the server's).
func newEnvWith(t testing.TB, cfg Config, opts ...redistest.Option) *env {
	t.Helper()
	srv := redistest.Standalone(t, opts...)
	cfg.Addrs = []string{srv.Addr()}
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

// newFails calls New on cfg, which must fail within five seconds, and
// returns its error; a Store it does build is closed and fails t with msg.
func newFails(t testing.TB, cfg Config, msg string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := New(ctx, cfg)
	if err == nil {
		s.Close()
		t.Fatal(msg)
	}
	return err
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

// seed writes st as the program's state (redistest.AppendState) with a TTL.
func (e *env) seed(key string, st algorithm.State) {
	e.t.Helper()
	e.do("DEL", key)
	e.do("SET", key, string(redistest.AppendState(nil, st)), "PX", "600000")
}

// hash returns the key's state as the tests read it: its fields by the
// names of rate-batch-v1.lua's hash (stateHash), decoded from the string
// rate-batch-v2.lua keeps (redistest.ParseState); nil when there is none, and
// {"undecodable": value} for a value no algorithm reads.
func (e *env) hash(key string) map[string]string {
	e.t.Helper()
	return stateView(e.do("GET", key))
}

// stateView is the tests' view (see hash) of a GET reply: nil for none.
func stateView(reply any) map[string]string {
	v, ok := reply.(string)
	if !ok {
		return nil
	}
	if len(v) == 0 || v[0]&^redistest.StatePenalty < 1 || int(v[0]&^redistest.StatePenalty) > len(limiter.Algorithms()) {
		return map[string]string{"undecodable": v}
	}
	st, ok := redistest.ParseState([]byte(v), decodePolicy(limiter.Algorithm(v[0]&^redistest.StatePenalty)))
	if !ok {
		return map[string]string{"undecodable": v}
	}
	return stateHash(st)
}

// decodePolicy is a policy of alg, to decode a state of alg with
// (redistest.ParseState reads only its algorithm).
func decodePolicy(alg limiter.Algorithm) *limiter.Policy {
	spec := limiter.PolicySpec{ID: "decode", Algorithm: alg}
	switch alg {
	case limiter.FixedWindow:
		spec.Params = limiter.FixedWindowParams{Limit: 1, Window: time.Second}
	case limiter.SlidingWindow:
		spec.Params = limiter.SlidingWindowParams{Limit: 1, Window: time.Second}
	case limiter.TokenBucket:
		spec.Params = limiter.TokenBucketParams{Capacity: 1, RefillAmount: 1, RefillPeriod: time.Second}
	case limiter.GCRA:
		spec.Params = limiter.GCRAParams{Burst: 1, Limit: 1, Period: time.Second}
	case limiter.SlidingLog:
		spec.Params = limiter.SlidingLogParams{Limit: 1, Window: time.Second}
	}
	p, err := limiter.NewPolicy(spec)
	if err != nil {
		panic(err)
	}
	return p
}

// dump is the key's serialized value (DUMP), to tell whether it changed.
func (e *env) dump(key string) any {
	e.t.Helper()
	return e.do("DUMP", key)
}

func (e *env) pttl(key string) int64 {
	e.t.Helper()
	return e.do("PTTL", key).(int64)
}

// run evaluates one request of cost on key with rate-batch-v2.lua, the
// program the store sends, as the only key of the batch, and returns the
// key's parsed reply. The batch commits exactly when the key is ALLOWED.
func (e *env) run(p *limiter.Policy, key string, cost int64) algorithm.Reply {
	e.t.Helper()
	return e.runAmong(p, key, cost, 0, 1)
}

// runAmong is run with key at index pos of a batch of n keys: the others
// are check-role keys of the same policy on subjects of their own (fresh
// states), which never block the commit and never write, so key's reply,
// state and TTL are what they would be alone.
func (e *env) runAmong(p *limiter.Policy, key string, cost int64, pos, n int) algorithm.Reply {
	e.t.Helper()
	keys := make([]string, n)
	pols := make([]*limiter.Policy, n)
	var args []string
	for i := range n {
		pols[i] = p
		if i == pos {
			keys[i] = key
			args = batchArgs(args, p, cost, limiter.RoleOrdinary)
			continue
		}
		keys[i] = keyOf(p, subjectOf("companion "+strconv.Itoa(i)))
		e.do("DEL", keys[i])
		args = batchArgs(args, p, 1, limiter.RoleCheck)
	}
	committed, replies := e.runBatchKeys(keys, args, pols)
	r := replies[pos]
	if committed != (r.Status == algorithm.StatusAllowed) {
		e.t.Fatalf("run %s: committed %v with %s", p.ID(), committed, r.Status)
	}
	for i := range keys {
		if i != pos && e.do("EXISTS", keys[i]) != int64(0) {
			e.t.Fatalf("run %s: the check key at %d wrote state", p.ID(), i)
		}
	}
	return r
}

// refund runs the refund program on key: cost given back to the state p
// took it from at time at; it returns the program's reply (1 given back,
// 0 nothing to give back).
func (e *env) refund(p *limiter.Policy, key string, cost, at int64) int64 {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	args := []string{string(lua.AppendRefundPacked(nil, p, cost, at)), string(lua.AppendRefundTime(nil, at))}
	msgs, err := refundScript.Exec(ctx, e.store.client, []string{key}, args).ToArray()
	if err != nil || len(msgs) != 1 {
		e.t.Fatalf("refund: %v %v", msgs, err)
	}
	n, _ := msgs[0].ToInt64()
	return n
}

// batchArgs appends the ARGV field of one key of rate-batch-v2.lua to dst:
// its packed numbers (lua.AppendBatchPacked).
func batchArgs(dst []string, p *limiter.Policy, cost int64, role limiter.Role) []string {
	return append(dst, string(lua.AppendBatchPacked(nil, p, cost, role, time.Now().UnixMilli())))
}

// batchArgsAt is batchArgs with a calendar window's periods around nowMs.
func batchArgsAt(dst []string, p *limiter.Policy, cost int64, role limiter.Role, nowMs int64) []string {
	return append(dst, string(lua.AppendBatchPacked(nil, p, cost, role, nowMs)))
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

// mustDecide evaluates one request of p for subject and fails the test unless
// the store decided it: the connection is up and the program loaded before
// a test stops or breaks the server.
func (e *env) mustDecide(p *limiter.Policy, subject limiter.SubjectDigest) {
	e.t.Helper()
	if o := e.evaluate(p, subject, 1); o.Kind != limiter.Evaluated {
		e.t.Fatalf("warm-up: %+v", o)
	}
}

// hashFields returns the a, b and c fields of the tests' view of a state
// (the names of rate-batch-v1.lua's hash): the window id, the count and the
// previous count for the windows; the tokens, the refill time and the
// remainder for the token bucket; 0, the TAT's whole ms and its fraction
// for GCRA; the window id and the units of the log in it and in the window
// before for the sliding log (whose log is the field l).
func hashFields(st algorithm.State) (a, b, c int64) {
	if st.Algorithm == limiter.TokenBucket || st.Algorithm == limiter.GCRA {
		return st.Level, st.Epoch, st.Carry
	}
	return st.Epoch, st.Level, st.Carry
}

// stateHash is the tests' view of st (see hash): what a state holds, its
// schema, policy and revision told by its key.
func stateHash(st algorithm.State) map[string]string {
	a, b, c := hashFields(st)
	h := map[string]string{
		"alg": st.Algorithm.String(), "last": strconv.FormatInt(st.LastObservedMs, 10),
		"a": strconv.FormatInt(a, 10), "b": strconv.FormatInt(b, 10), "c": strconv.FormatInt(c, 10),
	}
	if st.PenaltyLevel > 0 {
		// The penalty box (docs/algorithms.md): pu, pn.
		h["pu"], h["pn"] = strconv.FormatInt(st.PenaltyUntilMs, 10), strconv.FormatInt(st.PenaltyLevel, 10)
	}
	if st.Log != "" {
		h["l"] = st.Log
	}
	return h
}

// recordOffence is the penalty rule of rate-batch-v2.lua in the models: a
// request denied with an offence (algorithm.PenaltyRecorded) writes its block
// whatever the batch decides when its key's role records offences (not a
// check or probe) and its hash
// existed before the program (stored); a later key naming the hash sees
// the block (cur), and the hash keeps it (offences, laid over the final
// states by withOffences). Otherwise the reply is the limit's own denial.
// It returns the reply to give.
func recordOffence(cur, offences map[string]algorithm.State, stored bool, k string, r batchReq, next algorithm.State, reply, uncommitted algorithm.Reply) algorithm.Reply {
	if !algorithm.PenaltyRecorded(cur[k], next) {
		return reply
	}
	if !r.role.RecordsOffence() || !stored {
		return uncommitted
	}
	cur[k] = next
	offences[k] = next
	return reply
}

// withOffences lays the blocks recorded in offences over final.
func withOffences(final, offences map[string]algorithm.State) map[string]algorithm.State {
	for k, o := range offences {
		f := final[k]
		f.PenaltyUntilMs, f.PenaltyLevel = o.PenaltyUntilMs, o.PenaltyLevel
		final[k] = f
	}
	return final
}

func subjectOf(s string) limiter.SubjectDigest { return sha256.Sum256([]byte(s)) }

func keyOf(p *limiter.Policy, subject limiter.SubjectDigest) string {
	return string(StorageKey(nil, p, subject, limiter.Tag{}))
}

func fixed(t testing.TB, id string, limit int64, window time.Duration) *limiter.Policy {
	return limitertest.Policy(t, limiter.PolicySpec{ID: id, Algorithm: limiter.FixedWindow,
		Params: limiter.FixedWindowParams{Limit: limit, Window: window}})
}

func sliding(t testing.TB, id string, limit int64, window time.Duration) *limiter.Policy {
	return limitertest.Policy(t, limiter.PolicySpec{ID: id, Algorithm: limiter.SlidingWindow,
		Params: limiter.SlidingWindowParams{Limit: limit, Window: window}})
}

// slidingLog is a sliding-log policy.
func slidingLog(t testing.TB, id string, limit int64, window time.Duration) *limiter.Policy {
	return limitertest.Policy(t, limiter.PolicySpec{ID: id, Algorithm: limiter.SlidingLog,
		Params: limiter.SlidingLogParams{Limit: limit, Window: window}})
}

// cellRate is a GCRA policy: limit per period, a burst of burst.
func cellRate(t testing.TB, id string, burst, limit int64, period time.Duration) *limiter.Policy {
	return limitertest.Policy(t, limiter.PolicySpec{ID: id, Algorithm: limiter.GCRA,
		Params: limiter.GCRAParams{Burst: burst, Limit: limit, Period: period}})
}

func bucket(t testing.TB, id string, capacity, amount int64, period time.Duration) *limiter.Policy {
	return limitertest.Policy(t, limiter.PolicySpec{ID: id, Algorithm: limiter.TokenBucket,
		Params: limiter.TokenBucketParams{Capacity: capacity, RefillAmount: amount, RefillPeriod: period}})
}

// wantError checks err against want, a text the error must mention ("" when
// no error is wanted), and reports whether an error was wanted: the caller
// then has nothing more to check.
func wantError(t testing.TB, err error, want string) bool {
	t.Helper()
	if want == "" {
		return false
	}
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %v, want one mentioning %q", err, want)
	}
	return true
}

// seededRand is a generator on stream seeded from the clock, and how many
// runs a randomised test makes: full, or short under -short. It logs the
// seed and the count (named what) so that a failing run can be replayed.
func seededRand(t testing.TB, stream uint64, full, short int, what string) (*rand.Rand, int) {
	t.Helper()
	n := full
	if testing.Short() {
		n = short
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("random seed %d, %d %s", seed, n, what)
	return rand.New(rand.NewPCG(seed, stream)), n
}

// oneCall appends to args (one request's ARGV fields for n keys) the group
// field of rate-batch-v2.lua for that request alone, with deadline dl (0:
// none).
func oneCall(args []string, n int, dl int64) []string {
	return append(append([]string{}, args...), string(lua.AppendGroupEntry(nil, n, dl)))
}

// execOne runs rate-batch-v2.lua for one request and returns its reply
// (the group's only element).
func (e *env) execOne(ctx context.Context, keys, args []string, dl int64) ([]rueidis.RedisMessage, error) {
	msgs, err := e.store.execBatch(ctx, keys, oneCall(args, len(keys), dl)).ToArray()
	if err != nil {
		return nil, err
	}
	if len(msgs) != 1 {
		e.t.Fatalf("rate-batch-v2: %d replies for one request", len(msgs))
	}
	return msgs[0].ToArray()
}
