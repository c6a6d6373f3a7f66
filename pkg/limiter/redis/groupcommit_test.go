package redis

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/internal/polltest"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/algorithm"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/memory"
	"github.com/envoy-rls/envoy-rls/pkg/lua"
)

// The group-commit suite: rate-batch-v2.lua given several requests in one
// run (a group) must answer each exactly as if the requests had run alone,
// one after the other, in the group's order; and the Store must group
// concurrent calls without changing any decision.

// gReq is one request of a group sent straight to the program.
type gReq struct {
	keys []batchReq
	// bad is 1 + the index of a key sent with a cost above its ceiling (the
	// program answers INVALID for it); 0 for none.
	bad int
	// expired: sent with a deadline (in Redis's clock) long past.
	expired bool
	// ahead: sent with a deadline an hour ahead (no effect).
	ahead bool
	// corrupt: its first key's packed numbers are cut short, so that the
	// program raises while evaluating it.
	corrupt bool
}

// String names the request's keys by policy, subject (its digest's
// first bytes), cost and role, for failure messages.
func (q gReq) String() string {
	var b strings.Builder
	b.WriteString("{")
	for i, r := range q.keys {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s/%x cost %d %s", r.p.ID(), r.sub[:2], r.cost, r.role)
		if q.bad == i+1 {
			b.WriteString(" INVALID")
		}
	}
	b.WriteString("}")
	switch {
	case q.expired:
		b.WriteString(" past its deadline")
	case q.corrupt:
		b.WriteString(" corrupt")
	}
	return b.String()
}

// gResult is what one request of a group answered, parsed as the store
// parses it.
type gResult struct {
	committed bool
	replies   []algorithm.Reply
	err       error
}

// execGroup runs reqs as one group (one EVALSHA) and returns each
// request's parsed reply and the group's serverNow.
func (e *env) execGroup(reqs []gReq) ([]gResult, int64) {
	e.t.Helper()
	var keys, args []string
	var hdr []byte
	now := e.serverNow()
	for _, q := range reqs {
		for i, r := range q.keys {
			keys = append(keys, keyOf(r.p, r.sub))
			cost := r.cost
			if q.bad == i+1 {
				cost = r.p.Ceiling() + 1
			}
			args = batchArgs(args, r.p, cost, r.role)
			if q.corrupt && i == 0 {
				args[len(args)-1] = args[len(args)-1][:20]
			}
		}
		var dl int64
		switch {
		case q.expired:
			dl = 1
		case q.ahead:
			dl = now + time.Hour.Milliseconds()
		}
		hdr = lua.AppendGroupEntry(hdr, len(q.keys), dl)
	}
	args = append(args, string(hdr))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	msgs, err := e.store.execBatch(ctx, keys, args).ToArray()
	if err != nil {
		e.t.Fatalf("rate-batch-v2, group of %d: %v", len(reqs), err)
	}
	if len(msgs) != len(reqs) {
		e.t.Fatalf("rate-batch-v2: %d replies for a group of %d", len(msgs), len(reqs))
	}
	out := make([]gResult, len(reqs))
	serverNow := int64(-1)
	for j, q := range reqs {
		vals, err := msgs[j].ToArray()
		if err != nil {
			e.t.Fatalf("request %d of the group: reply is not an array: %v", j, err)
		}
		pols := make([]*limiter.Policy, len(q.keys))
		for i, r := range q.keys {
			pols[i] = r.p
		}
		res := gResult{replies: make([]algorithm.Reply, len(q.keys))}
		res.committed, res.err = lua.ParseBatchReplyV2(pols, replyValues(nil, vals), res.replies)
		var expired *lua.ExpiredError
		switch {
		case res.err == nil:
			serverNow = res.replies[0].ServerNowMs
		case errors.As(res.err, &expired):
			serverNow = expired.ServerNowMs
		}
		out[j] = res
	}
	if serverNow < 0 {
		e.t.Fatal("no request of the group replied serverNow")
	}
	for j, r := range out {
		if r.err == nil && r.replies[0].ServerNowMs != serverNow {
			e.t.Fatalf("request %d read TIME %d, another %d: one TIME per group", j, r.replies[0].ServerNowMs, serverNow)
		}
	}
	return out, serverNow
}

// modelCall is what the program must answer for one request (its keys,
// bad as in gReq) run alone on states at now, and the states after it:
// modelBatch, with an INVALID key blocking its request whatever its
// policy's failure mode (its flags, which carry the role and the failure
// mode, are not trusted).
func modelCall(states map[string]algorithm.State, keys []batchReq, bad int, now int64) (bool, []algorithm.Reply, map[string]algorithm.State) {
	if bad == 0 {
		return modelBatch(states, keys, now)
	}
	cur := maps.Clone(states)
	offences, charged := map[string]algorithm.State{}, map[string]algorithm.State{}
	replies := make([]algorithm.Reply, len(keys))
	for i, r := range keys {
		if i == bad-1 {
			replies[i] = algorithm.Reply{Status: algorithm.StatusInvalid, ServerNowMs: now, EffectiveNowMs: now}
			continue
		}
		k := keyOf(r.p, r.sub)
		next, reply, uncommitted, write := algorithm.Check(cur[k], now, r.p, r.cost)
		if !r.role.Consumes() && r.p.ChargeAlways() {
			// A check or probe of a charge: never written, never charged.
			reply, write = uncommitted, false
		}
		if !write {
			reply = recordOffence(cur, offences, states[k].Exists, k, r, next, reply, uncommitted)
		}
		charges := (&limiter.Request{Policy: r.p, Role: r.role}).Charges()
		if write && r.role.Consumes() {
			// Tentative: a later key naming this hash sees it; the request
			// does not commit, so the reply is the one before the cost.
			cur[k] = next
		}
		replies[i] = reply
		if reply.Status == algorithm.StatusAllowed && !charges {
			replies[i] = uncommitted
		}
		if write && charges {
			// A charge is written whatever the request commits.
			charged[k] = next
		}
	}
	final := maps.Clone(states)
	maps.Copy(final, charged)
	return false, replies, withOffences(final, offences)
}

// modelGroup is modelCall applied to each request of reqs in order, all at
// now (one TIME per group): an expired request replies ErrExpired and a
// corrupt one a FailedError, and neither changes a state.
func modelGroup(states map[string]algorithm.State, reqs []gReq, now int64) ([]gResult, map[string]algorithm.State) {
	out := make([]gResult, len(reqs))
	for j, q := range reqs {
		switch {
		case q.expired:
			out[j].err = &lua.ExpiredError{ServerNowMs: now}
		case q.corrupt:
			out[j].err = &lua.FailedError{}
		default:
			out[j].committed, out[j].replies, states = modelCall(states, q.keys, q.bad, now)
		}
	}
	return out, states
}

