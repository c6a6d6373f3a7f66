package redis

import (
	"context"
	_ "embed"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/algorithm"
	"github.com/envoy-rls/envoy-rls/pkg/lua"
)

// batchV1Source is the batch program of the previous release,
// rate-batch-v1.lua (a hash per key), as it was generated.
//
//go:embed testdata/rate-batch-v1.lua
var batchV1Source string

// batchV1Script is rate-batch-v1.lua as an old replica sends it.
var batchV1Script = rueidis.NewLuaScript(batchV1Source)

// execV1 runs rate-batch-v1.lua on key as an old replica does, for one
// request of one key of p (charging no denied cost). Its arguments: the
// policy ID, the numbers packed as rate-batch-v2.lua takes them
// (lua.AppendBatchPacked), then the group field. Its reply: the committed
// flag, then the key's status by name and six integers; execV1 returns
// the flag and the status.
func (e *env) execV1(key string, p *limiter.Policy, cost int64) (bool, algorithm.Status) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	args := oneCall([]string{p.ID(), string(lua.AppendBatchPacked(nil, p, cost, limiter.RoleOrdinary, time.Now().UnixMilli()))}, 1, 0)
	msgs, err := batchV1Script.Exec(ctx, e.store.client, []string{key}, args).ToArray()
	if err != nil || len(msgs) != 1 {
		e.t.Fatalf("rate-batch-v1: %v %v", msgs, err)
	}
	vals, err := msgs[0].ToArray()
	if err != nil || len(vals) != 8 {
		e.t.Fatalf("rate-batch-v1 reply: %v %v", vals, err)
	}
	committed, err := vals[0].ToInt64()
	name, err2 := vals[1].ToString()
	if err != nil || err2 != nil {
		e.t.Fatalf("rate-batch-v1 reply: %v %v", err, err2)
	}
	for _, st := range []algorithm.Status{algorithm.StatusAllowed, algorithm.StatusDenied, algorithm.StatusStateIncompatible} {
		if name == st.String() {
			return committed == 1, st
		}
	}
	e.t.Fatalf("rate-batch-v1 reply: status %q", name)
	return false, 0
}

// TestV1AndV2SideBySide: old replicas (rate-batch-v1.lua, a hash per key)
// and new ones (the store: rate-batch-v2.lua, a string per key) on one
// Redis, as during a rolling upgrade (docs/redis.md, From v1 to v2). The
// keys of the two layouts are other keys: each version counts only its own
// decisions, exactly (under concurrency, each admits exactly its limit),
// neither reads nor writes the other's keys, and a program given the other
// layout's key by mistake answers STATE_INCOMPATIBLE and writes nothing,
// never a silent reset. A policy reset on a new replica deletes the states
// of both layouts.
func TestV1AndV2SideBySide(t *testing.T) {
	e := newEnv(t)
	const limit = 5
	p := fixed(t, "rollout", limit, farWindow)
	sub := subjectOf("rollout")
	v1Key, v2Key := string(storageKeyV1(nil, p, sub, limiter.Tag{})), keyOf(p, sub)
	if v1Key == v2Key {
		t.Fatal("the two layouts share a key")
	}

	// Concurrent callers of both versions on one subject: each version
	// admits exactly its limit, so the deployment admits twice the limit
	// while both run (the cutover's documented cost), never more.
	const callers, each = 8, 4
	var v1OK, v2OK atomic.Int64
	var wg sync.WaitGroup
	for range callers {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for range each {
				if _, st := e.execV1(v1Key, p, 1); st == algorithm.StatusAllowed {
					v1OK.Add(1)
				} else if st != algorithm.StatusDenied {
					t.Errorf("old replica: %s", st)
				}
			}
		}()
		go func() {
			defer wg.Done()
			for range each {
				o := e.evaluate(p, sub, 1)
				if o.Kind != limiter.Evaluated {
					t.Errorf("new replica: %v %v", o.Kind, o.Err)
				} else if o.Decision.Allowed {
					v2OK.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if v1OK.Load() != limit || v2OK.Load() != limit {
		t.Fatalf("admitted %d by the old replicas and %d by the new ones, want exactly %d each", v1OK.Load(), v2OK.Load(), limit)
	}
	// Each counted in its own layout, under its own key, and nothing else.
	if typ := e.do("TYPE", v1Key); typ != "hash" {
		t.Fatalf("the old replicas' state is a %v", typ)
	}
	if h := e.hashV1(v1Key); h["b"] != "5" || h["policy"] != p.ID() {
		t.Fatalf("the old replicas' state %v, want 5 counted", h)
	}
	if h := e.hash(v2Key); h["b"] != "5" || h["alg"] != "fixed_window" {
		t.Fatalf("the new replicas' state %v, want 5 counted", h)
	}
	if n := e.do("DBSIZE"); n != int64(2) {
		t.Fatalf("%v keys, want the two states", n)
	}

	// A program given the other layout's key (never sent by construction:
	// the key names differ) reads it as STATE_INCOMPATIBLE and changes
	// nothing.
	before := []any{e.dump(v1Key), e.dump(v2Key)}
	committed, r := e.runBatchKeys([]string{v1Key}, batchArgs(nil, p, 1, limiter.RoleOrdinary), []*limiter.Policy{p})
	if committed || r[0].Status != algorithm.StatusStateIncompatible {
		t.Fatalf("v2 on a v1 hash: committed %v, %s", committed, r[0].Status)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if c, st := e.execV1(v2Key, p, 1); c || st != algorithm.StatusStateIncompatible {
		t.Fatalf("v1 on a v2 string: committed %v, %s", c, st)
	}
	if after := []any{e.dump(v1Key), e.dump(v2Key)}; after[0] != before[0] || after[1] != before[1] {
		t.Fatal("a program changed the other layout's state")
	}

	// A policy reset on a new replica: both layouts' states of the policy.
	res, err := e.store.ResetPolicy(ctx, p.ID(), p.Revision(), limiter.ResetBounds{MaxScanned: 1000})
	if err != nil || !res.Complete || res.Deleted != 2 || res.Skipped != 0 {
		t.Fatalf("ResetPolicy: %+v, %v; want both states deleted", res, err)
	}
	if n := e.do("DBSIZE"); n != int64(0) {
		t.Fatalf("%v keys after the reset", n)
	}
}

// hashV1 returns a hash of rate-batch-v1.lua's layout, field by field.
func (e *env) hashV1(key string) map[string]string {
	e.t.Helper()
	a, _ := e.do("HGETALL", key).([]any)
	m := make(map[string]string, len(a)/2)
	for i := 0; i+1 < len(a); i += 2 {
		m[a[i].(string)] = a[i+1].(string)
	}
	return m
}
