package redis

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/algorithm"
	"github.com/envoy-rls/envoy-rls/pkg/lua"
)

// TestOneKeyRunDifferential: runs of one request of one key (the program's
// one-key run: GET, and evaluateOne on the value read), over random stored
// states, against the model at the run's TIME: the same reply and the same
// state after it. Each run is a random policy (every algorithm, calendar
// windows, penalty boxes, charges, fail-open and fail-closed) under a random
// role, now and then an INVALID key, a request past its deadline or one
// whose argument is cut short (the program raises: a failed request). The
// test fails unless the runs reached every algorithm, each of those flags,
// every role and every status, so that the one-key run is proven to take
// each of them. The seed is logged.
func TestOneKeyRunDifferential(t *testing.T) {
	e := newEnv(t)
	rng, n := seededRand(t, 19, 600, 300, "one-key runs")
	windows := []time.Duration{7 * time.Millisecond, time.Second, time.Minute, time.Hour}
	roles := []limiter.Role{limiter.RoleOrdinary, limiter.RoleShadow, limiter.RoleQuota, limiter.RoleCheck,
		limiter.RoleProbe, limiter.RoleQuotaProbe}
	run := time.Now().UnixNano()
	seen := map[string]int{}
	for it := 0; it < n; it++ {
		p := randomPolicies(t, rng, fmt.Sprintf("ok%d", it%16), 1, windows)[0]
		r := batchReq{p: p, sub: subjectOf(fmt.Sprintf("ok-%d-%d", run, it)), cost: 1 + rng.Int64N(p.MaxCost()),
			role: roles[rng.IntN(len(roles))]}
		q := gReq{keys: []batchReq{r}}
		switch rng.IntN(20) {
		case 0:
			q.bad = 1
		case 1:
			q.expired = true
		case 2:
			q.corrupt = true
		case 3:
			q.ahead = true
		}
		states, before := e.seedRandom(rng, q.keys, e.serverNow())
		if q.corrupt {
			// A run whose request raises replies { 3, error text } and writes
			// nothing (execGroup needs a request that replies serverNow).
			e.oneKeyRaises(r)
			if err := e.checkWritten(states, states, before); err != nil {
				t.Fatalf("run %d, raised: %v", it, err)
			}
			seen["raised"]++
			continue
		}
		got, serverNow := e.execGroup([]gReq{q})
		want, final := modelGroup(states, []gReq{q}, serverNow)
		if err := sameResult(got[0], want[0]); err != nil {
			t.Fatalf("run %d (%s %s cost %d, %+v): %v\n state %+v", it, p.ID(), r.role, r.cost, q, err, states)
		}
		if err := e.checkWritten(states, final, before); err != nil {
			t.Fatalf("run %d: %v", it, err)
		}
		seen[p.Algorithm().String()]++
		seen["role "+r.role.String()]++
		if p.Penalty().On() {
			seen["penalty"]++
		}
		if p.ChargeAlways() {
			seen["charge"]++
		}
		if p.Calendar() != nil {
			seen["calendar"]++
		}
		if p.AbstainsOnFailure() {
			seen["fail-open"]++
		}
		switch {
		case q.expired:
			seen["expired"]++
		case got[0].err == nil:
			seen[got[0].replies[0].Status.String()]++
		}
	}
	t.Logf("one-key runs: %v", seen)
	want := []string{"penalty", "charge", "calendar", "fail-open", "expired", "raised"}
	for _, a := range limiter.Algorithms() {
		want = append(want, a.String())
	}
	for _, r := range roles {
		want = append(want, "role "+r.String())
	}
	for _, st := range []algorithm.Status{algorithm.StatusAllowed, algorithm.StatusDenied, algorithm.StatusBlocked,
		algorithm.StatusStateIncompatible, algorithm.StatusClockUnsafe, algorithm.StatusInvalid} {
		want = append(want, st.String())
	}
	for _, w := range want {
		if seen[w] == 0 {
			t.Errorf("no one-key run took %s: the sequence does not cover it", w)
		}
	}
}

// oneKeyRaises runs r alone with its packed numbers cut short, so that the
// program raises reading them, and checks the reply: { 3, error text }, a
// failed request.
func (e *env) oneKeyRaises(r batchReq) {
	e.t.Helper()
	args := batchArgs(nil, r.p, r.cost, r.role)
	args[0] = args[0][:20]
	args = append(args, string(lua.AppendGroupEntry(nil, 1, 0)))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	msgs, err := e.store.execBatch(ctx, []string{keyOf(r.p, r.sub)}, args).ToArray()
	if err != nil || len(msgs) != 1 {
		e.t.Fatalf("rate-batch-v2, one raising key: %v, %d replies", err, len(msgs))
	}
	vals, err := msgs[0].ToArray()
	if err != nil || len(vals) != 2 {
		e.t.Fatalf("one raising key: reply %v (%v), want { 3, error text }", vals, err)
	}
	if code, err := vals[0].AsInt64(); err != nil || code != 3 {
		e.t.Fatalf("one raising key: reply code %d (%v), want 3", code, err)
	}
	if text, err := vals[1].ToString(); err != nil || text == "" {
		e.t.Fatalf("one raising key: error text %q (%v)", text, err)
	}
	_, err = lua.ParseBatchReplyV2([]*limiter.Policy{r.p}, replyValues(nil, vals), make([]algorithm.Reply, 1))
	if !errors.As(err, new(*lua.FailedError)) {
		e.t.Fatalf("one raising key: parsed %v, want a failed request", err)
	}
}