// sameResult compares a request's answer with the model's.
func sameResult(got, want gResult) error {
	switch {
	case want.err != nil:
		var expired *lua.ExpiredError
		if errors.As(want.err, &expired) {
			var g *lua.ExpiredError
			if !errors.As(got.err, &g) || g.ServerNowMs != expired.ServerNowMs {
				return fmt.Errorf("got %v, want expired at %d", got.err, expired.ServerNowMs)
			}
			return nil
		}
		if !errors.As(got.err, new(*lua.FailedError)) {
			return fmt.Errorf("got %v (committed %v), want a failed request", got.err, got.committed)
		}
		return nil
	case got.err != nil:
		return fmt.Errorf("got error %v, want committed %v %+v", got.err, want.committed, want.replies)
	case got.committed != want.committed || !reflect.DeepEqual(got.replies, want.replies):
		return fmt.Errorf("\n got  committed %v %+v\n want committed %v %+v", got.committed, got.replies, want.committed, want.replies)
	}
	return nil
}

// groupKeys lists the distinct keys of reqs.
func groupKeys(reqs []gReq) []string {
	var keys []string
	seen := map[string]bool{}
	for _, q := range reqs {
		for _, r := range q.keys {
			if k := keyOf(r.p, r.sub); !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	return keys
}

// checkStates compares every key's hash with the model's state: the hash
// the state says, or no key at all for a state that does not exist.
func (e *env) checkStates(keys []string, states map[string]algorithm.State) error {
	e.t.Helper()
	for _, k := range keys {
		st := states[k]
		if !st.Exists {
			if n := e.do("EXISTS", k); n != int64(0) {
				return fmt.Errorf("key %x written, the model wrote nothing: %v", k[len(k)-8:], e.hash(k))
			}
			continue
		}
		if h := e.hash(k); !reflect.DeepEqual(h, stateHash(st)) {
			return fmt.Errorf("key %x: hash %v, want %v", k[len(k)-8:], h, stateHash(st))
		}
		// The key expires when the model's state says (a window keeps the
		// expiry its first write set; a bucket's moves with each write),
		// never sooner: an early expiry would forget consumption. PEXPIRE
		// counts from Redis's clock when it runs (on Redis 7.0, up to the
		// run's duration after the TIME the group read; elsewhere within
		// TIME's millisecond floor), so it may be somewhat later.
		before := e.serverNow()
		pt := e.pttl(k)
		after := e.serverNow()
		if pt < st.ExpiresAtMs-after-2 || pt > st.ExpiresAtMs-before+1000 {
			return fmt.Errorf("key %s: PTTL %d, want about %d (TIME %d..%d, model %+v)", k, pt, st.ExpiresAtMs-before, before, after, st)
		}
	}
	return nil
}

// Outcomes of a request of a group, as the table writes them.
const (
	denied    = 0 // evaluated, not committed
	committed = 1
	expired   = 2 // past its deadline: not evaluated
	failed    = 3 // raised in the program: not evaluated
)

// TestGroupNoPartialConsumption: groups of requests that share keys, run
// as one program run, against the model of the same requests run one
// after the other. A request that does not commit consumes none of its
// keys (its other keys stay as they were), and each later request of the
// group sees exactly what the earlier ones committed: the same replies,
// field by field, and the same hashes. Each case is run for a fixed
// window, a sliding window and a token bucket of the same limit (5, for an
// hour: nothing rolls or refills a whole unit during the test), and says
// by hand which requests commit, so that the model is checked too.
func TestGroupNoPartialConsumption(t *testing.T) {
	e := newEnv(t)
	type key struct {
		name string
		cost int64
		role limiter.Role
	}
	type req struct {
		keys    []key
		bad     int
		expired bool
		ahead   bool
		corrupt bool
	}
	k := func(name string, cost int64) key { return key{name, cost, limiter.RoleOrdinary} }
	kr := func(name string, cost int64, role limiter.Role) key { return key{name, cost, role} }
	cases := []struct {
		name string
		reqs []req
		want []int // per request: committed, denied, expired or failed
		// used: units of each key consumed after the group (the limit is 5).
		used map[string]int64
	}{
		{
			name: "a denied request consumes none of its keys",
			reqs: []req{
				{keys: []key{k("A", 1), k("C", 4)}},
				{keys: []key{k("A", 3), k("C", 2)}}, // A allows, C denies: A untouched
				{keys: []key{k("A", 4)}},            // fits only if the one before took nothing
				{keys: []key{k("C", 1)}},
			},
			want: []int{committed, denied, committed, committed},
			used: map[string]int64{"A": 5, "C": 5},
		},
		{
			name: "the same key twice in one request",
			reqs: []req{
				{keys: []key{k("A", 3), k("A", 3)}}, // the second sees the first's 3: denied, nothing taken
				{keys: []key{k("A", 2), k("A", 3)}},
				{keys: []key{k("A", 1)}},
			},
			want: []int{denied, committed, denied},
			used: map[string]int64{"A": 5},
		},
		{
			name: "the same key twice in a denied request, with another key",
			reqs: []req{
				{keys: []key{k("A", 2), k("B", 1), k("A", 2), k("B", 5)}}, // B's second denies
				{keys: []key{k("A", 5), k("B", 5)}},
			},
			want: []int{denied, committed},
			used: map[string]int64{"A": 5, "B": 5},
		},
		{
			name: "the same key in several requests of one group",
			reqs: []req{
				{keys: []key{k("A", 4)}},
				{keys: []key{k("A", 2)}}, // sees the 4 taken before it
				{keys: []key{k("A", 1), k("B", 2)}},
				{keys: []key{k("B", 3), k("A", 1)}}, // A is full now: B not taken
				{keys: []key{k("B", 3)}},
			},
			want: []int{committed, denied, committed, denied, committed},
			used: map[string]int64{"A": 5, "B": 5},
		},
		{
			name: "roles: quota, shadow and check keys",
			reqs: []req{
				{keys: []key{kr("Q1", 5, limiter.RoleQuota)}},
				// Q1 denies but Q2 allows: commits; the shadow key takes its
				// cost, the check key none, the denied quota key none.
				{keys: []key{k("A", 2), kr("Q1", 1, limiter.RoleQuota), kr("Q2", 1, limiter.RoleQuota), kr("S", 5, limiter.RoleShadow), kr("K", 3, limiter.RoleCheck)}},
				// Every quota key denies: blocked; A and the shadow key untouched.
				{keys: []key{k("A", 1), kr("Q1", 1, limiter.RoleQuota), kr("S", 1, limiter.RoleShadow)}},
				// A denied shadow key and an allowed check key do not block.
				{keys: []key{k("A", 3), kr("S", 1, limiter.RoleShadow), kr("K", 5, limiter.RoleCheck)}},
				{keys: []key{kr("K", 5, limiter.RoleCheck), kr("Q2", 4, limiter.RoleQuota)}},
			},
			want: []int{committed, committed, denied, committed, committed},
			used: map[string]int64{"A": 5, "Q1": 5, "Q2": 5, "S": 5, "K": 0},
		},
		{
			name: "probe keys block as ordinary ones and take nothing",
			reqs: []req{
				{keys: []key{k("A", 5)}},
				// A is full: its probe denies and blocks the request; B untouched.
				{keys: []key{k("B", 2), kr("A", 1, limiter.RoleProbe)}},
				// A probe with room allows, takes nothing; B commits.
				{keys: []key{kr("P", 1, limiter.RoleProbe), k("B", 2)}},
				// A probe sees the tentative cost of an earlier key of its
				// request: C would be full, so the request is blocked.
				{keys: []key{k("C", 5), kr("C", 1, limiter.RoleProbe)}},
				// A later key does not see a probe's cost.
				{keys: []key{kr("C", 5, limiter.RoleProbe), k("C", 5)}},
				{keys: []key{kr("P", 5, limiter.RoleProbe), k("B", 1)}},
			},
			want: []int{committed, denied, committed, denied, committed, committed},
			used: map[string]int64{"A": 5, "B": 3, "C": 5, "P": 0},
		},
		{
			name: "quota probe keys take part as quota keys and take nothing",
			reqs: []req{
				{keys: []key{kr("Q1", 5, limiter.RoleQuota)}},
				// Q1's probe denies, Q2 allows: commits, Q2 takes 1.
				{keys: []key{k("A", 1), kr("Q1", 1, limiter.RoleQuotaProbe), kr("Q2", 1, limiter.RoleQuota)}},
				// Every quota key denies, the probe among them: blocked.
				{keys: []key{k("A", 1), kr("Q1", 1, limiter.RoleQuotaProbe), kr("Q1", 1, limiter.RoleQuota)}},
				// Q2's probe allows (nothing taken), Q1 denies: commits.
				{keys: []key{k("A", 1), kr("Q1", 1, limiter.RoleQuota), kr("Q2", 4, limiter.RoleQuotaProbe)}},
			},
			want: []int{committed, committed, denied, committed},
			used: map[string]int64{"A": 2, "Q1": 5, "Q2": 1},
		},
		{
			name: "a request past its deadline",
			reqs: []req{
				{keys: []key{k("A", 2)}},
				{keys: []key{k("A", 1), k("B", 1)}, expired: true}, // nothing evaluated, nothing written
				{keys: []key{k("A", 3)}, ahead: true},
				{keys: []key{k("B", 5)}},
				{keys: []key{k("A", 1)}, expired: true},
			},
			want: []int{committed, expired, committed, committed, expired},
			used: map[string]int64{"A": 5, "B": 5},
		},
		{
			name: "every request past its deadline",
			reqs: []req{
				{keys: []key{k("A", 1)}, expired: true},
				{keys: []key{k("A", 1), k("B", 1)}, expired: true},
			},
			want: []int{expired, expired},
			used: map[string]int64{"A": 0, "B": 0},
		},
		{
			name: "a request with an INVALID key",
			reqs: []req{
				{keys: []key{k("A", 2)}},
				{keys: []key{k("A", 1), k("X", 1), k("B", 1)}, bad: 2}, // X INVALID: nothing taken
				{keys: []key{k("A", 3)}},
				{keys: []key{k("B", 5), k("X", 5)}},
				{keys: []key{k("A", 1), kr("K", 1, limiter.RoleCheck)}, bad: 2}, // even an INVALID check key blocks
			},
			want: []int{committed, denied, committed, committed, denied},
			used: map[string]int64{"A": 5, "B": 5, "X": 5, "K": 0},
		},
		{
			name: "a request that raises in the program",
			reqs: []req{
				{keys: []key{k("A", 2)}},
				{keys: []key{k("A", 1), k("B", 1)}, corrupt: true},
				{keys: []key{k("A", 3), k("B", 5)}},
			},
			want: []int{committed, failed, committed},
			used: map[string]int64{"A": 5, "B": 5},
		},
	}
	algs := []struct {
		name string
		p    func(id string) *limiter.Policy
	}{
		{"fixed", func(id string) *limiter.Policy { return fixed(t, id, 5, time.Hour) }},
		{"sliding", func(id string) *limiter.Policy { return sliding(t, id, 5, time.Hour) }},
		{"bucket", func(id string) *limiter.Policy { return bucket(t, id, 5, 1, time.Hour) }},
		{"gcra", func(id string) *limiter.Policy { return cellRate(t, id, 5, 1, time.Hour) }},
		{"log", func(id string) *limiter.Policy { return slidingLog(t, id, 5, time.Hour) }},
	}
	for ci, tc := range cases {
		for _, alg := range algs {
			t.Run(fmt.Sprintf("%s/%s", tc.name, alg.name), func(t *testing.T) {
				parent := e.t
				e.t = t
				defer func() { e.t = parent }()
				pols := map[string]*limiter.Policy{}
				sub := func(name string) limiter.SubjectDigest {
					return subjectOf(fmt.Sprintf("group-%d-%s-%s-%d", ci, alg.name, name, time.Now().UnixNano()))
				}
				subs := map[string]limiter.SubjectDigest{}
				reqs := make([]gReq, len(tc.reqs))
				for j, r := range tc.reqs {
					q := gReq{bad: r.bad, expired: r.expired, ahead: r.ahead, corrupt: r.corrupt}
					for _, kk := range r.keys {
						if pols[kk.name] == nil {
							pols[kk.name] = alg.p("g." + alg.name)
							subs[kk.name] = sub(kk.name)
						}
						q.keys = append(q.keys, batchReq{p: pols[kk.name], sub: subs[kk.name], cost: kk.cost, role: kk.role})
					}
					reqs[j] = q
				}
				keys := groupKeys(reqs)
				for _, key := range keys {
					e.do("DEL", key)
				}
				got, now := e.execGroup(reqs)
				want, final := modelGroup(map[string]algorithm.State{}, reqs, now)
				for j := range reqs {
					if err := sameResult(got[j], want[j]); err != nil {
						t.Errorf("request %d of the group: %v", j, err)
					}
					var g int
					switch {
					case errors.Is(got[j].err, lua.ErrExpired):
						g = expired
					case errors.As(got[j].err, new(*lua.FailedError)):
						g = failed
					case got[j].err != nil:
						g = -1
					case got[j].committed:
						g = committed
					}
					if g != tc.want[j] {
						t.Errorf("request %d: answered %d (%v), the case says %d", j, g, got[j].err, tc.want[j])
					}
				}
				if err := e.checkStates(keys, final); err != nil {
					t.Error(err)
				}
				// What each key has left, by hand: a key consumed by a
				// request that did not commit would show here.
				for name, used := range tc.used {
					out := make([]limiter.Outcome, 1)
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					e.store.Evaluate(ctx, []limiter.Request{{Policy: pols[name], Subject: subs[name], Cost: 1, Role: limiter.RoleCheck}}, out)
					cancel()
					if out[0].Kind != limiter.Evaluated || out[0].Decision.Remaining != 5-used {
						t.Errorf("key %s: %+v, want %d remaining", name, out[0], 5-used)
					}
				}
			})
		}
	}
}

// TestGroupDifferential: a seeded random sequence of requests (fixed
// windows, sliding windows and token buckets of several limits, a few hot
// subjects, every role, keys named twice, now and then a request past its
// deadline) sent in groups of random size through the program, against
// the same requests one by one through the model (at the TIME the group
// read) and through the memory store (its clock set to that TIME): the
// same replies, the same outcomes, and at the end the same states. The
// seed is logged.
func TestGroupDifferential(t *testing.T) {
	e := newEnv(t)
	rng, n := seededRand(t, 17, 300, 60, "groups")
	clk := limitertest.NewClock(time.Now())
	mem, err := memory.New(memory.Config{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	run := time.Now().UnixNano()
	var pols []*limiter.Policy
	for i, limit := range []int64{3, 7, 20} {
		pols = append(pols,
			fixed(t, fmt.Sprintf("gd.fw%d", i), limit, time.Hour),
			sliding(t, fmt.Sprintf("gd.sw%d", i), limit, time.Hour),
			bucket(t, fmt.Sprintf("gd.tb%d", i), limit, 1, time.Minute),
			cellRate(t, fmt.Sprintf("gd.gc%d", i), limit, 2, time.Minute),
			slidingLog(t, fmt.Sprintf("gd.sl%d", i), limit, time.Minute))
	}
	// Three hot subjects, new ones every ten groups (the limits fill up
	// within an hour's window, after which every request is a denial).
	subs := make([]limiter.SubjectDigest, 3)
	roles := []limiter.Role{limiter.RoleOrdinary, limiter.RoleOrdinary, limiter.RoleOrdinary, limiter.RoleOrdinary,
		limiter.RoleShadow, limiter.RoleQuota, limiter.RoleQuota, limiter.RoleCheck, limiter.RoleProbe, limiter.RoleQuotaProbe}
	states := map[string]algorithm.State{}
	var all []gReq
	var commits, refusals, expiries int
	for it := 0; it < n; it++ {
		if it%10 == 0 {
			for i := range subs {
				subs[i] = subjectOf(fmt.Sprintf("gd-%d-%d-%d", run, it, i))
			}
		}
		reqs := make([]gReq, 1+rng.IntN(8))
		for j := range reqs {
			q := gReq{keys: make([]batchReq, 1+rng.IntN(4)), expired: rng.IntN(20) == 0}
			for i := range q.keys {
				if i > 0 && rng.IntN(5) == 0 {
					q.keys[i] = q.keys[rng.IntN(i)] // a key named twice
					q.keys[i].cost = 1 + rng.Int64N(q.keys[i].p.MaxCost())
					continue
				}
				p := pols[rng.IntN(len(pols))]
				q.keys[i] = batchReq{p: p, sub: subs[rng.IntN(len(subs))], cost: 1 + rng.Int64N(max(1, p.MaxCost()/2)), role: roles[rng.IntN(len(roles))]}
			}
			reqs[j] = q
		}
		got, now := e.execGroup(reqs)
		want, next := modelGroup(states, reqs, now)
		for j := range reqs {
			if err := sameResult(got[j], want[j]); err != nil {
				t.Fatalf("group %d, request %d of %d: %v\n group %v", it, j, len(reqs), err, reqs)
			}
			switch {
			case reqs[j].expired:
				expiries++
			case got[j].committed:
				commits++
			default:
				refusals++
			}
		}
		// The memory store, one request at a time at the group's TIME.
		clk.Set(time.UnixMilli(now))
		for j, q := range reqs {
			if q.expired {
				continue
			}
			batch := make([]limiter.Request, len(q.keys))
			for i, r := range q.keys {
				batch[i] = limiter.Request{Policy: r.p, Subject: r.sub, Cost: r.cost, Role: r.role}
			}
			out := make([]limiter.Outcome, len(batch))
			mem.Evaluate(context.Background(), batch, out)
			for i, r := range q.keys {
				w := algorithm.OutcomeFromReply(r.p, got[j].replies[i], limiter.SourceMemory)
				w.Decision.Consumed = got[j].committed && w.Decision.Allowed && r.role.Consumes()
				if !sameOutcome(out[i], w) {
					t.Fatalf("group %d, request %d, key %d (%s %s cost %d): memory %+v, program %+v", it, j, i, r.p.ID(), r.role, r.cost, out[i], w)
				}
			}
		}
		states = next
		all = append(all, reqs...)
	}
	if err := e.checkStates(groupKeys(all), states); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d requests in %d groups: %d committed, %d not, %d past their deadline", len(all), n, commits, refusals, expiries)
	if commits == 0 || refusals == 0 {
		t.Fatal("the sequence did not both commit and refuse: it tests nothing")
	}
}

// sameOutcome compares the decision fields of two outcomes (not their
// source or error text).
func sameOutcome(a, b limiter.Outcome) bool {
	if a.Kind != b.Kind {
		return false
	}
	if a.Kind != limiter.Evaluated {
		return true
	}
	x, y := a.Decision, b.Decision
	return x.Allowed == y.Allowed && x.Limit == y.Limit && x.Remaining == y.Remaining && x.RetryAfter == y.RetryAfter &&
		x.ResetAt.Equal(y.ResetAt) && x.Consumed == y.Consumed && x.PolicyID == y.PolicyID
}

// newMetrics is a Metrics on a registry of its own, returned with it.
func newMetrics(t *testing.T) (*prometheus.Registry, *Metrics) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	return reg, m
}

// histogramOf returns the histogram named name in reg (one series).
func histogramOf(t testing.TB, reg *prometheus.Registry, name string) *dto.Histogram {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetHistogram()
		}
	}
	t.Fatalf("no %s in the registry", name)
	return nil
}

// groupSizes reads the group-size histogram of reg: the number of program
// runs, the requests they evaluated, and the runs of exactly one request.
func groupSizes(t *testing.T, reg *prometheus.Registry) (runs, requests uint64, single uint64) {
	t.Helper()
	h := histogramOf(t, reg, "envoy_rls_redis_group_requests")
	single = runsAtMost(t, reg, 1)
	return h.GetSampleCount(), uint64(h.GetSampleSum()), single
}

// waitCount reads the wait histogram's count: one observation per call
// sent.
func waitCount(t *testing.T, reg *prometheus.Registry) uint64 {
	t.Helper()
	return histogramOf(t, reg, "envoy_rls_redis_group_wait_seconds").GetSampleCount()
}

// TestGroupCommitExact: 64 goroutines call one Store concurrently on a few
// hot subjects (a fixed window, a token bucket, and calls holding both on
// one subject): exactly the limit is admitted for each subject, a call
// that is denied consumes nothing of its other limit, and the store's
// group-size histogram shows runs that evaluated several calls, the sizes
// adding up to exactly the calls made (none sent twice, none lost).
func TestGroupCommitExact(t *testing.T) {
	reg, m := newMetrics(t)
	e := newEnvWith(t, Config{Timeout: 10 * time.Second, Metrics: m})
	const callers, perCaller, hot = 64, 30, 4
	run := time.Now().UnixNano()
	fw := fixed(t, "gc.fw", 60, farWindow)
	tb := bucket(t, "gc.tb", 90, 1, 24*time.Hour)
	tight := fixed(t, "gc.tight", 50, farWindow)
	loose := bucket(t, "gc.loose", 200, 1, 24*time.Hour)
	subs := make([]limiter.SubjectDigest, hot)
	for i := range subs {
		subs[i] = subjectOf(fmt.Sprintf("gc-%d-%d", run, i))
	}
	// Each goroutine's calls go round the hot subjects, starting at its own.
	perSubject := make([][]atomic.Int64, 3)
	for i := range perSubject {
		perSubject[i] = make([]atomic.Int64, hot)
	}
	ok, no := limitertest.Hammer(t, e.store, callers, perCaller, func(g, i int) []limiter.Request {
		kind, s := (g+i)%3, (g+i/3)%hot
		switch kind {
		case 0:
			return []limiter.Request{{Policy: fw, Subject: subs[s], Cost: 1}}
		case 1:
			return []limiter.Request{{Policy: tb, Subject: subs[s], Cost: 1}}
		default:
			return []limiter.Request{{Policy: tight, Subject: subs[s], Cost: 1}, {Policy: loose, Subject: subs[s], Cost: 1}}
		}
	}, func(g, i int) {
		perSubject[(g+i)%3][(g+i/3)%hot].Add(1)
	})
	if t.Failed() {
		return
	}
	const calls = callers * perCaller
	if ok+no != calls {
		t.Fatalf("%d answers for %d calls", ok+no, calls)
	}
	limits := []int64{60, 90, 50}
	for kind, l := range limits {
		for s := range hot {
			if got := perSubject[kind][s].Load(); got != l {
				t.Errorf("policy kind %d, subject %d: %d admitted, want exactly %d", kind, s, got, l)
			}
		}
	}
	// The loose bucket took one token per admitted call only: a call that
	// its tight window denied took nothing.
	for s := range hot {
		out := e.evaluate(loose, subs[s], 1)
		if want := int64(200 - 50 - 1); out.Kind != limiter.Evaluated || out.Decision.Remaining != want {
			t.Errorf("subject %d: the loose bucket after the run: %+v, want %d remaining", s, out, want)
		}
	}
	runs, requests, single := groupSizes(t, reg)
	t.Logf("%d calls: %d admitted; %d program runs, %d of one call", calls, ok, runs, single)
	// hot extra calls above (one each) also ran.
	if sent := uint64(calls) + hot; requests != sent {
		t.Errorf("the runs evaluated %d calls, %d were made: a call was sent twice or lost", requests, sent)
	}
	if w := waitCount(t, reg); w != uint64(calls)+hot {
		t.Errorf("the wait histogram counted %d calls, %d were made", w, uint64(calls)+hot)
	}
	if runs >= requests || single == runs {
		t.Errorf("no program run evaluated more than one call (%d runs for %d calls): group commit is not active", runs, requests)
	}
}

// TestGroupCommitOff: with GroupMaxKeys 1 every call runs alone: as many
// program runs as calls, each of one call, and still exactly the limit
// admitted.
func TestGroupCommitOff(t *testing.T) {
	reg, m := newMetrics(t)
	s := newEnvWith(t, Config{Timeout: 10 * time.Second, Metrics: m, GroupMaxKeys: 1}).store
	const callers, perCaller = 32, 10
	p := fixed(t, "gc.off", 100, farWindow)
	sub := subjectOf(fmt.Sprintf("gc-off-%d", time.Now().UnixNano()))
	ok, no := limitertest.Hammer(t, s, callers, perCaller, func(int, int) []limiter.Request {
		return []limiter.Request{{Policy: p, Subject: sub, Cost: 1}}
	}, nil)
	if ok != 100 || ok+no != callers*perCaller {
		t.Errorf("%d admitted of %d, want exactly 100", ok, ok+no)
	}
	runs, requests, single := groupSizes(t, reg)
	if runs != callers*perCaller || requests != runs || single != runs {
		t.Errorf("group commit off: %d runs, %d calls evaluated, %d runs of one call; want %d of each", runs, requests, single, callers*perCaller)
	}
}

// TestGroupCallKeyBound: the program's group field counts a request's keys
// in 16 bits (lua.MaxRequestKeys). A call of more limits is refused before
// it is sent (Unavailable, CategoryInvalidRequest, an error naming the
// bound) and writes nothing, instead of going out with a wrapped count (0,
// or 1) that the program rejects as a malformed group.
func TestGroupCallKeyBound(t *testing.T) {
	e := newEnv(t)
	p := fixed(t, "bound", 10, farWindow)
	run := time.Now().UnixNano()
	for _, n := range []int{lua.MaxRequestKeys + 1, lua.MaxRequestKeys + 2} {
		batch := make([]limiter.Request, n)
		for i := range batch {
			batch[i] = limiter.Request{Policy: p, Subject: subjectOf(fmt.Sprintf("bound-%d-%d-%d", run, n, i)), Cost: 1}
		}
		out := make([]limiter.Outcome, n)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		e.store.Evaluate(ctx, batch, out)
		cancel()
		for i := range out {
			if out[i].Kind != limiter.Unavailable || out[i].Category != limiter.CategoryInvalidRequest ||
				out[i].Err == nil || !strings.Contains(out[i].Err.Error(), strconv.Itoa(lua.MaxRequestKeys)) {
				t.Fatalf("%d limits in one call: request %d: %+v, want Unavailable (invalid request) naming the bound %d", n, i, out[i], lua.MaxRequestKeys)
			}
		}
		if e.do("EXISTS", keyOf(p, batch[0].Subject), keyOf(p, batch[n-1].Subject)) != int64(0) {
			t.Fatalf("%d limits in one call: refused, yet written", n)
		}
	}
}

// committerState reads the slot's committer: runs in progress and calls
// waiting.
func committerState(s *Store) (running, queued int) {
	c := s.committerOf(0)
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.running, len(c.queue)
}

// waitCommitter polls s's committer until cond holds, for at most ten
// seconds.
func waitCommitter(t *testing.T, s *Store, what string, cond func(running, queued int) bool) {
	t.Helper()
	polltest.Eventually(t, 10*time.Second, time.Millisecond, what, func() error {
		if r, q := committerState(s); !cond(r, q) {
			return fmt.Errorf("%d runs in progress, %d calls waiting", r, q)
		}
		return nil
	})
}

// evaluateAsync makes the call s.Evaluate(batch, out), with a deadline d
// from when it starts, in a goroutine of its own, counted in wg.
func evaluateAsync(wg *sync.WaitGroup, s *Store, d time.Duration, batch []limiter.Request, out []limiter.Outcome) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		s.Evaluate(ctx, batch, out)
	}()
}

