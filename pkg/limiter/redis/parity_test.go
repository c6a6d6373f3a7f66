package redis

import (
	"context"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/lua"
)

// The parity suite runs rate-batch-v1.lua, the program the store sends, on
// a real Redis, with one key and among several, and checks every reply
// field and the resulting hash and TTL against limiter.Apply (the Go
// rules the memory store uses) given the same state and the same server time
// (the reply's serverNowMillis). Time-dependent cases are driven by writing
// state relative to the server's TIME, never by setting a clock.

// checkParity seeds st (or deletes the key when !st.Exists), runs the batch
// program with key alone and compares with Apply. It returns the reply.
func checkParity(t *testing.T, e *env, p *limiter.Policy, key string, st limiter.State, cost int64) limiter.Reply {
	t.Helper()
	return checkParityAmong(t, e, p, key, st, cost, 0, 1)
}

// checkParityAmong is checkParity with key at index pos of a batch of n
// keys (env.runAmong).
func checkParityAmong(t *testing.T, e *env, p *limiter.Policy, key string, st limiter.State, cost int64, pos, n int) limiter.Reply {
	t.Helper()
	if st.Exists {
		e.seed(key, st)
	} else {
		e.do("DEL", key)
	}
	before := e.dump(key)
	// start comes before the PTTL read, so the slack below covers all the
	// real time between that read and the one after the program.
	start := time.Now()
	beforeTTL := e.pttl(key)
	got := e.runAmong(p, key, cost, pos, n)
	next, want, write := limiter.Apply(st, got.ServerNowMs, p, cost)
	if got != want {
		t.Fatalf("%s cost %d state %+v:\n lua  %+v\n go   %+v", p.ID(), cost, st, got, want)
	}
	if !write {
		if after := e.dump(key); !reflect.DeepEqual(after, before) {
			t.Fatalf("%s: %s wrote state: DUMP changed", p.ID(), got.Status)
		}
		if ttl := e.pttl(key); ttl > beforeTTL {
			t.Fatalf("%s: %s extended the TTL from %d to %d", p.ID(), got.Status, beforeTTL, ttl)
		}
		return got
	}
	if h, w := e.hash(key), stateHash(next); !reflect.DeepEqual(h, w) {
		t.Fatalf("%s cost %d state %+v:\n hash %v\n want %v", p.ID(), cost, st, h, w)
	}
	// PEXPIRE counts from Redis's cached command time, which can differ
	// from TIME's millisecond floor by 1 ms; then real time passes.
	pt := e.pttl(key)
	slack := time.Since(start).Milliseconds() + 2
	if st.Exists && (p.Algorithm() == limiter.FixedWindow || p.Algorithm() == limiter.SlidingWindow) && next.Epoch == st.Epoch {
		// A window the hash was already written in keeps the expiry that
		// write set (the same instant): no PEXPIRE.
		if pt > beforeTTL || pt < beforeTTL-slack {
			t.Fatalf("%s: a write in the stored window changed PTTL %d to %d", p.ID(), beforeTTL, pt)
		}
		return got
	}
	// The key expires at next.ExpiresAtMs on the effective clock, counted
	// from Redis's (serverNow).
	ttl := next.ExpiresAtMs - got.ServerNowMs
	if pt > ttl+1 || pt < ttl-slack {
		t.Fatalf("%s: PTTL %d, want within [%d, %d]", p.ID(), pt, ttl-slack, ttl+1)
	}
	return got
}

// stateOf is the state of p whose hash fields are a, b and c (see hashFields).
func stateOf(p *limiter.Policy, last, a, b, c int64) limiter.State {
	st := limiter.State{Exists: true, Schema: limiter.StateSchema, Algorithm: p.Algorithm(), PolicyID: p.ID(),
		Revision: p.Revision(), LastObservedMs: last, Epoch: a, Level: b, Carry: c}
	if p.Algorithm() == limiter.TokenBucket || p.Algorithm() == limiter.GCRA {
		st.Epoch, st.Level = b, a
	}
	return st
}

