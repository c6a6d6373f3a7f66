package redis

import (
	"context"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/algorithm"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/calendar"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/memory"
)

// The parity suite runs rate-batch-v2.lua, the program the store sends, on
// a real Redis, with one key and among several, and checks every reply
// field and the resulting hash and TTL against algorithm.Apply (the Go
// rules the memory store uses) given the same state and the same server time
// (the reply's serverNowMillis). Time-dependent cases are driven by writing
// state relative to the server's TIME, never by setting a clock.

// checkParity seeds st (or deletes the key when !st.Exists), runs the batch
// program with key alone and compares with Apply. It returns the reply.
func checkParity(t *testing.T, e *env, p *limiter.Policy, key string, st algorithm.State, cost int64) algorithm.Reply {
	t.Helper()
	return checkParityAmong(t, e, p, key, st, cost, 0, 1)
}

// checkParityAmong is checkParity with key at index pos of a batch of n
// keys (env.runAmong).
func checkParityAmong(t *testing.T, e *env, p *limiter.Policy, key string, st algorithm.State, cost int64, pos, n int) algorithm.Reply {
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
	next, want, write := algorithm.Apply(st, got.ServerNowMs, p, cost)
	if got != want {
		t.Fatalf("%s cost %d state %+v:\n lua  %+v\n go   %+v", p.ID(), cost, st, got, want)
	}
	if !write && algorithm.PenaltyRecorded(st, next) {
		// An offence: the block is written, the expiry raised to cover it
		// and its decay (never lowered).
		if h, w := e.hash(key), stateHash(next); !reflect.DeepEqual(h, w) {
			t.Fatalf("%s offence, state %+v:\n hash %v\n want %v", p.ID(), st, h, w)
		}
		pt := e.pttl(key)
		ttl := max(beforeTTL, next.ExpiresAtMs-got.ServerNowMs)
		if slack := time.Since(start).Milliseconds() + 2; pt > ttl+1 || pt < ttl-slack {
			t.Fatalf("%s offence: PTTL %d, want within [%d, %d]", p.ID(), pt, ttl-slack, ttl+1)
		}
		return got
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
func stateOf(p *limiter.Policy, last, a, b, c int64) algorithm.State {
	st := algorithm.State{Exists: true, Schema: algorithm.StateSchema, Algorithm: p.Algorithm(), PolicyID: p.ID(),
		Revision: p.Revision(), LastObservedMs: last, Epoch: a, Level: b, Carry: c}
	if p.Algorithm() == limiter.TokenBucket || p.Algorithm() == limiter.GCRA {
		st.Epoch, st.Level = b, a
	}
	return st
}

// randomState is a random stored state of p, observed up to 5 s before or
// 4 s after now (some beyond the 2 s clock regression), with windows and
// counts on both sides of the limit, and now and then a state of another
// algorithm at its key (STATE_INCOMPATIBLE: a key names its policy, its
// revision and its algorithm, so a foreign state is one another program
// wrote there).
func randomState(rng *rand.Rand, p *limiter.Policy, now int64) algorithm.State {
	limit := p.Limit()
	last := now + rng.Int64N(9000) - 5000
	w := last / p.WindowMillis()
	var st algorithm.State
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
		if p.ChargeAlways() && rng.IntN(3) == 0 {
			// In debt: a refill time ahead of now (now and then beyond any
			// debt the policy can hold).
			st.Epoch = last + rng.Int64N(20_000)
		}
	case limiter.GCRA:
		// A TAT behind, within or (one in ten: a lowered burst) far beyond
		// the tolerance; a fraction now and then of another rate.
		amount, period := p.Refill()
		tat := last - 5000 + rng.Int64N(p.Ceiling()*period/amount+10_000)
		if rng.IntN(10) == 0 {
			tat = last + 1_000_000_000
		}
		st = stateOf(p, last, 0, tat, rng.Int64N(amount+2))
	case limiter.SlidingLog:
		st = randomLog(rng, p, last)
	}
	if p.Penalty().On() && rng.IntN(2) == 0 {
		// A block ending up to 6 s ahead or 8 s ago, a level from 1 to 5
		// (the penalties are randomPenalty's).
		st.PenaltyUntilMs, st.PenaltyLevel = now-8000+rng.Int64N(14_000), 1+rng.Int64N(5)
	}
	if rng.IntN(20) == 0 {
		algs := limiter.Algorithms()
		st.Algorithm = algs[(slices.Index(algs, p.Algorithm())+1+rng.IntN(len(algs)-1))%len(algs)]
		if st.Algorithm != limiter.SlidingLog {
			st.Log = ""
		}
	}
	return st
}

// randomPenalty is a penalty box of 1 ms to 3 s, doubling up to 1 to 8
// times that, remembered 0 to 5 s after a block.
func randomPenalty(rng *rand.Rand) limiter.Penalty {
	d := time.Duration(1+rng.Int64N(3000)) * time.Millisecond
	return limiter.Penalty{Duration: d, MaxDuration: d * time.Duration(1+rng.Int64N(8)),
		Decay: time.Duration(rng.Int64N(5000)) * time.Millisecond}
}

func TestProgramsAgainstApply(t *testing.T) { programsAgainstApply(t, newEnv(t)) }

// programsAgainstApply chains every algorithm's steps through the batch
// program on e and through Apply.
func programsAgainstApply(t *testing.T, e *env) {
	fw := fixed(t, "fw", 5, time.Hour)
	sw := sliding(t, "sw", 10, time.Minute)
	tb := bucket(t, "tb", 10, 1, time.Second)
	gc := cellRate(t, "gc", 10, 3, time.Second)
	sl := slidingLog(t, "sl", 10, time.Minute)
	cal := calendarPolicy(t, "cal", 5, calendar.Day, "Europe/Berlin")
	spec := cal.Spec()
	spec.ID = "cal.pen"
	spec.Penalty = limiter.Penalty{Duration: time.Hour, MaxDuration: 4 * time.Hour, Decay: time.Hour}
	calPen := limitertest.Policy(t, spec)
	for _, p := range []*limiter.Policy{fw, sw, tb, gc, sl, cal, calPen} {
		key := keyOf(p, subjectOf("all-programs"))
		e.do("DEL", key)
		var st algorithm.State
		for i := 0; i < int(p.Limit())+2; i++ {
			// Chain: each step's expected state is what Apply wrote.
			got := e.run(p, key, 1)
			next, want, write := algorithm.Apply(st, got.ServerNowMs, p, 1)
			if got != want {
				t.Fatalf("%s step %d: lua %+v, go %+v", p.ID(), i, got, want)
			}
			// An offence against the penalty box is written whatever the
			// batch commits.
			if write || algorithm.PenaltyRecorded(st, next) {
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
	for _, p := range []*limiter.Policy{fixed(t, "b.fw", 5, time.Hour), sliding(t, "b.sw", 5, time.Hour), bucket(t, "b.tb", 5, 1, time.Hour), cellRate(t, "b.gc", 5, 1, time.Hour), slidingLog(t, "b.sl", 5, time.Hour)} {
		key := keyOf(p, subjectOf("boundary"))
		e.do("DEL", key)
		steps := []struct {
			cost      int64
			status    algorithm.Status
			remaining int64
		}{
			{3, algorithm.StatusAllowed, 2},
			{3, algorithm.StatusDenied, 2},  // would cross the limit: denied, consumes nothing
			{2, algorithm.StatusAllowed, 0}, // exactly the rest still fits
			{1, algorithm.StatusDenied, 0},
		}
		for i, s := range steps {
			before := e.dump(key)
			r := e.run(p, key, s.cost)
			if r.Status != s.status || r.Remaining != s.remaining {
				t.Fatalf("%s step %d: cost %d: %s remaining %d, want %s remaining %d", p.ID(), i, s.cost, r.Status, r.Remaining, s.status, s.remaining)
			}
			if r.Status == algorithm.StatusDenied {
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
		for _, p := range []*limiter.Policy{fixed(t, "c.fw", 5, time.Hour), sliding(t, "c.sw", 5, time.Hour), bucket(t, "c.tb", 5, 1, time.Second), cellRate(t, "c.gc", 5, 3, time.Second), slidingLog(t, "c.sl", 5, time.Second)} {
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
	case limiter.SlidingLog:
		st = stateOf(p, last, w, 0, 0)
		st.Log = logOf(last-10, 1, last, 2)
	}
	// checkParity compares DUMP before and after and checks the TTL was
	// not extended.
	r := checkParityAmong(t, e, p, key, st, 1, pos, n)
	if r.Status != algorithm.StatusClockUnsafe {
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
	case limiter.SlidingLog:
		st.Log = logOf(last-10, 1, last, 2)
	}
	r = checkParityAmong(t, e, p, key, st, 1, pos, n)
	if r.Status != algorithm.StatusAllowed || r.EffectiveNowMs != last {
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
	if r.Status != algorithm.StatusAllowed {
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
		if r.Status != algorithm.StatusAllowed {
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
	// A fixed window's state (redistest.AppendState): head, last, epoch, level,
	// carry, then a penalty box's block and level.
	good := rawState{head: byte(limiter.FixedWindow), nums: []float64{1000, 1, 1, 0}}
	with := func(f func(*rawState)) rawState {
		r := rawState{head: good.head, nums: slices.Clone(good.nums)}
		f(&r)
		return r
	}
	cases := map[string]func(){
		"other algorithm":     func() { e.seedRawState(key, with(func(r *rawState) { r.head = byte(limiter.TokenBucket) })) },
		"unknown head bit":    func() { e.seedRawState(key, with(func(r *rawState) { r.head |= 128 })) },
		"penalty bit, short":  func() { e.seedRawState(key, with(func(r *rawState) { r.head |= redistest.StatePenalty })) },
		"short":               func() { e.seedRawState(key, with(func(r *rawState) { r.nums = r.nums[:3] })) },
		"trailing bytes":      func() { e.seedRawState(key, with(func(r *rawState) { r.tail = "x" })) },
		"NaN":                 func() { e.seedRawState(key, with(func(r *rawState) { r.nums[2] = math.NaN() })) },
		"float":               func() { e.seedRawState(key, with(func(r *rawState) { r.nums[2] = 1.5 })) },
		"negative":            func() { e.seedRawState(key, with(func(r *rawState) { r.nums[2] = -1 })) },
		"infinite last":       func() { e.seedRawState(key, with(func(r *rawState) { r.nums[0] = math.Inf(1) })) },
		"above 2^53":          func() { e.seedRawState(key, with(func(r *rawState) { r.nums[2] = 1<<53 + 2 })) },
		"foreign hash":        func() { e.seedRaw(key, map[string]string{"count": "3"}) },
		"a hash of version 1": func() { e.seedRaw(key, stateHashV1(stateOf(p, 1000, 1, 1, 0))) },
		"string key":          func() { e.do("DEL", key); e.do("SET", key, "3", "PX", "60000") },
		"list key":            func() { e.do("DEL", key); e.do("RPUSH", key, "3"); e.do("PEXPIRE", key, "60000") },
		"sliding overflow":    nil, // below, on a sliding policy
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

// rawState is a value of rate-batch-v2.lua's layout, field by field, so
// that a test can put any value in any field: head, then the numbers as
// doubles, then tail.
type rawState struct {
	head byte
	nums []float64
	tail string
}

// seedRawState writes r as key's value with a TTL.
func (e *env) seedRawState(key string, r rawState) {
	e.t.Helper()
	b := []byte{r.head}
	for _, v := range r.nums {
		b = binary.BigEndian.AppendUint64(b, math.Float64bits(v))
	}
	e.do("DEL", key)
	e.do("SET", key, string(b)+r.tail, "PX", "600000")
}

// stateHashV1 is st as rate-batch-v1.lua's hash holds it.
func stateHashV1(st algorithm.State) map[string]string {
	h := stateHash(st)
	h["schema"], h["policy"], h["rev"] = "1", st.PolicyID, strconv.FormatUint(uint64(st.Revision), 10)
	return h
}

// seedRaw writes m as key's hash with a TTL (a key of another type than
// rate-batch-v2.lua's states).
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

// batchFields are the fields of one key of rate-batch-v2.lua, as
// lua.AppendBatchPacked packs them, so that a test can put any value in any
// field.
type batchFields struct {
	alg, flags                                     byte
	rev, limit, p2, p3, grace, maxRegression, cost float64
	// ext: the numbers appended after the fixed ones (the penalty
	// extension: duration, max duration, decay in ms).
	ext []float64
}

// The lengths and flag bits of a key's packed numbers, as rate-batch-v2.lua's
// header gives them: written here, not taken from pkg/lua, so that the
// tests' encoding is their own.
const (
	packedLen   = 2 + 7*8 // struct.pack('>BBddddddd')
	penaltyLen  = 3 * 8   // the penalty extension, '>ddd'
	calendarLen = 4 * 8   // the calendar extension, '>dddd'

	flagPenalty  = 16
	flagCalendar = 32
	flagCharge   = 64
)

func (f batchFields) args() []string {
	b := []byte{f.alg, f.flags}
	for _, v := range append([]float64{f.rev, f.limit, f.p2, f.p3, f.grace, f.maxRegression, f.cost}, f.ext...) {
		b = binary.BigEndian.AppendUint64(b, math.Float64bits(v))
	}
	return []string{string(b)}
}

// TestInvalidArguments: every field of a key out of its range makes that
// key INVALID (limit 0), blocks the batch and writes nothing, alone or with
// a valid key.
func TestInvalidArguments(t *testing.T) {
	e := newEnv(t)
	p := fixed(t, "inv", 5, time.Hour)
	key := keyOf(p, subjectOf("invalid"))
	other := keyOf(p, subjectOf("invalid, valid"))
	good := batchFields{alg: byte(limiter.FixedWindow), rev: 1, limit: 5, p2: float64(time.Hour.Milliseconds()),
		grace: float64(p.CleanupGraceMillis()), maxRegression: float64(p.MaxClockRegressionMillis()), cost: 1}
	if got, want := good.args(), batchArgs(nil, p, 1, limiter.RoleOrdinary); !reflect.DeepEqual(got, want) {
		t.Fatalf("the test's encoding %q, the store's %q", got, want)
	}
	with := func(f func(*batchFields)) []string {
		b := good
		f(&b)
		return b.args()
	}
	bad := map[string][]string{
		"cost 0":                   with(func(b *batchFields) { b.cost = 0 }),
		"cost above limit":         with(func(b *batchFields) { b.cost = 6 }),
		"float cost":               with(func(b *batchFields) { b.cost = 1.5 }),
		"negative limit":           with(func(b *batchFields) { b.limit = -5 }),
		"limit 2^53":               with(func(b *batchFields) { b.limit = 1 << 53 }),
		"float window":             with(func(b *batchFields) { b.p2 = 1.5 }),
		"window 0":                 with(func(b *batchFields) { b.p2 = 0 }),
		"window above ten years":   with(func(b *batchFields) { b.p2 = 1 << 40 }),
		"fixed window period":      with(func(b *batchFields) { b.p3 = 1 }),
		"revision 0":               with(func(b *batchFields) { b.rev = 0 }),
		"revision 2^32":            with(func(b *batchFields) { b.rev = 1 << 32 }),
		"negative grace":           with(func(b *batchFields) { b.grace = -1 }),
		"NaN max regression":       with(func(b *batchFields) { b.maxRegression = math.NaN() }),
		"infinite max regression":  with(func(b *batchFields) { b.maxRegression = math.Inf(1) }),
		"algorithm 0":              with(func(b *batchFields) { b.alg = 0 }),
		"algorithm 4":              with(func(b *batchFields) { b.alg = 4 }),
		"role 6":                   with(func(b *batchFields) { b.flags = 6 }),
		"role 7, fail-open":        with(func(b *batchFields) { b.flags = 8 | 7 }),
		"charge above its ceiling": with(func(b *batchFields) { b.flags, b.cost = flagCharge, 11 }),
		"charge, limit above half": with(func(b *batchFields) { b.flags, b.limit = flagCharge, 1<<52 }),
		// The penalty extension (flag 16).
		"penalty flag, no extension":  with(func(b *batchFields) { b.flags = flagPenalty }),
		"penalty extension short":     with(func(b *batchFields) { b.flags, b.ext = flagPenalty, []float64{1000, 1000} }),
		"penalty duration 0":          with(func(b *batchFields) { b.flags, b.ext = flagPenalty, []float64{0, 1000, 0} }),
		"penalty max below duration":  with(func(b *batchFields) { b.flags, b.ext = flagPenalty, []float64{2000, 1000, 0} }),
		"penalty negative decay":      with(func(b *batchFields) { b.flags, b.ext = flagPenalty, []float64{1000, 1000, -1} }),
		"penalty above 30 days":       with(func(b *batchFields) { b.flags, b.ext = flagPenalty, []float64{1000, 2592000001, 0} }),
		"penalty fractional duration": with(func(b *batchFields) { b.flags, b.ext = flagPenalty, []float64{1.5, 1000, 0} }),
		"penalty with flags 64":       with(func(b *batchFields) { b.flags, b.ext = flagPenalty|64, []float64{1000, 1000, 0} }),
		// The calendar extension after the penalty's: each checked where
		// the other ends.
		"penalty and calendar flags, no calendar extension": with(func(b *batchFields) {
			b.flags, b.ext = flagPenalty|flagCalendar, []float64{1000, 1000, 0}
		}),
		"penalty flag, a calendar extension after it": with(func(b *batchFields) {
			b.flags, b.ext = flagPenalty, []float64{1000, 1000, 0, 0, 1000, 2000, 3000}
		}),
		"penalty and calendar, penalty short": with(func(b *batchFields) {
			b.flags, b.ext = flagPenalty|flagCalendar, []float64{1000, 1000, 0, 1000, 2000, 3000}
		}),
		"penalty with role 6": with(func(b *batchFields) { b.flags, b.ext = flagPenalty|6, []float64{1000, 1000, 0} }),
	}
	valid := batchArgs(nil, p, 1, limiter.RoleOrdinary)
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
			if committed || r[c.pos].Status != algorithm.StatusInvalid || r[c.pos].Limit != 0 {
				t.Errorf("%s (%d keys): committed %v, reply %+v, want INVALID", name, len(c.keys), committed, r[c.pos])
			}
			if e.do("EXISTS", key, other) != int64(0) {
				t.Errorf("%s (%d keys): a batch with an INVALID key wrote state", name, len(c.keys))
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.store.execBatch(ctx, nil, nil).Error(); err == nil {
		t.Error("rate-batch-v2 without keys or arguments replied")
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
func TestRandomDifferential(t *testing.T) { randomDifferential(t, newEnv(t)) }

func randomDifferential(t *testing.T, e *env) {
	rng, n := seededRand(t, 5, 400, 100, "iterations (a failure prints the state, policy and cost)")
	windows := []time.Duration{time.Millisecond, 7 * time.Millisecond, 100 * time.Millisecond, time.Second, time.Minute, time.Hour}
	periods := []time.Duration{time.Millisecond, 3 * time.Millisecond, 7 * time.Millisecond, 100 * time.Millisecond, time.Second}
	for i := 0; i < n; i++ {
		var p *limiter.Policy
		limit := 1 + rng.Int64N(20)
		switch i % 5 {
		case 4:
			// A calendar window, with a penalty box one time in two.
			p = calendarRandom(t, rng, "r.cal", limit)
			if rng.IntN(2) == 0 {
				spec := p.Spec()
				spec.Penalty = randomPenalty(rng)
				p = limitertest.Policy(t, spec)
			}
		case 0:
			p = fixed(t, "r.fw", limit, windows[rng.IntN(len(windows))])
		case 1:
			p = sliding(t, "r.sw", limit, windows[rng.IntN(len(windows))])
		case 2:
			p = bucket(t, "r.tb", limit, 1+rng.Int64N(5), periods[rng.IntN(len(periods))])
		case 3:
			// Any algorithm with a penalty box, or charging always.
			p = randomPolicies(t, rng, "r.pn", 1, windows)[0]
			spec := p.Spec()
			spec.Penalty, spec.FailureMode, spec.Charge, spec.MaxCost = randomPenalty(rng), limiter.FailClosed, limiter.ChargeAllowed, 0
			if rng.IntN(2) == 0 {
				spec.Penalty, spec.Charge = limiter.Penalty{}, limiter.ChargeAlways
			}
			p = limitertest.Policy(t, spec)
		}
		key := keyOf(p, subjectOf("random"+strconv.Itoa(i%7)))
		now := e.serverNow()
		var st algorithm.State
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

// TestMalformedPenaltyIsIncompatible: for a policy with a penalty box, a
// state whose block's end or level is not an integer in its range is
// STATE_INCOMPATIBLE and unchanged; the same state is read by a policy
// without a penalty (the block is not read).
func TestMalformedPenaltyIsIncompatible(t *testing.T) {
	e := newEnv(t)
	spec := fixed(t, "m.pen", 5, time.Hour).Spec()
	spec.Penalty = limiter.Penalty{Duration: time.Minute}
	p := limitertest.Policy(t, spec)
	plain := fixed(t, "m.pen", 5, time.Hour)
	sub := subjectOf("malformed penalty")
	key := keyOf(p, sub)
	// A fixed window's state with a penalty box: head, last, epoch, level,
	// carry, the block's end and its level.
	good := []float64{1000, 1, 1, 0, 1000, 1}
	for name, f := range map[string]func([]float64){
		"pu zero":       func(n []float64) { n[4] = 0 },
		"pu not a num":  func(n []float64) { n[4] = math.NaN() },
		"pn zero":       func(n []float64) { n[5] = 0 },
		"pn of 3":       func(n []float64) { n[5] = 100 },
		"pn fraction":   func(n []float64) { n[5] = 1.5 },
		"pu above 2^53": func(n []float64) { n[4] = 1<<53 + 2 },
	} {
		nums := slices.Clone(good)
		f(nums)
		e.seedRawState(key, rawState{head: byte(limiter.FixedWindow) | redistest.StatePenalty, nums: nums})
		before := e.dump(key)
		if o := e.evaluate(p, sub, 1); o.Kind != limiter.Incompatible || o.Category != limiter.CategoryStateIncompatible {
			t.Errorf("%s: outcome %v/%s (%v), want incompatible/state_incompatible", name, o.Kind, o.Category, o.Err)
		}
		if after := e.dump(key); !reflect.DeepEqual(after, before) {
			t.Errorf("%s: state changed", name)
		}
		if o := e.evaluate(plain, sub, 1); o.Kind != limiter.Evaluated {
			t.Errorf("%s, policy without a penalty: %v (%v), want the fields ignored", name, o.Kind, o.Err)
		}
	}
}

// TestPenaltyProgramAgainstCheck chains requests on one subject of each
// algorithm with an hour-long penalty box through the batch program and
// through algorithm.Check, keeping the model's state as a store does (an
// allowed request's state, an offence's block): every reply and every hash
// equal, through the limit, the offence and the blocked requests after it.
// Before each request a probe of both kinds (RoleProbe, RoleQuotaProbe)
// answers Check's uncommitted reply (a block as BLOCKED, a denial without
// an offence) and leaves the hash as it was.
func TestPenaltyProgramAgainstCheck(t *testing.T) {
	e := newEnv(t)
	for _, p := range []*limiter.Policy{fixed(t, "pb.fw", 3, time.Hour), sliding(t, "pb.sw", 3, time.Hour),
		bucket(t, "pb.tb", 3, 1, time.Hour), cellRate(t, "pb.gc", 3, 1, time.Hour),
		slidingLog(t, "pb.sl", 3, time.Hour)} {
		spec := p.Spec()
		spec.Penalty = limiter.Penalty{Duration: time.Hour, MaxDuration: 8 * time.Hour, Decay: time.Hour}
		p = limitertest.Policy(t, spec)
		key := keyOf(p, subjectOf("penalty chain"))
		e.do("DEL", key)
		var st algorithm.State
		var statuses []algorithm.Status
		sub := subjectOf("penalty chain")
		for i := 0; i < int(p.Limit())+3; i++ {
			for _, role := range []limiter.Role{limiter.RoleProbe, limiter.RoleQuotaProbe} {
				before := e.dump(key)
				_, pr := e.runBatch([]batchReq{{p: p, sub: sub, cost: 1, role: role}})
				if _, _, want, _ := algorithm.Check(st, pr[0].ServerNowMs, p, 1); pr[0] != want {
					t.Fatalf("%s step %d %s: lua %+v, go %+v", p.ID(), i, role, pr[0], want)
				}
				if after := e.dump(key); !reflect.DeepEqual(after, before) {
					t.Fatalf("%s step %d: a %s wrote the hash", p.ID(), i, role)
				}
			}
			got := e.run(p, key, 1)
			next, want, _, write := algorithm.Check(st, got.ServerNowMs, p, 1)
			if got != want {
				t.Fatalf("%s step %d: lua %+v, go %+v", p.ID(), i, got, want)
			}
			statuses = append(statuses, got.Status)
			if write || algorithm.PenaltyRecorded(st, next) {
				st = next
				if h := e.hash(key); !reflect.DeepEqual(h, stateHash(next)) {
					t.Fatalf("%s step %d: hash %v, want %v", p.ID(), i, h, stateHash(next))
				}
			}
		}
		want := []algorithm.Status{algorithm.StatusAllowed, algorithm.StatusAllowed, algorithm.StatusAllowed,
			algorithm.StatusDenied, algorithm.StatusBlocked, algorithm.StatusBlocked}
		if !reflect.DeepEqual(statuses, want) || st.PenaltyLevel != 1 {
			t.Fatalf("%s: statuses %v (level %d), want %v with one offence", p.ID(), statuses, st.PenaltyLevel, want)
		}
		if pt := e.pttl(key); pt < time.Hour.Milliseconds()*2 {
			t.Fatalf("%s: PTTL %d ms, want the block and its decay (2 h) covered", p.ID(), pt)
		}
	}
}

// logOf packs (time, cost) pairs as algorithm.State.Log.
func logOf(hits ...int64) string {
	var b []byte
	for i := 0; i < len(hits); i += 2 {
		b = algorithm.AppendSlidingLogEntry(b, hits[i], hits[i+1])
	}
	return string(b)
}

// randomLog is a random sliding-log state of p last observed at last: up
// to limit + 3 hits over the two windows before last (some out of the
// window, some in one ms), with counts in a and b as a write leaves them;
// one in eight without a log (the memory store's estimated counts), one in
// twelve of either with a log or counts that cannot be ours
// (STATE_INCOMPATIBLE).
func randomLog(rng *rand.Rand, p *limiter.Policy, last int64) algorithm.State {
	w := p.WindowMillis()
	epoch := last / w
	st := stateOf(p, last, epoch, 0, 0)
	if rng.IntN(8) == 0 {
		st.Epoch -= rng.Int64N(2)
		st.Level, st.Carry = rng.Int64N(p.Limit()+2), rng.Int64N(p.Limit()+2)
		switch rng.IntN(12) {
		case 0:
			st.Level = limiter.MaxSlidingLogLimit + 1 // above any log's count
		case 1:
			st.Epoch = limiter.MaxSafeInteger/w + 1 // a window beyond 2^53 ms
		}
		return st
	}
	n := rng.Int64N(p.Limit() + 4)
	times := make([]int64, n)
	for i := range times {
		times[i] = last - rng.Int64N(2*w+1)
		if i > 0 && rng.IntN(4) == 0 {
			times[i] = times[i-1]
		}
	}
	slices.Sort(times)
	var b []byte
	for i, t := range times {
		cost := 1 + rng.Int64N(3)
		if i+1 < len(times) && times[i+1] == t {
			continue // one entry per ms: the costs of a ms add up
		}
		for j := i - 1; j >= 0 && times[j] == t; j-- {
			cost++
		}
		b = algorithm.AppendSlidingLogEntry(b, t, cost)
		if t >= epoch*w {
			st.Level += cost
		} else {
			st.Carry += cost
		}
	}
	st.Log = string(b)
	if rng.IntN(12) == 0 && len(b) > 0 {
		switch rng.IntN(3) {
		case 0:
			st.Log = st.Log[:len(b)-1] // a partial entry
		case 1:
			st.Log = string(algorithm.AppendSlidingLogEntry(b, last+1, 1)) // after last
		default:
			st.Log = string(algorithm.AppendSlidingLogEntry(b, 0, 1)) // out of order
		}
	}
	return st
}

// TestSlidingLogAgainstApply: the sliding log's cases one by one through
// the program (alone and as the second of three keys), each compared with
// Apply: logs that cannot be ours, estimated counts without a log, a hit
// in the ms of the newest entry, and full logs of the maximum limit.
func TestSlidingLogAgainstApply(t *testing.T) {
	e := newEnv(t)
	p := slidingLog(t, "sl.cases", 5, time.Minute)
	full := slidingLog(t, "sl.full", limiter.MaxSlidingLogLimit, time.Hour)
	key, fullKey := keyOf(p, subjectOf("sl-cases")), keyOf(full, subjectOf("sl-cases"))
	for _, at := range []struct{ pos, n int }{{0, 1}, {1, 3}} {
		now := e.serverNow()
		last := now - 100
		w := now / p.WindowMillis()
		st := func(log string) algorithm.State {
			s := stateOf(p, last, w, 0, 0)
			s.Log = log
			return s
		}
		counts := func(epoch, level, carry int64) algorithm.State {
			return stateOf(p, last, epoch, level, carry)
		}
		for name, c := range map[string]struct {
			st   algorithm.State
			want algorithm.Status
		}{
			"partial entry":      {st(logOf(last, 1)[:9]), algorithm.StatusStateIncompatible},
			"cost 0":             {st(logOf(last, 0)), algorithm.StatusStateIncompatible},
			"out of order":       {st(logOf(last, 1, last-1, 1)), algorithm.StatusStateIncompatible},
			"after last":         {st(logOf(last+1, 1)), algorithm.StatusStateIncompatible},
			"fraction":           {st("\x42\x78\xbc\xfe\x56\x80\x00\x01\x00\x01"), algorithm.StatusStateIncompatible},
			"too long":           {st(strings.Repeat(logOf(last, 1), limiter.MaxSlidingLogLimit+1)), algorithm.StatusStateIncompatible},
			"counts above 1000":  {counts(w, limiter.MaxSlidingLogLimit+1, 0), algorithm.StatusStateIncompatible},
			"window beyond 2^53": {counts(limiter.MaxSafeInteger/p.WindowMillis()+1, 1, 0), algorithm.StatusStateIncompatible},
			// The rest depend on where now falls in its minute: parity
			// only (checkParityAmong).
			"estimated counts":    {counts(w, 2, 2), 0},
			"estimated, full":     {counts(w, 0, 5), 0},
			"estimated, older":    {counts(w-1, 3, 2), 0},
			"estimated, window 0": {counts(0, 1, 2), 0},
			"same ms as the last": {st(logOf(last-5, 1, last, 2)), 0},
			"out of the window":   {st(logOf(last-70_000, 5)), 0},
			"one leaving":         {st(logOf(now-60_000, 1, last, 4)), 0},
		} {
			c.st.LastObservedMs = last
			if r := checkParityAmong(t, e, p, key, c.st, 1, at.pos, at.n); c.want != 0 && r.Status != c.want {
				t.Errorf("%s: %s, want %s", name, r.Status, c.want)
			}
		}
		// The maximum limit: 999 hits leave room for one, 1000 none.
		for _, n := range []int64{999, 1000} {
			var log []byte
			for i := range n {
				log = algorithm.AppendSlidingLogEntry(log, last-n+i, 1)
			}
			s := stateOf(full, last, now/full.WindowMillis(), n, 0)
			s.Log = string(log)
			if r := checkParityAmong(t, e, full, fullKey, s, 1, at.pos, at.n); (r.Status == algorithm.StatusAllowed) != (n == 999) {
				t.Errorf("a log of %d: %s", n, r.Status)
			}
		}
	}
}

// redisClock reads Redis TIME, so that the memory store decides at (nearly)
// the instant the Redis store does.
type redisClock struct{ e *env }

func (c redisClock) Now() time.Time { return time.UnixMilli(c.e.serverNow()) }

// TestVectorsMemoryAndRedis runs one table of request sequences against the
// memory store and the Redis store and asserts the same outcomes. Windows and
// refill rates are long, so the milliseconds between the two evaluations only
// move retry-after and reset-at, which are compared within a tolerance; the
// exact field-by-field parity is TestRandomDifferential's.
func TestVectorsMemoryAndRedis(t *testing.T) {
	e := newEnv(t)
	mem, err := memory.New(memory.Config{Clock: redisClock{e}, MaxEntries: 1000})
	if err != nil {
		t.Fatal(err)
	}
	type step struct {
		cost      int64
		allowed   bool
		remaining int64
	}
	const maxSlidingWindow = 9007 * time.Second * 1000 // (2^53-1)/1e6 ms, rounded down
	vectors := []struct {
		name   string
		policy *limiter.Policy
		steps  []step
	}{
		{"fixed: fill, then deny", fixed(t, "v.fw1", 5, farWindow),
			[]step{{1, true, 4}, {1, true, 3}, {3, true, 0}, {1, false, 0}, {5, false, 0}}},
		{"fixed: exact boundary after a denial", fixed(t, "v.fw2", 5, farWindow),
			[]step{{3, true, 2}, {3, false, 2}, {2, true, 0}, {1, false, 0}}},
		{"fixed: max cost", limitertest.Policy(t, limiter.PolicySpec{ID: "v.fw3", Algorithm: limiter.FixedWindow, MaxCost: 4,
			Params: limiter.FixedWindowParams{Limit: 10, Window: farWindow}}),
			[]step{{4, true, 6}, {4, true, 2}, {4, false, 2}, {2, true, 0}}},
		{"token bucket: drain", bucket(t, "v.tb1", 5, 1, 24*time.Hour),
			[]step{{5, true, 0}, {1, false, 0}}},
		{"token bucket: boundary", bucket(t, "v.tb2", 5, 1, 24*time.Hour),
			[]step{{2, true, 3}, {2, true, 1}, {2, false, 1}, {1, true, 0}}},
		{"sliding: fresh window", sliding(t, "v.sw1", 5, maxSlidingWindow),
			[]step{{1, true, 4}, {1, true, 3}, {3, true, 0}, {1, false, 0}}},
	}
	const tolerance = time.Second
	for _, v := range vectors {
		sub := subjectOf("vector " + v.name)
		for i, s := range v.steps {
			req := []limiter.Request{{Policy: v.policy, Subject: sub, Cost: s.cost}}
			var got [2]limiter.Outcome
			for j, store := range []limiter.Store{mem, e.store} {
				out := make([]limiter.Outcome, 1)
				store.Evaluate(context.Background(), req, out)
				got[j] = out[0]
			}
			m, r := got[0], got[1]
			if m.Kind != limiter.Evaluated || r.Kind != limiter.Evaluated {
				t.Fatalf("%s step %d: memory %v (%v), redis %v (%v)", v.name, i, m.Kind, m.Err, r.Kind, r.Err)
			}
			md, rd := m.Decision, r.Decision
			if md.Allowed != s.allowed || md.Remaining != s.remaining {
				t.Errorf("%s step %d: memory allowed=%v remaining=%d, want %v %d", v.name, i, md.Allowed, md.Remaining, s.allowed, s.remaining)
			}
			if rd.Allowed != md.Allowed || rd.Remaining != md.Remaining || rd.Limit != md.Limit || rd.Certainty != md.Certainty ||
				rd.PolicyID != md.PolicyID || rd.PolicyRevision != md.PolicyRevision {
				t.Errorf("%s step %d: redis %+v, memory %+v", v.name, i, rd, md)
			}
			if d := rd.RetryAfter - md.RetryAfter; d > tolerance || d < -tolerance || (rd.RetryAfter == 0) != (md.RetryAfter == 0) {
				t.Errorf("%s step %d: retry-after redis %v, memory %v", v.name, i, rd.RetryAfter, md.RetryAfter)
			}
			if d := rd.ResetAt.Sub(md.ResetAt); d > tolerance || d < -tolerance {
				t.Errorf("%s step %d: reset-at redis %v, memory %v", v.name, i, rd.ResetAt, md.ResetAt)
			}
			if rd.Source != limiter.SourceRedis || md.Source != limiter.SourceMemory {
				t.Errorf("%s step %d: sources %v, %v", v.name, i, rd.Source, md.Source)
			}
		}
	}
}