// TestGroupQueuedPastDeadline: while Redis is stopped, the GroupInFlight
// first calls are sent and wait for their answer; the calls behind them
// wait in the slot's queue. Those whose deadline passes there are
// Unavailable (deadline), never sent: they leave the queue, no program run
// carries them, nothing counts them. The two in flight commit once Redis
// resumes, and the slot is idle again (no run, no call left waiting).
func TestGroupQueuedPastDeadline(t *testing.T) {
	reg, m := newMetrics(t)
	e := newEnvWith(t, Config{Timeout: 20 * time.Second, Metrics: m, GroupInFlight: 2}, redistest.Local())
	srv := e.srv
	p := fixed(t, "queued", 1000, farWindow)
	sub := subjectOf(fmt.Sprintf("queued-%d", time.Now().UnixNano()))
	e.mustDecide(p, subjectOf("queued warm-up"))
	runs0, _, _ := groupSizes(t, reg)

	srv.Pause()
	defer srv.Resume()
	// Two calls with a roomy deadline: sent at once, each in its own run.
	var sent sync.WaitGroup
	sentOut := make([][]limiter.Outcome, 2)
	for i := range sentOut {
		sentOut[i] = make([]limiter.Outcome, 1)
		evaluateAsync(&sent, e.store, 15*time.Second, []limiter.Request{{Policy: p, Subject: sub, Cost: 1}}, sentOut[i])
		want := i + 1
		waitCommitter(t, e.store, "a call in flight", func(r, q int) bool { return r == want && q == 0 })
	}
	// Calls behind them, with short deadlines: they wait, then give up.
	const waiting = 12
	var queued sync.WaitGroup
	queuedOut := make([][]limiter.Outcome, waiting)
	for i := range queuedOut {
		queuedOut[i] = make([]limiter.Outcome, 2)
		evaluateAsync(&queued, e.store, 200*time.Millisecond,
			[]limiter.Request{{Policy: p, Subject: sub, Cost: 1}, {Policy: p, Subject: subjectOf("queued other"), Cost: 1}}, queuedOut[i])
	}
	queued.Wait()
	for i, out := range queuedOut {
		for j, o := range out {
			if o.Kind != limiter.Unavailable || o.Category != limiter.CategoryDeadline || o.Err == nil || !strings.Contains(o.Err.Error(), "not sent") {
				t.Errorf("queued call %d, request %d: %v/%s (%v), want Unavailable (deadline), not sent", i, j, o.Kind, o.Category, o.Err)
			}
		}
	}
	if r, q := committerState(e.store); r != 2 || q != 0 {
		t.Errorf("after the queued calls gave up: %d runs in progress, %d calls waiting; want the 2 sent, none waiting", r, q)
	}
	if runs, _, _ := groupSizes(t, reg); runs != runs0+2 {
		t.Errorf("%d program runs while Redis was stopped, want the 2 sent at once", runs-runs0)
	}

	srv.Resume()
	sent.Wait()
	for i, out := range sentOut {
		if o := out[0]; o.Kind != limiter.Evaluated || !o.Decision.Allowed || !o.Decision.Consumed {
			t.Errorf("sent call %d after the resume: %v %+v (%v)", i, o.Kind, o.Decision, o.Err)
		}
	}
	waitCommitter(t, e.store, "the slot idle", func(r, q int) bool { return r == 0 && q == 0 })
	if h := e.hash(keyOf(p, sub)); h["b"] != "2" {
		t.Errorf("count %q, want 2: only the calls sent count (hash %v)", h["b"], h)
	}
	if e.do("EXISTS", keyOf(p, subjectOf("queued other"))) != int64(0) {
		t.Error("a call that was never sent wrote state")
	}
	if o := e.evaluate(p, sub, 1); o.Kind != limiter.Evaluated || o.Decision.Remaining != 997 {
		t.Errorf("a call after it all: %v %+v (%v), want 997 left", o.Kind, o.Decision, o.Err)
	}
}

