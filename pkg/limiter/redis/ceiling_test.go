package redis

import (
	"context"
	"os"
	"testing"
	"time"
	"unsafe"

	"github.com/redis/rueidis"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/lua"
)

// TestCeilingStub keeps scripts/ceiling/rate-batch-v1.lua (the do-nothing
// batch program `scripts/bench.sh --target ceiling` measures with) in step
// with the real program's contract: it assembles, takes the batch arguments
// the store sends, answers a reply ParseBatchReply accepts (every key
// ALLOWED, at Redis's clock), and stores nothing. If the contract changes
// and the stub does not, the ceiling benchmark would measure errors.
func TestCeilingStub(t *testing.T) {
	raw, err := os.ReadFile("../../../scripts/ceiling/rate-batch-v1.lua")
	if err != nil {
		t.Fatal(err)
	}
	src, err := lua.Assemble(string(raw), lua.Fragment)
	if err != nil {
		t.Fatalf("Assemble: %v", err)
	}
	e := newEnv(t)
	p := fixed(t, "bench.remote_address", 1000, time.Second)
	q := fixed(t, "bench.other", 50, time.Minute)
	policies := []*limiter.Policy{p, q}
	keys := []string{keyOf(p, subjectOf("a")), keyOf(q, subjectOf("a"))}
	var packed []byte
	for _, pol := range policies {
		packed = lua.AppendBatchPacked(packed, pol, 1, limiter.ModeOrdinary)
	}
	var args []string
	for i, pol := range policies {
		b := packed[i*lua.BatchPacked : (i+1)*lua.BatchPacked]
		args = append(args, pol.ID(), unsafe.String(&b[0], len(b)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	before := e.serverNow()
	msgs, err := rueidis.NewLuaScript(src).Exec(ctx, e.store.client, keys, args).ToArray()
	if err != nil {
		t.Fatalf("Exec: %v", err)
	}
	vals := replyValues(nil, msgs)
	out := make([]limiter.Reply, len(policies))
	committed, err := lua.ParseBatchReply(policies, vals, out)
	if err != nil || !committed {
		t.Fatalf("ParseBatchReply: committed %v, %v (reply %+v)", committed, err, vals)
	}
	for i, r := range out {
		if r.Status != limiter.StatusAllowed || r.Remaining != policies[i].Limit()-1 || r.ServerNowMs < before {
			t.Errorf("key %d: %+v, want ALLOWED with %d remaining at or after %d", i, r, policies[i].Limit()-1, before)
		}
	}
	for _, k := range keys {
		if n := e.do("EXISTS", k); n != int64(0) {
			t.Errorf("EXISTS %s = %v: the stub must store nothing", k, n)
		}
	}
}