// randomState is a random stored state of p, observed up to 5 s before or
// 4 s after now (some beyond the 2 s clock regression), with windows and
// counts on both sides of the limit, and now and then a foreign revision
// (STATE_INCOMPATIBLE).
func randomState(rng *rand.Rand, p *limiter.Policy, now int64) limiter.State {
	limit := p.Limit()
	last := now + rng.Int64N(9000) - 5000
	w := last / p.WindowMillis()
	var st limiter.State
	switch p.Algorithm() {
	case limiter.FixedWindow:
		if c := p.Calendar(); c != nil {
			// The period before last's, last's or the one after.
			b := c.Neighbours(last)
			st = stateOf(p, last, b[rng.IntN(3)], rng.Int64N(limit+4), 0)
			break
		}
		st = stateOf(p, last, w+rng.Int64N(3)-1, rng.Int64N(limit+4), 0)
	case limiter.SlidingWindow:
		st = stateOf(p, last, w-rng.Int64N(3), rng.Int64N(limit+3), rng.Int64N(limit+3))
	case limiter.TokenBucket:
		_, period := p.Refill()
		st = stateOf(p, last, rng.Int64N(limit+3), last-rng.Int64N(10_000), rng.Int64N(period+1))
	case limiter.GCRA:
		// A TAT behind, within or (one in ten: a lowered burst) far beyond
		// the tolerance; a fraction now and then of another rate.
		amount, period := p.Refill()
		tat := last - 5000 + rng.Int64N(limit*period/amount+10_000)
		if rng.IntN(10) == 0 {
			tat = last + 1_000_000_000
		}
		st = stateOf(p, last, 0, tat, rng.Int64N(amount+2))
	}
	if rng.IntN(20) == 0 {
		st.Revision = 2
	}
	return st
}

func TestProgramsAgainstApply(t *testing.T) {
	e := newEnv(t)
	fw := fixed(t, "fw", 5, time.Hour)
	sw := sliding(t, "sw", 10, time.Minute)
	tb := bucket(t, "tb", 10, 1, time.Second)
	gc := cellRate(t, "gc", 10, 3, time.Second)
	for _, p := range []*limiter.Policy{fw, sw, tb, gc} {
		key := keyOf(p, subjectOf("all-programs"))
		e.do("DEL", key)
		var st limiter.State
		for i := 0; i < int(p.Limit())+2; i++ {
			// Chain: each step's expected state is what Apply wrote.
			got := e.run(p, key, 1)
			next, want, write := limiter.Apply(st, got.ServerNowMs, p, 1)
			if got != want {
				t.Fatalf("%s step %d: lua %+v, go %+v", p.ID(), i, got, want)
			}
			if write {
				st = next
				if h := e.hash(key); !reflect.DeepEqual(h, stateHash(next)) {
					t.Fatalf("%s step %d: hash %v, want %v", p.ID(), i, h, stateHash(next))
				}
			}
		}
	}
}

func TestExactBoundaryAfterDeniedRequest(t *testing.T) {
	e := newEnv(t)
	for _, p := range []*limiter.Policy{fixed(t, "b.fw", 5, time.Hour), sliding(t, "b.sw", 5, time.Hour), bucket(t, "b.tb", 5, 1, time.Hour), cellRate(t, "b.gc", 5, 1, time.Hour)} {
		key := keyOf(p, subjectOf("boundary"))
		e.do("DEL", key)
		steps := []struct {
			cost      int64
			status    limiter.Status
			remaining int64
		}{
			{3, limiter.StatusAllowed, 2},
			{3, limiter.StatusDenied, 2},  // would cross the limit: denied, consumes nothing
			{2, limiter.StatusAllowed, 0}, // exactly the rest still fits
			{1, limiter.StatusDenied, 0},
		}
		for i, s := range steps {
			before := e.dump(key)
			r := e.run(p, key, s.cost)
			if r.Status != s.status || r.Remaining != s.remaining {
				t.Fatalf("%s step %d: cost %d: %s remaining %d, want %s remaining %d", p.ID(), i, s.cost, r.Status, r.Remaining, s.status, s.remaining)
			}
			if r.Status == limiter.StatusDenied {
				if r.RetryAfterMs < 1 {
					t.Fatalf("%s step %d: denied with retryAfter %d", p.ID(), i, r.RetryAfterMs)
				}
				if after := e.dump(key); !reflect.DeepEqual(after, before) {
					t.Fatalf("%s step %d: a denial changed the state", p.ID(), i)
				}
			}
		}
	}
}