// TestGroupCommitCluster: on a Redis Cluster, groups form per slot. 64
// goroutines on one Store send calls that span two slots (a roomy user
// limit on one, a tight tenant limit on the other) and calls of one slot:
// exactly the tenant's limit of split calls is admitted, and the user's
// count ends at exactly that (every split call the tenant refused had its
// user cost refunded); exactly the limit of the single-slot calls is
// admitted; runs held several calls, and the runs' sizes add up to exactly
// the slot calls made.
func TestGroupCommitCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster topology: skipped with -short")
	}
	c := redistest.StartCluster(t)
	reg, m := newMetrics(t)
	s := newStore(t, Config{Addrs: c.Addrs(), Mode: ModeCluster, Timeout: 10 * time.Second, Metrics: m})
	tagA, tagB := limiter.Tag{7}, limiter.Tag{8}
	for i := uint64(9); keySlot(tagKey(tagA)) == keySlot(tagKey(tagB)); i++ {
		binary.BigEndian.PutUint64(tagB[:], i)
	}
	run := time.Now().UnixNano()
	user := fixed(t, "gcc.user", 100000, farWindow)
	tenant := fixed(t, "gcc.tenant", 40, farWindow)
	single := bucket(t, "gcc.single", 50, 1, 24*time.Hour)
	ureq := limiter.Request{Policy: user, Subject: subjectOf(fmt.Sprintf("gcc-user-%d", run)), Cost: 1, Tag: tagA}
	treq := limiter.Request{Policy: tenant, Subject: subjectOf(fmt.Sprintf("gcc-tenant-%d", run)), Cost: 1, Tag: tagB}
	sreq := limiter.Request{Policy: single, Subject: subjectOf(fmt.Sprintf("gcc-single-%d", run)), Cost: 1, Tag: tagA}
	const callers, perCaller = 64, 8
	var split, alone atomic.Int64
	ok, no := limitertest.Hammer(t, s, callers, perCaller, func(g, i int) []limiter.Request {
		if (g+i)%2 == 0 {
			split.Add(1)
			return []limiter.Request{ureq, treq}
		}
		alone.Add(1)
		return []limiter.Request{sreq}
	}, nil)
	if t.Failed() {
		return
	}
	if ok != 40+50 || ok+no != callers*perCaller {
		t.Errorf("%d admitted of %d, want exactly 40 split calls and 50 single-slot ones", ok, ok+no)
	}
	ukey := string(requestKey(nil, &ureq))
	if b := stateView(c.MasterFor(ukey).MustDo("GET", ukey))["b"]; b != "40" {
		t.Errorf("the user's count is %s after the run, want 40: a refused split call kept its cost", b)
	}
	runs, requests, single1 := groupSizes(t, reg)
	t.Logf("%d split calls, %d single-slot calls: %d runs of %d slot calls, %d runs of one", split.Load(), alone.Load(), runs, requests, single1)
	if want := uint64(2*split.Load() + alone.Load()); requests != want {
		t.Errorf("the runs evaluated %d slot calls, %d were made", requests, want)
	}
	if runs >= requests {
		t.Errorf("no run held more than one call: %d runs, %d calls", runs, requests)
	}
}

