package redis

import (
	"context"
	"math/rand/v2"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/lua"
)

// The parity suite runs the Lua programs on a real Redis and checks every
// reply field and the resulting hash and TTL against limiter.Apply (the Go
// rules the memory store uses) given the same state and the same server time
// (the reply's serverNowMillis). Time-dependent cases are driven by writing
// state relative to the server's TIME, never by setting a clock.

// checkParity seeds st (or deletes the key when !st.Exists), runs the program
// and compares with Apply. It returns the reply.
func checkParity(t *testing.T, e *env, p *limiter.Policy, key string, st limiter.State, cost int64) limiter.Reply {
	t.Helper()
	if st.Exists {
		e.seed(key, st)
	} else {
		e.do("DEL", key)
	}
	before := e.dump(key)
	beforeTTL := e.pttl(key)
	start := time.Now()
	got := e.run(p, key, cost)
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
	if st.Exists && p.Algorithm() != limiter.TokenBucket && next.A == st.A {
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

func stateOf(p *limiter.Policy, last, a, b, c int64) limiter.State {
	return limiter.State{Exists: true, Schema: limiter.StateSchema, Algorithm: p.Algorithm(), PolicyID: p.ID(),
		Revision: p.Revision(), LastObservedMs: last, A: a, B: b, C: c}
}

func TestProgramsAgainstApply(t *testing.T) {
	e := newEnv(t)
	fw := fixed(t, "fw", 5, time.Hour)
	sw := sliding(t, "sw", 10, time.Minute)
	tb := bucket(t, "tb", 10, 1, time.Second)
	for _, p := range []*limiter.Policy{fw, sw, tb} {
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
	for _, p := range []*limiter.Policy{fixed(t, "b.fw", 5, time.Hour), sliding(t, "b.sw", 5, time.Hour), bucket(t, "b.tb", 5, 1, time.Hour)} {
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

func TestClockRegression(t *testing.T) {
	e := newEnv(t)
	for _, p := range []*limiter.Policy{fixed(t, "c.fw", 5, time.Hour), sliding(t, "c.sw", 5, time.Hour), bucket(t, "c.tb", 5, 1, time.Second)} {
		key := keyOf(p, subjectOf("clock"))
		now := e.serverNow()
		w := now / p.WindowMillis()
		// Excessive: the stored last-observed time is 10s ahead of the
		// server (max regression 2s): CLOCK_UNSAFE, byte-for-byte unchanged.
		last := now + 10_000
		st := stateOf(p, last, w, 1, 0)
		if p.Algorithm() == limiter.TokenBucket {
			st = stateOf(p, last, 2, last, 0)
		}
		// checkParity compares DUMP before and after and checks the TTL was
		// not extended.
		r := checkParity(t, e, p, key, st, 1)
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
		if p.Algorithm() == limiter.TokenBucket {
			st.B = last
		}
		r = checkParity(t, e, p, key, st, 1)
		if r.Status != limiter.StatusAllowed || r.EffectiveNowMs != last {
			t.Fatalf("%s: clamped step: %+v, want ALLOWED at %d", p.ID(), r, last)
		}
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

func TestInvalidArguments(t *testing.T) {
	e := newEnv(t)
	p := fixed(t, "inv", 5, time.Hour)
	key := keyOf(p, subjectOf("invalid"))
	good := lua.AppendArgs(nil, p, 1)
	bad := map[string][]string{
		"too few":          good[:7],
		"too many":         append(append([]string{}, good...), "1"),
		"cost 0":           replaceArg(good, 7, "0"),
		"cost above max":   replaceArg(good, 7, "6"),
		"negative limit":   replaceArg(good, 2, "-5"),
		"float window":     replaceArg(good, 3, "1.5"),
		"window 0":         replaceArg(good, 3, "0"),
		"limit 2^53":       replaceArg(good, 2, "9007199254740992"),
		"policy charset":   replaceArg(good, 0, "Policy!"),
		"revision 0":       replaceArg(good, 1, "0"),
		"max cost > limit": replaceArg(good, 4, "6"),
		"hex":              replaceArg(good, 6, "0x10"),
	}
	fw, _ := lua.ProgramFor(limiter.FixedWindow)
	for name, args := range bad {
		v := e.do(append([]string{"EVAL", fw.Source, "1", key}, args...)...).([]any)
		if len(v) != 7 || v[0] != "INVALID" || v[3] != "0" {
			t.Errorf("%s: reply %v, want INVALID", name, v)
		}
		if e.do("EXISTS", key) != int64(0) {
			t.Errorf("%s: INVALID wrote state", name)
		}
	}
	for _, prog := range lua.Programs() {
		v := e.do("EVAL", prog.Source, "0").([]any)
		if v[0] != "INVALID" {
			t.Errorf("%s without keys or arguments: %v", prog.Name, v)
		}
	}
}

func replaceArg(args []string, i int, v string) []string {
	out := append([]string{}, args...)
	out[i] = v
	return out
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
// stale windows, through the programs and Apply.
func TestRandomDifferential(t *testing.T) {
	e := newEnv(t)
	n := 400
	if testing.Short() {
		n = 100
	}
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 5))
	t.Logf("random seed %d, %d iterations (a failure prints the state, policy and cost)", seed, n)
	windows := []time.Duration{time.Millisecond, 7 * time.Millisecond, 100 * time.Millisecond, time.Second, time.Minute, time.Hour}
	periods := []time.Duration{time.Millisecond, 3 * time.Millisecond, 7 * time.Millisecond, 100 * time.Millisecond, time.Second}
	for i := 0; i < n; i++ {
		var p *limiter.Policy
		limit := 1 + rng.Int64N(20)
		switch i % 3 {
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
			last := now + rng.Int64N(9000) - 5000 // some beyond the 2s regression
			w := last / p.WindowMillis()
			switch p.Algorithm() {
			case limiter.FixedWindow:
				st = stateOf(p, last, w+rng.Int64N(3)-1, rng.Int64N(limit+4), 0)
			case limiter.SlidingWindow:
				st = stateOf(p, last, w-rng.Int64N(3), rng.Int64N(limit+3), rng.Int64N(limit+3))
			case limiter.TokenBucket:
				_, period := p.Refill()
				st = stateOf(p, last, rng.Int64N(limit+3), last-rng.Int64N(10_000), rng.Int64N(period+1))
			}
			if rng.IntN(20) == 0 {
				st.Revision = 2 // a foreign revision: STATE_INCOMPATIBLE
			}
		}
		checkParity(t, e, p, key, st, 1+rng.Int64N(p.MaxCost()))
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
