package redis

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/algorithm"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/calendar"
	"github.com/envoy-rls/envoy-rls/pkg/lua"
	"github.com/redis/rueidis"
)

// batchReq is one key of a direct rate-batch-v2.lua call.
type batchReq struct {
	p    *limiter.Policy
	sub  limiter.SubjectDigest
	cost int64
	role limiter.Role
}

// runBatch calls rate-batch-v2.lua directly and parses its reply.
func (e *env) runBatch(reqs []batchReq) (bool, []algorithm.Reply) {
	e.t.Helper()
	keys := make([]string, len(reqs))
	var args []string
	pols := make([]*limiter.Policy, len(reqs))
	for i, r := range reqs {
		keys[i] = keyOf(r.p, r.sub)
		args = batchArgs(args, r.p, r.cost, r.role)
		pols[i] = r.p
	}
	return e.runBatchKeys(keys, args, pols)
}

// runBatchKeys calls rate-batch-v2.lua on keys with args and parses its
// reply as the store does (replyValues, lua.ParseBatchReplyV2 for pols, one
// per key).
func (e *env) runBatchKeys(keys, args []string, pols []*limiter.Policy) (bool, []algorithm.Reply) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	msgs, err := e.execOne(ctx, keys, args, 0)
	if err != nil {
		e.t.Fatalf("rate-batch-v2: %v", err)
	}
	vals := replyValues(nil, msgs)
	replies := make([]algorithm.Reply, len(keys))
	committed, err := lua.ParseBatchReplyV2(pols, vals, replies)
	if err != nil {
		e.t.Fatalf("rate-batch-v2 reply: %v (%+v)", err, vals)
	}
	return committed, replies
}

// modelBatch is what rate-batch-v2.lua must do, in Go: algorithm.Check over
// the batch in order (a key named again sees the earlier tentative state),
// limiter.Commits, then the writes. states holds each key's state before.
func modelBatch(states map[string]algorithm.State, reqs []batchReq, now int64) (bool, []algorithm.Reply, map[string]algorithm.State) {
	cur := make(map[string]algorithm.State, len(states))
	for k, v := range states {
		cur[k] = v
	}
	replies := make([]algorithm.Reply, len(reqs))
	uncommitteds := make([]algorithm.Reply, len(reqs))
	writes := make([]bool, len(reqs))
	nexts := make([]algorithm.State, len(reqs))
	batch := make([]limiter.Request, len(reqs))
	outs := make([]limiter.Outcome, len(reqs))
	offences := map[string]algorithm.State{}
	for i, r := range reqs {
		k := keyOf(r.p, r.sub)
		next, reply, uncommitted, write := algorithm.Check(cur[k], now, r.p, r.cost)
		batch[i] = limiter.Request{Policy: r.p, Subject: r.sub, Cost: r.cost, Role: r.role}
		if !r.role.Consumes() {
			reply = uncommitted
			write = false
		}
		if !write {
			reply = recordOffence(cur, offences, states[k].Exists, k, r, next, reply, uncommitted)
		}
		replies[i], uncommitteds[i], writes[i], nexts[i] = reply, uncommitted, write, next
		if write {
			cur[k] = next
		}
		outs[i] = algorithm.OutcomeFromReply(r.p, reply, limiter.SourceRedis)
	}
	commit := limiter.Commits(batch, outs)
	final := make(map[string]algorithm.State, len(states))
	for k, v := range states {
		final[k] = v
	}
	for i, r := range reqs {
		if !writes[i] {
			continue
		}
		if commit || batch[i].Charges() {
			// A charge is written whatever the batch decides.
			final[keyOf(r.p, r.sub)] = nexts[i]
		} else {
			replies[i] = uncommitteds[i]
		}
	}
	return commit, replies, withOffences(final, offences)
}

// randomPolicies makes n policies named prefix.0, prefix.1, ...: each a
// fixed window, a sliding window, a token bucket (refilling 1 to 3 a
// period), a GCRA (1 to 3 a period) or a sliding log of a limit (burst) from 1 to 8, its window or period one of windows, one
// in four fail-open, one in three with a penalty box (randomPenalty), one
// in three charging always.
func randomPolicies(t *testing.T, rng *rand.Rand, prefix string, n int, windows []time.Duration) []*limiter.Policy {
	t.Helper()
	pols := make([]*limiter.Policy, n)
	for j := range pols {
		limit := 1 + rng.Int64N(8)
		fm := limiter.FailClosed
		if rng.IntN(4) == 0 {
			fm = limiter.FailOpen
		}
		id := fmt.Sprintf("%s.%d", prefix, j)
		w := windows[rng.IntN(len(windows))]
		var pn limiter.Penalty
		charge := limiter.ChargeAllowed
		switch rng.IntN(3) {
		case 0:
			pn = randomPenalty(rng)
		case 1:
			charge = limiter.ChargeAlways
		}
		switch rng.IntN(6) {
		case 5:
			spec := calendarRandom(t, rng, id, limit).Spec()
			spec.FailureMode, spec.Penalty, spec.Charge = fm, pn, charge
			pols[j] = limitertest.Policy(t, spec)
		case 4:
			pols[j] = limitertest.Policy(t, limiter.PolicySpec{ID: id, Algorithm: limiter.SlidingLog, FailureMode: fm, Penalty: pn, Charge: charge,
				Params: limiter.SlidingLogParams{Limit: limit, Window: w}})
		case 0:
			pols[j] = limitertest.Policy(t, limiter.PolicySpec{ID: id, Algorithm: limiter.FixedWindow, FailureMode: fm, Penalty: pn, Charge: charge,
				Params: limiter.FixedWindowParams{Limit: limit, Window: w}})
		case 1:
			pols[j] = limitertest.Policy(t, limiter.PolicySpec{ID: id, Algorithm: limiter.SlidingWindow, FailureMode: fm, Penalty: pn, Charge: charge,
				Params: limiter.SlidingWindowParams{Limit: limit, Window: w}})
		case 2:
			pols[j] = limitertest.Policy(t, limiter.PolicySpec{ID: id, Algorithm: limiter.TokenBucket, FailureMode: fm, Penalty: pn, Charge: charge,
				Params: limiter.TokenBucketParams{Capacity: limit, RefillAmount: 1 + rng.Int64N(3), RefillPeriod: w}})
		default:
			pols[j] = limitertest.Policy(t, limiter.PolicySpec{ID: id, Algorithm: limiter.GCRA, FailureMode: fm, Penalty: pn, Charge: charge,
				Params: limiter.GCRAParams{Burst: limit, Limit: 1 + rng.Int64N(3), Period: w}})
		}
	}
	return pols
}