// TestGroupCommitSpans: with tracing on, each program run is one span, a
// child of its first call's span and linked to the span of every other
// call it carried: under concurrent load every call's span is named by
// exactly one run (as parent or link), some runs carry several calls, and
// a run's envoy_rls.group_requests is the calls it names.
func TestGroupCommitSpans(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	s := newEnvWith(t, Config{Timeout: 10 * time.Second, TracerProvider: tp}).store
	p := fixed(t, "gspan", 100000, farWindow)
	sub := subjectOf(fmt.Sprintf("gspan-%d", time.Now().UnixNano()))
	const callers, perCaller = 32, 10
	var mu sync.Mutex
	calls := map[trace.SpanID]int{}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			out := make([]limiter.Outcome, 1)
			for range perCaller {
				ctx, span := tp.Tracer("test").Start(context.Background(), "call")
				ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				s.Evaluate(ctx, []limiter.Request{{Policy: p, Subject: sub, Cost: 1}}, out)
				cancel()
				span.End()
				if out[0].Kind != limiter.Evaluated || !out[0].Decision.Allowed {
					t.Errorf("%v: %v", out[0].Kind, out[0].Err)
				}
				mu.Lock()
				calls[span.SpanContext().SpanID()] = 0
				mu.Unlock()
			}
		}()
	}
	close(start)
	wg.Wait()
	runs, grouped := 0, 0
	for _, sp := range exp.GetSpans() {
		if sp.Name != batchSpanName {
			continue
		}
		runs++
		named := []trace.SpanID{sp.Parent.SpanID()}
		for _, l := range sp.Links {
			named = append(named, l.SpanContext.SpanID())
		}
		var n int64 = -1
		for _, kv := range sp.Attributes {
			if kv.Key == "envoy_rls.group_requests" {
				n = kv.Value.AsInt64()
			}
		}
		if n != int64(len(named)) {
			t.Errorf("a run's span says %d calls and names %d", n, len(named))
		}
		if n > 1 {
			grouped++
		}
		for _, id := range named {
			if _, ok := calls[id]; !ok {
				t.Errorf("a run names span %v, no call's", id)
				continue
			}
			calls[id]++
		}
	}
	for id, k := range calls {
		if k != 1 {
			t.Errorf("call span %v named by %d runs, want 1", id, k)
		}
	}
	t.Logf("%d calls, %d runs, %d of several calls", len(calls), runs, grouped)
	if len(calls) != callers*perCaller || grouped == 0 {
		t.Errorf("%d calls traced, %d runs of several calls: want %d calls and some grouped", len(calls), grouped, callers*perCaller)
	}
}

