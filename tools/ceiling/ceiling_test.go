package ceiling_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/algorithm"
	"github.com/envoy-rls/envoy-rls/pkg/lua"
	"github.com/envoy-rls/envoy-rls/tools/ceiling"
)

// TestStubKeepsTheBatchContract keeps the ceiling stubs in step with the
// real batch program's contract: each takes the arguments the Redis store
// sends, run as a script (EVAL) and as the function library bench.sh
// wraps it in (FCALL), and answers a reply lua.ParseBatchReplyV2 accepts
// (every key ALLOWED, at Redis's clock). The TIME stub stores nothing;
// the state stub leaves each key counted, with an expiry of its window. If
// the contract changes and a stub does not, the ceiling benchmarks would
// measure errors.
func TestStubKeepsTheBatchContract(t *testing.T) {
	for _, stub := range []struct {
		name, src string
		state     bool
	}{{"time", ceiling.Source, false}, {"state", ceiling.StateSource, true}} {
		for _, how := range []string{"EVAL", "FCALL"} {
			t.Run(stub.name+"/"+how, func(t *testing.T) {
				srv := redistest.Standalone(t)
				srv.MustDo("FLUSHALL")
				srv.MustDo("FUNCTION", "FLUSH")
				run := func(keys, args []string) []any {
					var cmd []string
					if how == "EVAL" {
						cmd = []string{"EVAL", stub.src, strconv.Itoa(len(keys))}
					} else {
						srv.MustDo("FUNCTION", "LOAD", "REPLACE", library(stub.src))
						cmd = []string{"FCALL", "envoy_rls_ceiling_batch", strconv.Itoa(len(keys))}
					}
					cmd = append(append(cmd, keys...), args...)
					group, ok := srv.MustDo(cmd...).([]any)
					if !ok || len(group) != 1 {
						t.Fatalf("%s replied %T %v, want an array of one request's reply", how, group, group)
					}
					return group
				}
				checkStub(t, srv, run, stub.state)
			})
		}
	}
}

// library wraps a stub as bench.sh does: a function library whose one
// function runs the stub with the call's keys and arguments.
func library(src string) string {
	return "#!lua name=envoy_rls_ceiling\nlocal KEYS, ARGV\n" +
		"redis.register_function{function_name='envoy_rls_ceiling_batch', callback=function(keys, args)\n" +
		"KEYS, ARGV = keys, args\n" + src + "\nend}\n"
}

// checkStub runs one request of two keys twice through run and checks the
// replies, and what the stub left in Redis.
func checkStub(t *testing.T, srv *redistest.Server, run func(keys, args []string) []any, state bool) {
	t.Helper()
	policies := []*limiter.Policy{
		fixed(t, "bench.remote_address", 1000, time.Second),
		fixed(t, "bench.other", 50, time.Minute),
	}
	// The keys share one hash tag as the store's keys of one batch do.
	keys := []string{"rate:{ceiling}:state:a", "rate:{ceiling}:state:b"}
	var args []string
	for _, p := range policies {
		args = append(args, string(lua.AppendBatchPacked(nil, p, 1, limiter.RoleOrdinary, time.Now().UnixMilli())))
	}
	// One request of two keys, as the store sends a call alone.
	args = append(args, string(lua.AppendGroupEntry(nil, len(keys), 0)))
	for round := 1; round <= 2; round++ {
		before := serverNowMs(t, srv)
		group := run(keys, args)
		raw, ok := group[0].([]any)
		if !ok {
			t.Fatalf("the request's reply is %T, want an array", group[0])
		}
		vals := make([]lua.Value, len(raw))
		for i, v := range raw {
			switch v := v.(type) {
			case int64:
				vals[i] = lua.Value{Int: v, IsInt: true}
			case string:
				vals[i] = lua.Value{Str: v}
			default:
				t.Fatalf("reply element %d is %T (%v), want an integer or a string", i, v, v)
			}
		}
		out := make([]algorithm.Reply, len(policies))
		committed, err := lua.ParseBatchReplyV2(policies, vals, out)
		if err != nil || !committed {
			t.Fatalf("ParseBatchReplyV2: committed %v, %v (reply %+v)", committed, err, vals)
		}
		for i, r := range out {
			if r.Status != algorithm.StatusAllowed || r.Remaining != policies[i].Limit()-1 || r.ServerNowMs < before {
				t.Errorf("key %d: %+v, want ALLOWED with %d remaining at or after %d", i, r, policies[i].Limit()-1, before)
			}
		}
	}
	if !state {
		if n := srv.MustDo("DBSIZE"); n != int64(0) {
			t.Errorf("DBSIZE = %v after the stub ran: it must store nothing", n)
		}
		return
	}
	for i, key := range keys {
		if v := srv.MustDo("GET", key); v != "2" {
			t.Errorf("GET %s = %v after two runs, want 2", key, v)
		}
		window := policies[i].WindowMillis()
		if ttl, ok := srv.MustDo("PTTL", key).(int64); !ok || ttl <= 0 || ttl > window {
			t.Errorf("PTTL %s = %v, want in (0, %d]", key, ttl, window)
		}
	}
}

func fixed(t *testing.T, id string, limit int64, window time.Duration) *limiter.Policy {
	t.Helper()
	p, err := limiter.NewPolicy(limiter.PolicySpec{ID: id, Algorithm: limiter.FixedWindow,
		Params: limiter.FixedWindowParams{Limit: limit, Window: window}})
	if err != nil {
		t.Fatalf("NewPolicy(%s): %v", id, err)
	}
	return p
}

// serverNowMs reads Redis TIME in milliseconds.
func serverNowMs(t *testing.T, srv *redistest.Server) int64 {
	t.Helper()
	a, ok := srv.MustDo("TIME").([]any)
	if !ok || len(a) != 2 {
		t.Fatalf("TIME replied %v", a)
	}
	sec, err1 := strconv.ParseInt(a[0].(string), 10, 64)
	usec, err2 := strconv.ParseInt(a[1].(string), 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("TIME replied %v", a)
	}
	return sec*1000 + usec/1000
}