// seedRandom stores for each distinct key of reqs either nothing (one in
// four) or randomState's state around now, and returns the states stored
// (the zero State for none) and each key's DUMP as stored.
func (e *env) seedRandom(rng *rand.Rand, reqs []batchReq, now int64) (states map[string]algorithm.State, before map[string]any) {
	e.t.Helper()
	states = map[string]algorithm.State{}
	for _, r := range reqs {
		key := keyOf(r.p, r.sub)
		if _, done := states[key]; done {
			continue
		}
		var st algorithm.State
		if rng.IntN(4) > 0 {
			st = randomState(rng, r.p, now)
			e.seed(key, st)
		} else {
			e.do("DEL", key)
		}
		states[key] = st
	}
	before = map[string]any{}
	for key := range states {
		before[key] = e.dump(key)
	}
	return states, before
}

// checkWritten compares each key of final (the model's states after a
// run) with Redis: a key whose state the model left as seeded (states) is
// unchanged to the byte (its DUMP is before's), any other holds the
// model's hash.
func (e *env) checkWritten(states, final map[string]algorithm.State, before map[string]any) error {
	e.t.Helper()
	for key, st := range final {
		if st == states[key] {
			if after := e.dump(key); !reflect.DeepEqual(after, before[key]) {
				return fmt.Errorf("key %x: not written, yet changed", key[len(key)-8:])
			}
			continue
		}
		if h := e.hash(key); !reflect.DeepEqual(h, stateHash(st)) {
			return fmt.Errorf("key %x: hash %v, want %v", key[len(key)-8:], h, stateHash(st))
		}
	}
	return nil
}

// TestBatchProgramAgainstApply: random batches (several algorithms, keys
// named twice, every role, fail-open policies, stale, incompatible and
// unsafe-clock states) through rate-batch-v2.lua and through modelBatch:
// the same commit flag, the same reply per key, the same states, and
// no change at all to a key that is not written.
func TestBatchProgramAgainstApply(t *testing.T) { batchProgramAgainstApply(t, newEnv(t), 1, 6) }

// TestWideBatchProgramAgainstApply: the same with requests of 33 to 64 keys,
// above the program's WIDE bound, where it finds the keys naming the same
// hash through tables instead of scanning.
func TestWideBatchProgramAgainstApply(t *testing.T) { batchProgramAgainstApply(t, newEnv(t), 33, 64) }

// batchProgramAgainstApply runs random batches of minKeys to maxKeys keys.
func batchProgramAgainstApply(t *testing.T, e *env, minKeys, maxKeys int) {
	rng, n := seededRand(t, 6, 300, 80, "batches")
	windows := []time.Duration{7 * time.Millisecond, time.Second, time.Minute, time.Hour}
	roles := []limiter.Role{limiter.RoleOrdinary, limiter.RoleOrdinary, limiter.RoleOrdinary, limiter.RoleShadow, limiter.RoleQuota, limiter.RoleQuota, limiter.RoleCheck, limiter.RoleProbe, limiter.RoleQuotaProbe}
	for it := 0; it < n; it++ {
		pols := randomPolicies(t, rng, "bp", 3, windows)
		reqs := make([]batchReq, minKeys+rng.IntN(maxKeys-minKeys+1))
		for j := range reqs {
			p := pols[rng.IntN(len(pols))]
			reqs[j] = batchReq{p: p, sub: subjectOf("bp" + strconv.Itoa(rng.IntN(2))), cost: 1 + rng.Int64N(p.MaxCost()), role: roles[rng.IntN(len(roles))]}
		}
		now := e.serverNow()
		states, before := e.seedRandom(rng, reqs, now)
		// No deadline, one ahead, or one already past: past it nothing
		// changes and the reply is the expired one.
		var keys, args []string
		bpols := make([]*limiter.Policy, len(reqs))
		for j, r := range reqs {
			keys = append(keys, keyOf(r.p, r.sub))
			args = batchArgs(args, r.p, r.cost, r.role)
			bpols[j] = r.p
		}
		past := false
		var dl int64
		switch rng.IntN(4) {
		case 1:
			dl = now + time.Hour.Milliseconds()
		case 2:
			dl = now - 1 - rng.Int64N(1000)
			past = true
		}
		committed, got, err := e.execBatch(keys, oneCall(args, len(keys), dl), bpols)
		if past {
			if !errors.Is(err, lua.ErrExpired) {
				t.Fatalf("batch %d past its deadline: %v", it, err)
			}
			for key := range states {
				if after := e.dump(key); !reflect.DeepEqual(after, before[key]) {
					t.Fatalf("batch %d: a key changed past the deadline", it)
				}
			}
			continue
		}
		if err != nil {
			t.Fatalf("batch %d: %v", it, err)
		}
		wantCommit, want, final := modelBatch(states, reqs, got[0].ServerNowMs)
		if committed != wantCommit || !reflect.DeepEqual(got, want) {
			t.Fatalf("batch %d: %+v\n states %+v\n lua commit %v %+v\n go  commit %v %+v", it, reqs, states, committed, got, wantCommit, want)
		}
		if err := e.checkWritten(states, final, before); err != nil {
			t.Fatalf("batch %d: %v", it, err)
		}
	}
}