// TestGroupRunAfterCallerLeft: a call whose deadline passes after its
// group was taken into a run returns Indeterminate at once, and its caller
// owns its batch again (pkg/rls reuses it); the run, still waiting for
// Redis on a later call's deadline, must not read that batch when it ends.
// Redis is stopped: call A is sent alone; X (short deadline) and Y (long)
// queue behind it and are taken together when A gives up. X returns, its
// batch is cleared; the run then fails at Y's deadline. Every call is
// Indeterminate, the store does not crash, and after Redis resumes none
// of them counted (each ran past the deadline it carried).
func TestGroupRunAfterCallerLeft(t *testing.T) {
	e := newEnvWith(t, Config{Timeout: 20 * time.Second, GroupInFlight: 1}, redistest.Local())
	srv := e.srv
	p := fixed(t, "left", 1000, farWindow)
	sub := subjectOf(fmt.Sprintf("left-%d", time.Now().UnixNano()))
	e.mustDecide(p, subjectOf("left warm-up"))
	srv.Pause()
	defer srv.Resume()
	call := func(d time.Duration, batch []limiter.Request, out []limiter.Outcome, done chan<- struct{}) {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		e.store.Evaluate(ctx, batch, out)
		close(done)
	}
	aOut, xOut, yOut := make([]limiter.Outcome, 1), make([]limiter.Outcome, 1), make([]limiter.Outcome, 1)
	aDone, xDone, yDone := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go call(300*time.Millisecond, []limiter.Request{{Policy: p, Subject: sub, Cost: 1}}, aOut, aDone)
	waitCommitter(t, e.store, "A in flight", func(r, q int) bool { return r == 1 })
	xBatch := []limiter.Request{{Policy: p, Subject: sub, Cost: 1}}
	go call(1200*time.Millisecond, xBatch, xOut, xDone)
	go call(3*time.Second, []limiter.Request{{Policy: p, Subject: sub, Cost: 1}}, yOut, yDone)
	waitCommitter(t, e.store, "X and Y waiting", func(r, q int) bool { return q == 2 })
	<-aDone
	// A's run ended: X and Y are taken into the next run (none waits).
	waitCommitter(t, e.store, "X and Y taken", func(r, q int) bool { return r == 1 && q == 0 })
	<-xDone
	xBatch[0] = limiter.Request{} // the caller reuses its batch
	<-yDone
	for name, out := range map[string][]limiter.Outcome{"A": aOut, "X": xOut, "Y": yOut} {
		if out[0].Kind != limiter.Indeterminate {
			t.Errorf("call %s while Redis was stopped: %v (%v), want Indeterminate", name, out[0].Kind, out[0].Err)
		}
	}
	srv.Resume()
	waitCommitter(t, e.store, "the slot idle", func(r, q int) bool { return r == 0 && q == 0 })
	if o := e.evaluate(p, sub, 1); o.Kind != limiter.Evaluated || o.Decision.Remaining != 999 {
		t.Errorf("after the resume: %v %+v (%v), want 999 left: a call past its deadline counted", o.Kind, o.Decision, o.Err)
	}
}