// TestClockRegression: with the key alone and as the second of three keys.
func TestClockRegression(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct{ pos, n int }{{0, 1}, {1, 3}} {
		for _, p := range []*limiter.Policy{fixed(t, "c.fw", 5, time.Hour), sliding(t, "c.sw", 5, time.Hour), bucket(t, "c.tb", 5, 1, time.Second), cellRate(t, "c.gc", 5, 3, time.Second)} {
			clockRegression(t, e, p, c.pos, c.n)
		}
	}
}

func clockRegression(t *testing.T, e *env, p *limiter.Policy, pos, n int) {
	t.Helper()
	key := keyOf(p, subjectOf("clock"))
	now := e.serverNow()
	w := now / p.WindowMillis()
	// Excessive: the stored last-observed time is 10s ahead of the
	// server (max regression 2s): CLOCK_UNSAFE, byte-for-byte unchanged.
	last := now + 10_000
	st := stateOf(p, last, w, 1, 0)
	switch p.Algorithm() {
	case limiter.TokenBucket:
		st = stateOf(p, last, 2, last, 0)
	case limiter.GCRA:
		st = stateOf(p, last, 0, last+400, 1) // TAT ahead: 1 of 5 left
	}
	// checkParity compares DUMP before and after and checks the TTL was
	// not extended.
	r := checkParityAmong(t, e, p, key, st, 1, pos, n)
	if r.Status != limiter.StatusClockUnsafe {
		t.Fatalf("%s: %s, want CLOCK_UNSAFE", p.ID(), r.Status)
	}
	before := e.dump(key)
	if o := e.evaluate(p, subjectOf("clock"), 1); o.Kind != limiter.Unavailable || o.Category != limiter.CategoryClockUnsafe {
		t.Fatalf("%s: store outcome %v/%s, want unavailable/clock_unsafe", p.ID(), o.Kind, o.Category)
	}
	if after := e.dump(key); !reflect.DeepEqual(after, before) {
		t.Fatalf("%s: CLOCK_UNSAFE through the store changed the state", p.ID())
	}
	// Small: 1s ahead is clamped: effective now is the stored time.
	last = e.serverNow() + 1_000
	st.LastObservedMs = last
	switch p.Algorithm() {
	case limiter.TokenBucket:
		st.Epoch = last
	case limiter.GCRA:
		st.Epoch = last + 400
	}
	r = checkParityAmong(t, e, p, key, st, 1, pos, n)
	if r.Status != limiter.StatusAllowed || r.EffectiveNowMs != last {
		t.Fatalf("%s: clamped step: %+v, want ALLOWED at %d", p.ID(), r, last)
	}
}

func TestTokenRefillRemainderCarry(t *testing.T) {
	e := newEnv(t)
	// 1 token every 3 ms: a bucket observed every millisecond gains a token
	// every third observation only because the remainder is carried.
	p := bucket(t, "carry", 1000, 1, 3*time.Millisecond)
	key := keyOf(p, subjectOf("carry"))
	now := e.serverNow()
	// Empty bucket, two thirds of a token carried, last refill 1 ms ago
	// (or more, by the time the program runs).
	st := stateOf(p, now-1, 0, now-1, 2)
	r := checkParity(t, e, p, key, st, 1)
	if r.Status != limiter.StatusAllowed {
		t.Fatalf("carried remainder did not complete a token: %+v", r)
	}
	// Chain 50 evaluations, each seeded with the previous hash and a last
	// refill 1 ms (plus however long the call takes) before the server time:
	// the tokens gained must equal one refill over the summed elapsed time,
	// floor((E + rem0) / 3), which only holds if every remainder is carried.
	const start, rem0, steps = int64(500), int64(1), 50
	tokens, rem, elapsed := start, rem0, int64(0)
	for i := 0; i < steps; i++ {
		now := e.serverNow()
		st := stateOf(p, now-1, tokens, now-1, rem)
		r := checkParity(t, e, p, key, st, 1)
		if r.Status != limiter.StatusAllowed {
			t.Fatalf("step %d: %+v", i, r)
		}
		elapsed += r.EffectiveNowMs - (now - 1)
		h := e.hash(key)
		tokens, _ = strconv.ParseInt(h["a"], 10, 64)
		rem, _ = strconv.ParseInt(h["c"], 10, 64)
		if rem < 0 || rem >= 3 {
			t.Fatalf("step %d: stored remainder %d outside [0, 3)", i, rem)
		}
	}
	if want := start - steps + (elapsed+rem0)/3; tokens != want || rem != (elapsed+rem0)%3 {
		t.Fatalf("after %d steps over %d ms: %d tokens rem %d, want %d rem %d", steps, elapsed, tokens, rem, want, (elapsed+rem0)%3)
	}
}