// TestBatchArity: a wrong argument count, or a group field that does not
// describe the keys (a missing or short field, counts that do not add up to
// the keys, a deadline out of range), is an error reply, which the store
// reports as Incompatible (never an allow), and writes nothing.
func TestBatchArity(t *testing.T) {
	e := newEnv(t)
	p := fixed(t, "arity", 5, time.Hour)
	key := keyOf(p, subjectOf("arity"))
	args := batchArgs(nil, p, 1, limiter.RoleOrdinary)
	group := string(lua.AppendGroupEntry(nil, 1, 0))
	for _, a := range [][]string{args, {group}, append(append([]string{}, args...), "x", group), nil,
		oneCall(args, 2, 0), oneCall(args, 0, 0), append(append([]string{}, args...), group[:9]), oneCall(args, 1, -1), oneCall(args, 1, 1<<53)} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := e.store.execBatch(ctx, []string{key}, a).Error()
		cancel()
		if err == nil {
			t.Fatalf("arguments %q accepted", a)
		}
		if o := classify(p, err); o.Kind != limiter.Incompatible {
			t.Fatalf("classified %v", o.Kind)
		}
	}
	// Invalid fields: INVALID for that key, a failure that blocks the rest.
	big := fixed(t, "arity", 5, time.Hour)
	bad := batchArgs(nil, big, 6, limiter.RoleOrdinary) // cost above the limit
	good := batchArgs(nil, p, 1, limiter.RoleOrdinary)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	other := keyOf(p, subjectOf("arity2"))
	if committed, r := e.runBatchKeys([]string{key, other}, append(bad, good...), []*limiter.Policy{big, p}); committed || r[0].Status != algorithm.StatusInvalid {
		t.Fatalf("with an INVALID key: committed %v, %+v", committed, r[0])
	}
	if e.do("EXISTS", key, other) != int64(0) {
		t.Fatal("wrote state")
	}

	// A request that raises in the program (here a packed field cut short)
	// fails alone: the request after it in the group is evaluated and
	// commits.
	short := []string{args[0][:20]}
	all := append(append(append([]string{}, short...), good...), string(lua.AppendGroupEntry(nil, 1, 0))+string(lua.AppendGroupEntry(nil, 1, 0)))
	grp, err := e.store.execBatch(ctx, []string{key, other}, all).ToArray()
	if err != nil || len(grp) != 2 {
		t.Fatalf("group with a failing request: %v %v", grp, err)
	}
	first, _ := grp[0].ToArray()
	_, ferr := lua.ParseBatchReplyV2([]*limiter.Policy{p}, replyValues(nil, first), make([]algorithm.Reply, 1))
	if !errors.As(ferr, new(*lua.FailedError)) || failedOutcome(p, ferr).Kind != limiter.Incompatible {
		t.Fatalf("the failing request: %v, want a FailedError classified Incompatible", ferr)
	}
	second, _ := grp[1].ToArray()
	committed, err := lua.ParseBatchReplyV2([]*limiter.Policy{p}, replyValues(nil, second), make([]algorithm.Reply, 1))
	if err != nil || !committed {
		t.Fatalf("the request after it: committed %v, %v", committed, err)
	}
	if e.do("EXISTS", key) != int64(0) || e.do("EXISTS", other) != int64(1) {
		t.Fatal("the failing request wrote, or the one after it did not")
	}
}

// TestOneCommandPerRequest counts what one Evaluate of n limits costs Redis:
// one FCALL whatever n is.
func TestOneCommandPerRequest(t *testing.T) {
	e := newEnv(t, redistest.Local())
	p := fixed(t, "onecmd", 1000, farWindow)
	for _, n := range []int{1, 2, 4, 8} {
		batch := make([]limiter.Request, n)
		for i := range batch {
			batch[i] = limiter.Request{Policy: p, Subject: subjectOf(fmt.Sprintf("onecmd-%d-%d", n, i)), Cost: 1}
		}
		out := make([]limiter.Outcome, n)
		e.store.Evaluate(context.Background(), batch, out)
		e.do("CONFIG", "RESETSTAT")
		for range 10 {
			e.store.Evaluate(context.Background(), batch, out)
		}
		v := e.do("INFO", "commandstats").(string)
		calls := commandCalls(v)
		if calls["fcall"] != 10 || calls["evalsha"] != 0 || calls["eval"] != 0 || calls["function|load"] != 0 {
			t.Fatalf("%d limits: commandstats %v, want 10 FCALL for 10 requests", n, calls)
		}
		if calls["time"] != 10 {
			t.Fatalf("%d limits: TIME called %d times for 10 requests", n, calls["time"])
		}
	}
}