// TestGroupDifferentialSeeded: random groups over random stored states
// (windows and counts on both sides of the limit, short and long windows,
// clocks behind and ahead, foreign revisions: STATE_INCOMPATIBLE and
// CLOCK_UNSAFE keys), fail-open and fail-closed policies, every role, now
// and then an INVALID key or a request past its deadline: each request's
// reply and the states after the group are the model's, applied request
// after request at the group's TIME. The seed is logged.
func TestGroupDifferentialSeeded(t *testing.T) {
	e := newEnv(t)
	rng, n := seededRand(t, 18, 200, 40, "seeded groups")
	windows := []time.Duration{7 * time.Millisecond, time.Second, time.Minute, time.Hour}
	roles := []limiter.Role{limiter.RoleOrdinary, limiter.RoleOrdinary, limiter.RoleOrdinary, limiter.RoleShadow, limiter.RoleQuota, limiter.RoleQuota, limiter.RoleCheck, limiter.RoleProbe, limiter.RoleQuotaProbe}
	run := time.Now().UnixNano()
	kinds := map[algorithm.Status]int{}
	for it := 0; it < n; it++ {
		pols := randomPolicies(t, rng, "gs", 4, windows)
		reqs := make([]gReq, 1+rng.IntN(6))
		for j := range reqs {
			q := gReq{keys: make([]batchReq, 1+rng.IntN(4)), expired: rng.IntN(15) == 0}
			for i := range q.keys {
				p := pols[rng.IntN(len(pols))]
				q.keys[i] = batchReq{p: p, sub: subjectOf(fmt.Sprintf("gs-%d-%d-%d", run, it, rng.IntN(2))), cost: 1 + rng.Int64N(p.MaxCost()), role: roles[rng.IntN(len(roles))]}
			}
			if rng.IntN(12) == 0 {
				q.bad = 1 + rng.IntN(len(q.keys))
			}
			reqs[j] = q
		}
		var keys []batchReq
		for _, q := range reqs {
			keys = append(keys, q.keys...)
		}
		states, before := e.seedRandom(rng, keys, e.serverNow())
		got, serverNow := e.execGroup(reqs)
		want, final := modelGroup(states, reqs, serverNow)
		for j := range reqs {
			if err := sameResult(got[j], want[j]); err != nil {
				t.Fatalf("group %d, request %d of %d: %v\n group %v\n states %+v", it, j, len(reqs), err, reqs, states)
			}
			if got[j].err == nil {
				for _, r := range got[j].replies {
					kinds[r.Status]++
				}
			}
		}
		if err := e.checkWritten(states, final, before); err != nil {
			t.Fatalf("group %d: %v", it, err)
		}
	}
	t.Logf("key statuses: %v", kinds)
	for _, st := range []algorithm.Status{algorithm.StatusAllowed, algorithm.StatusDenied, algorithm.StatusBlocked, algorithm.StatusStateIncompatible, algorithm.StatusClockUnsafe} {
		if kinds[st] == 0 && !testing.Short() {
			t.Errorf("no key answered %s: the sequence does not cover it", st)
		}
	}
}