func TestMalformedStateIsIncompatible(t *testing.T) {
	e := newEnv(t)
	p := fixed(t, "m.fw", 5, time.Hour)
	sub := subjectOf("malformed")
	key := keyOf(p, sub)
	okSub := subjectOf("malformed, valid")
	okKey := keyOf(p, okSub)
	good := map[string]string{"schema": "1", "alg": "fixed_window", "policy": "m.fw", "rev": "1", "last": "1000", "a": "1", "b": "1", "c": "0"}
	with := func(k, v string) map[string]string {
		m := make(map[string]string, len(good))
		for a, b := range good {
			m[a] = b
		}
		if v == "" {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	cases := map[string]func(){
		"schema 2":         func() { e.seedRaw(key, with("schema", "2")) },
		"other algorithm":  func() { e.seedRaw(key, with("alg", "token_bucket")) },
		"other policy":     func() { e.seedRaw(key, with("policy", "other")) },
		"other revision":   func() { e.seedRaw(key, with("rev", "2")) },
		"missing c":        func() { e.seedRaw(key, with("c", "")) },
		"missing last":     func() { e.seedRaw(key, with("last", "")) },
		"non-integer":      func() { e.seedRaw(key, with("b", "x")) },
		"float":            func() { e.seedRaw(key, with("b", "1.5")) },
		"negative":         func() { e.seedRaw(key, with("b", "-1")) },
		"leading zero":     func() { e.seedRaw(key, with("a", "01")) },
		"above 2^53":       func() { e.seedRaw(key, with("b", "9007199254740993")) },
		"foreign hash":     func() { e.seedRaw(key, map[string]string{"count": "3"}) },
		"string key":       func() { e.do("DEL", key); e.do("SET", key, "3", "PX", "60000") },
		"list key":         func() { e.do("DEL", key); e.do("RPUSH", key, "3"); e.do("PEXPIRE", key, "60000") },
		"sliding overflow": nil, // below, on a sliding policy
	}
	for name, seed := range cases {
		if seed == nil {
			continue
		}
		seed()
		before := e.dump(key)
		o := e.evaluate(p, sub, 1)
		if o.Kind != limiter.Incompatible || o.Category != limiter.CategoryStateIncompatible {
			t.Errorf("%s: outcome %v/%s (%v), want incompatible/state_incompatible", name, o.Kind, o.Category, o.Err)
		}
		if after := e.dump(key); !reflect.DeepEqual(after, before) {
			t.Errorf("%s: state changed", name)
		}
		// After a valid key of a fresh hash, in one batch: the same
		// outcome, and the batch does not commit (the other key stays
		// unwritten).
		e.do("DEL", okKey)
		out := make([]limiter.Outcome, 2)
		e.store.Evaluate(context.Background(), []limiter.Request{{Policy: p, Subject: okSub, Cost: 1}, {Policy: p, Subject: sub, Cost: 1}}, out)
		if o := out[1]; o.Kind != limiter.Incompatible || o.Category != limiter.CategoryStateIncompatible {
			t.Errorf("%s, second of two: outcome %v/%s (%v), want incompatible/state_incompatible", name, o.Kind, o.Category, o.Err)
		}
		if after := e.dump(key); !reflect.DeepEqual(after, before) {
			t.Errorf("%s, second of two: state changed", name)
		}
		if e.do("EXISTS", okKey) != int64(0) {
			t.Errorf("%s, second of two: the batch committed", name)
		}
	}
	sp := sliding(t, "m.sw", 5, time.Hour)
	skey := keyOf(sp, sub)
	now := e.serverNow()
	e.seed(skey, stateOf(sp, now, now/sp.WindowMillis(), limiter.MaxSafeInteger/limiter.SlidingScale+1, 0))
	if o := e.evaluate(sp, sub, 1); o.Kind != limiter.Incompatible {
		t.Errorf("sliding count above any limit: outcome %v, want incompatible", o.Kind)
	}
}

func (e *env) seedRaw(key string, m map[string]string) {
	e.t.Helper()
	e.do("DEL", key)
	args := []string{"HSET", key}
	for k, v := range m {
		args = append(args, k, v)
	}
	e.do(args...)
	e.do("PEXPIRE", key, "600000")
}

// batchFields are the fields of one key of rate-batch-v1.lua, as
// lua.AppendBatchArgs packs them, so that a test can put any value in any
// field.
type batchFields struct {
	policy                                         string
	alg, flags                                     byte
	rev, limit, p2, p3, grace, maxRegression, cost float64
}

func (f batchFields) args() []string {
	b := []byte{f.alg, f.flags}
	for _, v := range []float64{f.rev, f.limit, f.p2, f.p3, f.grace, f.maxRegression, f.cost} {
		b = binary.BigEndian.AppendUint64(b, math.Float64bits(v))
	}
	return []string{f.policy, string(b)}
}

// TestInvalidArguments: every field of a key out of its range makes that
// key INVALID (limit 0), blocks the batch and writes nothing, alone or with
// a valid key.
func TestInvalidArguments(t *testing.T) {
	e := newEnv(t)
	p := fixed(t, "inv", 5, time.Hour)
	key := keyOf(p, subjectOf("invalid"))
	other := keyOf(p, subjectOf("invalid, valid"))
	good := batchFields{policy: "inv", alg: byte(limiter.FixedWindow), rev: 1, limit: 5, p2: float64(time.Hour.Milliseconds()),
		grace: float64(p.CleanupGraceMillis()), maxRegression: float64(p.MaxClockRegressionMillis()), cost: 1}
	if got, want := good.args(), lua.AppendBatchArgs(nil, p, 1, limiter.RoleOrdinary); !reflect.DeepEqual(got, want) {
		t.Fatalf("the test's encoding %q, the store's %q", got, want)
	}
	with := func(f func(*batchFields)) []string {
		b := good
		f(&b)
		return b.args()
	}
	bad := map[string][]string{
		"cost 0":                  with(func(b *batchFields) { b.cost = 0 }),
		"cost above limit":        with(func(b *batchFields) { b.cost = 6 }),
		"float cost":              with(func(b *batchFields) { b.cost = 1.5 }),
		"negative limit":          with(func(b *batchFields) { b.limit = -5 }),
		"limit 2^53":              with(func(b *batchFields) { b.limit = 1 << 53 }),
		"float window":            with(func(b *batchFields) { b.p2 = 1.5 }),
		"window 0":                with(func(b *batchFields) { b.p2 = 0 }),
		"window above ten years":  with(func(b *batchFields) { b.p2 = 1 << 40 }),
		"fixed window period":     with(func(b *batchFields) { b.p3 = 1 }),
		"policy charset":          with(func(b *batchFields) { b.policy = "Policy!" }),
		"policy empty":            with(func(b *batchFields) { b.policy = "" }),
		"policy of 129":           with(func(b *batchFields) { b.policy = strings.Repeat("p", 129) }),
		"revision 0":              with(func(b *batchFields) { b.rev = 0 }),
		"revision 2^32":           with(func(b *batchFields) { b.rev = 1 << 32 }),
		"negative grace":          with(func(b *batchFields) { b.grace = -1 }),
		"NaN max regression":      with(func(b *batchFields) { b.maxRegression = math.NaN() }),
		"infinite max regression": with(func(b *batchFields) { b.maxRegression = math.Inf(1) }),
		"algorithm 0":             with(func(b *batchFields) { b.alg = 0 }),
		"algorithm 4":             with(func(b *batchFields) { b.alg = 4 }),
		"flags 8":                 with(func(b *batchFields) { b.flags = 8 }),
	}
	valid := lua.AppendBatchArgs(nil, p, 1, limiter.RoleOrdinary)
	for name, args := range bad {
		for _, c := range []struct {
			keys []string
			args []string
			pos  int
		}{
			{[]string{key}, args, 0},
			{[]string{other, key}, append(append([]string{}, valid...), args...), 1},
		} {
			e.do("DEL", key, other)
			pols := make([]*limiter.Policy, len(c.keys))
			for i := range pols {
				pols[i] = p
			}
			committed, r := e.runBatchKeys(c.keys, c.args, pols)
			if committed || r[c.pos].Status != limiter.StatusInvalid || r[c.pos].Limit != 0 {
				t.Errorf("%s (%d keys): committed %v, reply %+v, want INVALID", name, len(c.keys), committed, r[c.pos])
			}
			if e.do("EXISTS", key, other) != int64(0) {
				t.Errorf("%s (%d keys): a batch with an INVALID key wrote state", name, len(c.keys))
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := batchScript.Exec(ctx, e.store.client, nil, nil).Error(); err == nil {
		t.Error("rate-batch-v1 without keys or arguments replied")
	}
}

func TestScriptFlushMidRun(t *testing.T) {
	e := newEnv(t)
	p := fixed(t, "flush", 1000, time.Hour)
	sub := subjectOf("flush")
	for i := 0; i < 30; i++ {
		if i%5 == 0 {
			e.do("SCRIPT", "FLUSH")
		}
		o := e.evaluate(p, sub, 1)
		if o.Kind != limiter.Evaluated || !o.Decision.Allowed || o.Decision.Remaining != int64(1000-i-1) {
			t.Fatalf("step %d after SCRIPT FLUSH: %+v", i, o)
		}
	}
}

// TestRandomDifferential runs many random (policy, state, cost) triples,
// including clamped and unsafe clocks, lowered limits, foreign revisions and
// stale windows, through the batch program and Apply.
func TestRandomDifferential(t *testing.T) {
	e := newEnv(t)
	rng, n := seededRand(t, 5, 400, 100, "iterations (a failure prints the state, policy and cost)")
	windows := []time.Duration{time.Millisecond, 7 * time.Millisecond, 100 * time.Millisecond, time.Second, time.Minute, time.Hour}
	periods := []time.Duration{time.Millisecond, 3 * time.Millisecond, 7 * time.Millisecond, 100 * time.Millisecond, time.Second}
	for i := 0; i < n; i++ {
		var p *limiter.Policy
		limit := 1 + rng.Int64N(20)
		switch i % 4 {
		case 3:
			p = calendarRandom(t, rng, "r.cal", limit)
		case 0:
			p = fixed(t, "r.fw", limit, windows[rng.IntN(len(windows))])
		case 1:
			p = sliding(t, "r.sw", limit, windows[rng.IntN(len(windows))])
		case 2:
			p = bucket(t, "r.tb", limit, 1+rng.Int64N(5), periods[rng.IntN(len(periods))])
		}
		key := keyOf(p, subjectOf("random"+strconv.Itoa(i%7)))
		now := e.serverNow()
		var st limiter.State
		if rng.IntN(5) > 0 {
			st = randomState(rng, p, now)
		}
		// Alone, or at a random place among up to three other keys.
		n := 1 + rng.IntN(4)
		checkParityAmong(t, e, p, key, st, 1+rng.Int64N(p.MaxCost()), rng.IntN(n), n)
	}
}

func TestPrivacyAndTTL(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	raw := []string{"203.0.113.7", "user-alice", "api-key-s3cr3t"}
	pols := []*limiter.Policy{fixed(t, "priv.fw", 3, time.Minute), sliding(t, "priv.sw", 3, time.Minute), bucket(t, "priv.tb", 3, 1, time.Second)}
	for _, p := range pols {
		for _, v := range raw {
			// The descriptor value becomes a digest before any store sees it;
			// here a plain hash stands in for the HMAC of pkg/descriptors.
			out := make([]limiter.Outcome, 2)
			e.store.Evaluate(ctx, []limiter.Request{{Policy: p, Subject: subjectOf(v), Cost: 1}, {Policy: p, Subject: subjectOf(v), Cost: 2}}, out)
		}
	}
	assertPrivateKeys(t, e.srv.Addr(), raw)
}