// TestExpirySetOncePerWindow: a window's state gets its expiry on the first
// write of the window only (every later write would set the same instant:
// it keeps its expiry); a token bucket's moves with every write. Ten
// allowed requests on one subject: one expiry set (Redis's keyspace event
// "expire", which SET with PX and PEXPIRE raise and SET with KEEPTTL does
// not) for a fixed or sliding window, ten for a bucket, and the key still
// expires at the window's end plus the grace.
func TestExpirySetOncePerWindow(t *testing.T) {
	e := newEnv(t, redistest.Local())
	e.do("CONFIG", "SET", "notify-keyspace-events", "Eg")
	expires := watchExpireEvents(t, e.srv.Addr())
	for _, tc := range []struct {
		p    *limiter.Policy
		want int64
	}{
		{fixed(t, "once.fw", 1000, farWindow), 1},
		{sliding(t, "once.sw", 1000, 24*time.Hour), 1},
		{bucket(t, "once.tb", 1000, 1, time.Hour), 10},
	} {
		sub := subjectOf("once-" + tc.p.ID())
		key := keyOf(tc.p, sub)
		e.do("DEL", key)
		batch := []limiter.Request{{Policy: tc.p, Subject: sub, Cost: 1}}
		out := make([]limiter.Outcome, 1)
		e.store.Evaluate(context.Background(), []limiter.Request{{Policy: tc.p, Subject: subjectOf("warm"), Cost: 1}}, out) // loads the script
		var last limiter.Decision
		for i := range 10 {
			e.store.Evaluate(context.Background(), batch, out)
			if out[0].Kind != limiter.Evaluated || !out[0].Decision.Allowed {
				t.Fatalf("%s request %d: %+v", tc.p.ID(), i, out[0])
			}
			last = out[0].Decision
		}
		if got := expires(key, tc.want); got != tc.want {
			t.Fatalf("%s: %d expiries set for 10 requests in one window, want %d", tc.p.ID(), got, tc.want)
		}
		if pt := e.pttl(key); pt <= 0 {
			t.Fatalf("%s: PTTL %d after the writes: the key has no expiry", tc.p.ID(), pt)
		} else if tc.p.Algorithm() == limiter.FixedWindow {
			// Expires at the window's end plus the grace, counted now.
			want := last.ResetAt.UnixMilli() + tc.p.CleanupGraceMillis() - time.Now().UnixMilli()
			if pt > want+50 || pt < want-1000 {
				t.Fatalf("%s: PTTL %d, want about %d", tc.p.ID(), pt, want)
			}
		}
	}
}