// runsAtMost reads the group-size histogram of reg: the runs of at most n
// requests (n a bucket bound: 1, 2, 4, ...).
func runsAtMost(t *testing.T, reg *prometheus.Registry, n float64) uint64 {
	t.Helper()
	for _, b := range histogramOf(t, reg, "envoy_rls_redis_group_requests").GetBucket() {
		if b.GetUpperBound() == n {
			return b.GetCumulativeCount()
		}
	}
	t.Fatalf("no bucket %v in envoy_rls_redis_group_requests", n)
	return 0
}

// TestGroupMaxKeysCap: GroupMaxKeys bounds the keys of a run, counting
// every limit of every call in it, and a call is never split: with a cap of
// 4, concurrent calls of one limit share runs of at most 4 calls, and
// calls of 3 limits each run alone. Every call is answered and exactly the
// limits are admitted.
func TestGroupMaxKeysCap(t *testing.T) {
	srv := redistest.Standalone(t)
	for _, tc := range []struct {
		name  string
		width int // limits per call
	}{{"calls of one limit", 1}, {"calls of three limits", 3}} {
		t.Run(tc.name, func(t *testing.T) {
			reg, m := newMetrics(t)
			s := newStore(t, Config{Addrs: []string{srv.Addr()}, Timeout: 10 * time.Second, Metrics: m, GroupMaxKeys: 4})
			run := time.Now().UnixNano()
			ps := make([]*limiter.Policy, tc.width)
			for i := range ps {
				ps[i] = fixed(t, fmt.Sprintf("cap.%d.%d", tc.width, i), 80, farWindow)
			}
			sub := subjectOf(fmt.Sprintf("cap-%d-%d", tc.width, run))
			const callers, perCaller = 48, 6
			ok, no := limitertest.Hammer(t, s, callers, perCaller, func(int, int) []limiter.Request {
				b := make([]limiter.Request, tc.width)
				for i := range b {
					b[i] = limiter.Request{Policy: ps[i], Subject: sub, Cost: 1}
				}
				return b
			}, nil)
			if ok != 80 || ok+no != callers*perCaller {
				t.Errorf("%d admitted of %d, want exactly 80", ok, ok+no)
			}
			runs, requests, single := groupSizes(t, reg)
			t.Logf("%d runs of %d calls, %d of one", runs, requests, single)
			if requests != callers*perCaller {
				t.Errorf("the runs evaluated %d calls, %d were made", requests, callers*perCaller)
			}
			switch tc.width {
			case 1:
				if at4 := runsAtMost(t, reg, 4); at4 != runs || single == runs {
					t.Errorf("%d runs, %d of at most 4 calls, %d of one: want every run within the cap and some of several", runs, at4, single)
				}
			default:
				if single != runs {
					t.Errorf("%d runs, %d of one call: two calls of 3 limits exceed the cap of 4", runs, single)
				}
			}
		})
	}
}