// watchExpireEvents subscribes to the "expire" keyspace events of the
// server at addr (notify-keyspace-events must hold "Eg") and returns a
// function that reports how many a key has had, once at least want have
// come or a second has passed, and 100 ms with no more.
func watchExpireEvents(t *testing.T, addr string) func(key string, want int64) int64 {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	counts := map[string]int64{}
	ready := make(chan struct{})
	go func() {
		err := c.Receive(ctx, c.B().Subscribe().Channel("__keyevent@0__:expire").Build(), func(m rueidis.PubSubMessage) {
			mu.Lock()
			counts[m.Message]++
			mu.Unlock()
		})
		if ctx.Err() == nil {
			t.Logf("subscribe: %v", err)
		}
	}()
	// The subscription is in place once a key's expiry is seen.
	go func() {
		for ctx.Err() == nil {
			c.Do(ctx, c.B().Arbitrary("SET").Keys("rate:{watch}:probe").Args("1", "PX", "60000").Build())
			mu.Lock()
			n := counts["rate:{watch}:probe"]
			mu.Unlock()
			if n > 0 {
				close(ready)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	t.Cleanup(func() { cancel(); c.Close() })
	select {
	case <-ready:
	case <-time.After(5 * time.Second):
		t.Fatal("no keyspace event within 5s")
	}
	return func(key string, want int64) int64 {
		deadline := time.Now().Add(time.Second)
		last, since := int64(-1), time.Now()
		for {
			mu.Lock()
			n := counts[key]
			mu.Unlock()
			if n != last {
				last, since = n, time.Now()
			}
			if (n >= want || time.Now().After(deadline)) && time.Since(since) >= 100*time.Millisecond {
				return n
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// TestRefundProgram: rate-refund-v2.lua gives back exactly the cost a batch
// took, per algorithm, only to the state that took it, never above the
// capacity, and reports 0 when there is nothing to give back.
func TestRefundProgram(t *testing.T) {
	e := newEnv(t)
	for _, p := range []*limiter.Policy{fixed(t, "rf.fw", 5, time.Hour), sliding(t, "rf.sw", 5, time.Hour), bucket(t, "rf.tb", 5, 1, time.Hour), cellRate(t, "rf.gc", 5, 1, time.Hour), slidingLog(t, "rf.sl", 5, time.Hour)} {
		sub := subjectOf("refund")
		key := keyOf(p, sub)
		e.do("DEL", key)
		_, r1 := e.runBatch([]batchReq{{p: p, sub: sub, cost: 2}})
		before := e.hash(key)
		_, r2 := e.runBatch([]batchReq{{p: p, sub: sub, cost: 3}})
		if r1[0].Status != algorithm.StatusAllowed || r2[0].Status != algorithm.StatusAllowed {
			t.Fatalf("%s: %+v %+v", p.ID(), r1, r2)
		}
		if n := e.refund(p, key, 3, r2[0].EffectiveNowMs); n != 1 {
			t.Fatalf("%s: refund replied %d", p.ID(), n)
		}
		after := e.hash(key)
		// The counters are back to what the first batch left; last (and
		// the token bucket's refill time and remainder, which carry the
		// time that passed) stay as the second wrote them.
		for _, f := range []string{"a", "b", "c", "l"} {
			if p.Algorithm() == limiter.TokenBucket && f != "a" {
				continue // the refill time and sub-token remainder moved on
			}
			if after[f] != before[f] {
				t.Fatalf("%s: field %s is %s after the refund, %s before the batch", p.ID(), f, after[f], before[f])
			}
		}
		// Never above the capacity, never below zero.
		e.refund(p, key, 5, r2[0].EffectiveNowMs)
		if p.Algorithm() == limiter.SlidingLog {
			// The first batch's hit too (its own entry, or the same one).
			e.refund(p, key, 5, r1[0].EffectiveNowMs)
		}
		h := e.hash(key)
		switch p.Algorithm() {
		case limiter.SlidingLog:
			if h["b"] != "0" || h["c"] != "0" || h["l"] != "" {
				t.Fatalf("%s: over-refunded log %v", p.ID(), h)
			}
		case limiter.TokenBucket:
			if h["a"] != "5" || h["c"] != "0" {
				t.Fatalf("%s: over-refunded bucket %v", p.ID(), h)
			}
		case limiter.GCRA:
			// The TAT goes back no further than the write it refunds.
			if h["b"] != h["last"] || h["c"] != "0" {
				t.Fatalf("%s: over-refunded TAT %v", p.ID(), h)
			}
		default:
			if h["b"] != "0" {
				t.Fatalf("%s: over-refunded count %v", p.ID(), h)
			}
		}
		// Another window (or an older bucket state): nothing to give back.
		if p.Algorithm() != limiter.TokenBucket && p.Algorithm() != limiter.GCRA {
			if n := e.refund(p, key, 1, r2[0].EffectiveNowMs+2*p.WindowMillis()); n != 0 {
				t.Fatalf("%s: refunded into another window", p.ID())
			}
		} else if n := e.refund(p, key, 1, r2[0].EffectiveNowMs+1); n != 0 {
			t.Fatalf("%s: refunded a bucket written before the batch", p.ID())
		}
		e.do("DEL", key)
		if n := e.refund(p, key, 1, r2[0].EffectiveNowMs); n != 0 || e.do("EXISTS", key) != int64(0) {
			t.Fatalf("%s: refund of a missing key", p.ID())
		}
	}
}

// calendarPolicy is a calendar fixed window of limit per unit in zone.
func calendarPolicy(t testing.TB, id string, limit int64, unit calendar.Unit, zone string) *limiter.Policy {
	t.Helper()
	loc, err := time.LoadLocation(zone)
	if err != nil {
		t.Fatal(err)
	}
	return limitertest.Policy(t, limiter.PolicySpec{ID: id, Algorithm: limiter.FixedWindow,
		Params: limiter.FixedWindowParams{Limit: limit, Window: time.Hour, Calendar: &calendar.Calendar{Unit: unit, Location: loc}}})
}

// calendarRandom is a calendar window of a random unit and zone, for the
// random differential tests.
func calendarRandom(t testing.TB, rng *rand.Rand, id string, limit int64) *limiter.Policy {
	t.Helper()
	units := []calendar.Unit{calendar.Minute, calendar.Hour, calendar.Day, calendar.Week, calendar.Month, calendar.Year}
	zones := []string{"UTC", "Europe/Berlin", "Asia/Kolkata", "America/New_York", "Australia/Lord_Howe"}
	return calendarPolicy(t, id, limit, units[rng.IntN(len(units))], zones[rng.IntN(len(zones))])
}

// runAt runs one key of p with the calendar periods computed around nowMs
// (the Go side's estimate of Redis's clock) instead of the wall clock.
func (e *env) runAt(p *limiter.Policy, key string, cost, nowMs int64) algorithm.Reply {
	e.t.Helper()
	_, r := e.runBatchKeys([]string{key}, batchArgsAt(nil, p, cost, limiter.RoleOrdinary, nowMs), []*limiter.Policy{p})
	return r[0]
}

// TestCalendarRedisClockElsewhere: Go computes the periods around its own
// clock, Redis decides with TIME. A Redis clock one period ahead of Go's
// (or behind it) counts into the period that holds Redis's clock, exactly
// as algorithm.Apply at Redis's time; two periods away is CLOCK_UNSAFE and
// writes nothing.
func TestCalendarRedisClockElsewhere(t *testing.T) {
	e := newEnv(t)
	for _, zone := range []string{"UTC", "Asia/Kolkata"} {
		p := calendarPolicy(t, "cal.clock", 3, calendar.Minute, zone)
		key := keyOf(p, subjectOf("calendar clock "+zone))
		for _, c := range []struct {
			name   string
			shift  int64 // Go's now minus Redis's, in ms
			unsafe bool
		}{
			{"Go in the same period", 0, false},
			{"Redis one period ahead", -60_000, false},
			{"Redis one period behind", 60_000, false},
			{"Redis two periods ahead", -120_000, true},
			{"Redis two periods behind", 120_000, true},
		} {
			e.do("DEL", key)
			var st algorithm.State
			for i := range 4 {
				before := e.dump(key)
				goNow := e.serverNow() + c.shift
				got := e.runAt(p, key, 1, goNow)
				b := p.Calendar().Neighbours(goNow)
				if got.ServerNowMs < b[0] || got.ServerNowMs >= b[3] {
					// Redis's clock is outside the three periods sent.
					if got.Status != algorithm.StatusClockUnsafe {
						t.Fatalf("%s %s step %d: Redis at %d outside [%d, %d): %+v, want CLOCK_UNSAFE", zone, c.name, i, got.ServerNowMs, b[0], b[3], got)
					}
					if after := e.dump(key); !reflect.DeepEqual(after, before) {
						t.Fatalf("%s %s step %d: CLOCK_UNSAFE wrote state", zone, c.name, i)
					}
					continue
				}
				if c.unsafe {
					t.Logf("%s %s step %d: a minute boundary passed during the call; checked as parity", zone, c.name, i)
				}
				next, want, write := algorithm.Apply(st, got.ServerNowMs, p, 1)
				if got != want {
					t.Fatalf("%s %s step %d:\n lua %+v\n go  %+v", zone, c.name, i, got, want)
				}
				start, end := p.Calendar().Period(got.ServerNowMs)
				if got.ResetAtMs != end {
					t.Fatalf("%s %s step %d: reset at %d, the period of Redis's clock ends at %d", zone, c.name, i, got.ResetAtMs, end)
				}
				if write {
					st = next
					h := e.hash(key)
					if h["a"] != strconv.FormatInt(start, 10) || !reflect.DeepEqual(h, stateHash(next)) {
						t.Fatalf("%s %s step %d: hash %v, want window id %d (%v)", zone, c.name, i, h, start, stateHash(next))
					}
				}
			}
		}
	}
}

// TestCalendarParity: calendar windows of every unit against algorithm.Apply,
// from random states in the periods around now, alone and among other
// keys, through the store too: its decision resets at the period's end.
func TestCalendarParity(t *testing.T) {
	e := newEnv(t)
	rng, n := seededRand(t, 11, 120, 40, "calendar iterations")
	for i := range n {
		p := calendarRandom(t, rng, "cal.par", 1+rng.Int64N(6))
		key := keyOf(p, subjectOf("calendar parity "+strconv.Itoa(i%5)))
		var st algorithm.State
		if rng.IntN(4) > 0 {
			st = randomState(rng, p, e.serverNow())
		}
		k := 1 + rng.IntN(3)
		checkParityAmong(t, e, p, key, st, 1+rng.Int64N(p.MaxCost()), rng.IntN(k), k)
	}
	p := calendarPolicy(t, "cal.store", 2, calendar.Month, "Europe/Berlin")
	sub := subjectOf("calendar store")
	e.do("DEL", keyOf(p, sub))
	for i, want := range []bool{true, true, false} {
		o := e.evaluate(p, sub, 1)
		if o.Kind != limiter.Evaluated || o.Decision.Allowed != want {
			t.Fatalf("store step %d: %+v", i, o)
		}
		_, end := p.Calendar().Period(time.Now().UnixMilli())
		if got := o.Decision.ResetAt.UnixMilli(); got != end {
			t.Fatalf("store step %d: reset at %d, the month ends at %d", i, got, end)
		}
		if !want && o.Decision.RetryAfter.Milliseconds() > end-time.Now().UnixMilli()+1000 {
			t.Fatalf("store step %d: retry after %v, the month ends in %dms", i, o.Decision.RetryAfter, end-time.Now().UnixMilli())
		}
	}
	if pt, left := e.pttl(keyOf(p, sub)), p.Calendar(); pt <= 0 || left == nil {
		t.Fatalf("PTTL %d", pt)
	} else if _, end := left.Period(time.Now().UnixMilli()); pt > end-time.Now().UnixMilli()+p.CleanupGraceMillis()+50 {
		t.Fatalf("PTTL %d beyond the month's end + grace", pt)
	}
}

// TestCalendarInvalidExtension: a calendar extension on another algorithm,
// missing, too long, or with boundaries out of order or range makes the
// key INVALID and writes nothing.
func TestCalendarInvalidExtension(t *testing.T) {
	e := newEnv(t)
	p := calendarPolicy(t, "cal.inv", 5, calendar.Minute, "UTC")
	key := keyOf(p, subjectOf("calendar invalid"))
	now := e.serverNow()
	good := batchArgsAt(nil, p, 1, limiter.RoleOrdinary, now)
	if len(good[0]) != packedLen+calendarLen || good[0][1]&flagCalendar == 0 {
		t.Fatalf("packed %q", good[0])
	}
	b := p.Calendar().Neighbours(now)
	ext := func(v [4]float64) []string {
		f := batchFields{alg: byte(limiter.FixedWindow), flags: flagCalendar, rev: 1, limit: 5,
			p2: float64(time.Hour.Milliseconds()), grace: float64(p.CleanupGraceMillis()), maxRegression: float64(p.MaxClockRegressionMillis()), cost: 1}
		a := f.args()
		for _, x := range v {
			a[0] += string(binaryFloat(x))
		}
		return a
	}
	fb := [4]float64{float64(b[0]), float64(b[1]), float64(b[2]), float64(b[3])}
	if got := ext(fb); !reflect.DeepEqual(got, good) {
		t.Fatalf("the test's encoding %q, the store's %q", got, good)
	}
	tb := bucket(t, "cal.inv", 5, 1, time.Second)
	tbArgs := batchArgs(nil, tb, 1, limiter.RoleOrdinary)
	tbArgs[0] = string([]byte{tbArgs[0][0], tbArgs[0][1] | flagCalendar}) + tbArgs[0][2:] + good[0][packedLen:]
	bad := map[string][]string{
		"missing":           {good[0][:packedLen]},
		"short":             {good[0][:len(good[0])-1]},
		"long":              {good[0] + "x"},
		"out of order":      ext([4]float64{fb[0], fb[2], fb[1], fb[3]}),
		"empty period":      ext([4]float64{fb[0], fb[1], fb[1], fb[3]}),
		"negative":          ext([4]float64{-1, fb[1], fb[2], fb[3]}),
		"fractional":        ext([4]float64{fb[0], fb[1] + 0.5, fb[2], fb[3]}),
		"above 2^53":        ext([4]float64{fb[0], fb[1], fb[2], 1 << 54}),
		"on a token bucket": tbArgs,
	}
	for name, args := range bad {
		e.do("DEL", key)
		pol := p
		if name == "on a token bucket" {
			pol = tb
		}
		committed, r := e.runBatchKeys([]string{key}, args, []*limiter.Policy{pol})
		if committed || r[0].Status != algorithm.StatusInvalid {
			t.Errorf("%s: committed %v, %+v, want INVALID", name, committed, r[0])
		}
		if e.do("EXISTS", key) != int64(0) {
			t.Errorf("%s: wrote state", name)
		}
	}
}

// TestCalendarRefund: the refund program gives a cost back to the period
// the batch took it in, and to no other.
func TestCalendarRefund(t *testing.T) {
	e := newEnv(t)
	p := calendarPolicy(t, "cal.refund", 5, calendar.Hour, "Asia/Kolkata")
	sub := subjectOf("calendar refund")
	key := keyOf(p, sub)
	e.do("DEL", key)
	_, r := e.runBatch([]batchReq{{p: p, sub: sub, cost: 3}})
	if r[0].Status != algorithm.StatusAllowed {
		t.Fatalf("%+v", r)
	}
	at := r[0].EffectiveNowMs
	start, end := p.Calendar().Period(at)
	// Another period (the next one, the previous one): nothing.
	if n := e.refund(p, key, 3, end); n != 0 || e.hash(key)["b"] != "3" {
		t.Fatalf("refund into the next period: %d, hash %v", n, e.hash(key))
	}
	if n := e.refund(p, key, 3, start-1); n != 0 || e.hash(key)["b"] != "3" {
		t.Fatalf("refund into the previous period: %d, hash %v", n, e.hash(key))
	}
	// The period the batch took it in: given back.
	if n := e.refund(p, key, 2, at); n != 1 || e.hash(key)["b"] != "1" || e.hash(key)["a"] != strconv.FormatInt(start, 10) {
		t.Fatalf("refund: %d, hash %v", n, e.hash(key))
	}
}

func binaryFloat(v float64) []byte { return binary.BigEndian.AppendUint64(nil, math.Float64bits(v)) }

// TestCalendarStoreUsesRedisClockEstimate: the store computes the periods
// it sends around its estimate of Redis's clock (clockOffset). An estimate
// an hour ahead, for a calendar minute, sends periods that do not hold
// Redis's TIME: CLOCK_UNSAFE, nothing written; with the estimate learnt
// again from TIME the same request is decided.
func TestCalendarStoreUsesRedisClockEstimate(t *testing.T) {
	e := newEnv(t)
	p := calendarPolicy(t, "cal.offset", 5, calendar.Minute, "UTC")
	sub := subjectOf("calendar offset")
	e.do("DEL", keyOf(p, sub))
	off := &e.store.offsets[0]
	cur, prev := off.cur.Load(), off.prev.Load()
	off.cur.Store(0)
	off.prev.Store(0)
	now := e.store.local.ms(time.Now())
	// Ahead, not behind: a deadline converted with an estimate behind
	// Redis's clock would already be past.
	off.sample(now, now+time.Hour.Milliseconds())
	o := e.evaluate(p, sub, 1)
	off.cur.Store(cur)
	off.prev.Store(prev)
	if o.Kind != limiter.Unavailable || o.Category != limiter.CategoryClockUnsafe {
		t.Fatalf("periods around an estimate an hour ahead: %v/%s (%v), want unavailable/clock_unsafe", o.Kind, o.Category, o.Err)
	}
	if e.do("EXISTS", keyOf(p, sub)) != int64(0) {
		t.Fatal("CLOCK_UNSAFE wrote state")
	}
	if o := e.evaluate(p, sub, 1); o.Kind != limiter.Evaluated || !o.Decision.Allowed || o.Decision.Remaining != 4 {
		t.Fatalf("with the estimate restored: %+v", o)
	}
}

// TestCalendarWithPenalty: a calendar window with a penalty box carries
// both extensions (penalty first) and the program agrees with algorithm.Apply
// on a block that outlasts its period (the next period's first request is
// BLOCKED until the block ends) and on an ended block in a new period
// (allowed, the period's count from zero). An offence within a period and
// its probes are the store suite's "calendar year with a penalty box".
func TestCalendarWithPenalty(t *testing.T) {
	e := newEnv(t)
	spec := calendarPolicy(t, "cal.pen", 2, calendar.Minute, "Asia/Kolkata").Spec()
	spec.Penalty = limiter.Penalty{Duration: 3 * time.Minute, MaxDuration: time.Hour, Decay: time.Hour}
	p := limitertest.Policy(t, spec)
	packed := batchArgs(nil, p, 1, limiter.RoleOrdinary)[0]
	if len(packed) != packedLen+penaltyLen+calendarLen || packed[1] != flagPenalty|flagCalendar {
		t.Fatalf("packed %d bytes, flags %d: want both extensions", len(packed), packed[1])
	}
	key := keyOf(p, subjectOf("calendar penalty"))
	for _, c := range []struct {
		name   string
		state  func(now, prev int64) algorithm.State
		status algorithm.Status
	}{
		{"a block from the previous period", func(now, prev int64) algorithm.State {
			st := stateOf(p, now-1000, prev, 2, 0)
			st.PenaltyUntilMs, st.PenaltyLevel = now+2*60_000, 1
			return st
		}, algorithm.StatusBlocked},
		{"an ended block, a new period", func(now, prev int64) algorithm.State {
			st := stateOf(p, now-1000, prev, 2, 0)
			st.PenaltyUntilMs, st.PenaltyLevel = now-500, 1
			return st
		}, algorithm.StatusAllowed},
	} {
		now := e.serverNow()
		start, _ := p.Calendar().Period(now)
		prev, _ := p.Calendar().Period(start - 1)
		got := checkParityAmong(t, e, p, key, c.state(now, prev), 1, 0, 1)
		if got.Status != c.status {
			t.Fatalf("%s: %+v, want %s", c.name, got, c.status)
		}
		if c.status == algorithm.StatusBlocked && got.ResetAtMs < now+2*60_000-1000 {
			t.Fatalf("%s: reset at %d, before the block ends", c.name, got.ResetAtMs)
		}
	}
}

// TestOffenceOfARequestThatRaises: an offence is written only once every
// key of its request has been evaluated. A request whose first key is an
// offence (a denial of a hash that exists) and whose second key raises in
// the program fails alone and leaves the first key's hash as it was; the
// same offence without the failing key is written.
func TestOffenceOfARequestThatRaises(t *testing.T) {
	e := newEnv(t)
	spec := fixed(t, "pen.raise", 1, time.Hour).Spec()
	spec.Penalty = limiter.Penalty{Duration: time.Minute, MaxDuration: time.Hour, Decay: time.Hour}
	p := limitertest.Policy(t, spec)
	key, other := keyOf(p, subjectOf("pen.raise")), keyOf(p, subjectOf("pen.raise.other"))
	if got := e.run(p, key, 1); got.Status != algorithm.StatusAllowed {
		t.Fatalf("first hit: %+v", got)
	}
	before := e.hash(key)
	pttl := e.pttl(key)

	args := batchArgs(nil, p, 1, limiter.RoleOrdinary)
	short := batchArgs(nil, p, 1, limiter.RoleOrdinary)
	short[0] = short[0][:20] // cut short: the program raises on this key
	grp, err := e.store.execBatch(t.Context(), []string{key, other},
		oneCall(append(append([]string{}, args...), short...), 2, 0)).ToArray()
	if err != nil || len(grp) != 1 {
		t.Fatalf("request: %v %v", grp, err)
	}
	vals, _ := grp[0].ToArray()
	policies := []*limiter.Policy{p, p}
	if _, err := lua.ParseBatchReplyV2(policies, replyValues(nil, vals), make([]algorithm.Reply, 2)); !errors.As(err, new(*lua.FailedError)) {
		t.Fatalf("the request: %v, want it failed", err)
	}
	if after := e.hash(key); !reflect.DeepEqual(after, before) {
		t.Fatalf("a request that raised wrote its offence: %v, was %v", after, before)
	}
	if got := e.pttl(key); got > pttl {
		t.Fatalf("a request that raised raised the expiry: %d ms, was %d ms", got, pttl)
	}

	// The same offence in a request that does not raise is written.
	msgs, err := e.execOne(t.Context(), []string{key}, args, 0)
	if err != nil {
		t.Fatal(err)
	}
	replies := make([]algorithm.Reply, 1)
	if _, err := lua.ParseBatchReplyV2(policies[:1], replyValues(nil, msgs), replies); err != nil || replies[0].Status != algorithm.StatusDenied {
		t.Fatalf("offence: %+v, %v", replies[0], err)
	}
	pu, pn := e.hash(key)["pu"], e.hash(key)["pn"]
	if pu != strconv.FormatInt(replies[0].EffectiveNowMs+time.Minute.Milliseconds(), 10) || pn != "1" {
		t.Fatalf("offence written as pu %q pn %v, want the block's end and level 1", pu, pn)
	}
	if got := e.pttl(key); got <= pttl {
		t.Fatalf("the offence did not raise the expiry to cover its decay: %d ms, was %d ms", got, pttl)
	}
}

// TestRunOverMGETChunk: a run of more keys than one MGET names
// (MGET_CHUNK, 1,000) reads every key's state, the later chunks' too. A
// run of 1,200 one-key requests, twice: every key of the second run sees
// the first run's count (remaining 998 of 1,000), and a key holding
// another type among the later chunk is STATE_INCOMPATIBLE, never
// overwritten, both times.
func TestRunOverMGETChunk(t *testing.T) {
	e := newEnv(t, redistest.Local())
	p := fixed(t, "chunk", 1000, farWindow)
	const n, foreign = 1200, 1100
	keys, args := make([]string, n), make([]string, 0, n+1)
	var groupField []byte
	for i := range keys {
		r := limiter.Request{Policy: p, Subject: subjectOf(fmt.Sprintf("chunk-%d", i)), Cost: 1}
		keys[i] = string(requestKey(nil, &r))
		args = append(args, batchArgs(nil, p, 1, limiter.RoleOrdinary)[0])
		groupField = lua.AppendGroupEntry(groupField, 1, 0)
	}
	args = append(args, string(groupField))
	e.do("RPUSH", keys[foreign], "not a state")
	for run, want := range []int64{999, 998} {
		replies, err := e.store.execBatch(context.Background(), keys, args).ToArray()
		if err != nil || len(replies) != n {
			t.Fatalf("run %d: %d replies, %v", run, len(replies), err)
		}
		for i, r := range replies {
			v, err := r.AsIntSlice()
			if err != nil || len(v) != 6 {
				t.Fatalf("run %d, key %d: reply %v, %v", run, i, v, err)
			}
			switch {
			case i == foreign && (v[0] != 0 || v[2] != int64(algorithm.StatusStateIncompatible)):
				t.Fatalf("run %d: the list's key replied %v, want STATE_INCOMPATIBLE, not committed", run, v)
			case i != foreign && (v[0] != 1 || v[2] != int64(algorithm.StatusAllowed) || v[3] != want):
				t.Fatalf("run %d, key %d: reply %v, want committed, ALLOWED, remaining %d", run, i, v, want)
			}
		}
	}
	if typ := e.do("TYPE", keys[foreign]); typ != "list" {
		t.Fatalf("the list's key is a %v now", typ)
	}
}
