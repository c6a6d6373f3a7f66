package ceiling_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/lua"
	"github.com/envoy-rls/envoy-rls/tools/ceiling"
)

// TestStubKeepsTheBatchContract keeps the ceiling stub in step with the
// real batch program's contract: it takes the arguments the Redis store sends, answers a reply
// lua.ParseBatchReplyV2 accepts (every key ALLOWED, at Redis's clock) and
// stores nothing. If the contract changes and the stub does not, the
// ceiling benchmark would measure errors.
func TestStubKeepsTheBatchContract(t *testing.T) {
	src := ceiling.Source
	srv := redistest.Standalone(t)
	policies := []*limiter.Policy{
		fixed(t, "bench.remote_address", 1000, time.Second),
		fixed(t, "bench.other", 50, time.Minute),
	}
	// The stub never reads its keys; they share one hash tag as the
	// store's keys of one batch do.
	keys := []string{"rate:{ceiling}:state:a", "rate:{ceiling}:state:b"}
	var args []string
	for _, p := range policies {
		args = append(args, string(lua.AppendBatchPacked(nil, p, 1, limiter.RoleOrdinary)))
	}
	// One request of two keys, as the store sends a call alone.
	args = append(args, string(lua.AppendGroupEntry(nil, len(keys), 0)))
	before := serverNowMs(t, srv)
	cmd := append([]string{"EVAL", src, strconv.Itoa(len(keys))}, keys...)
	group, ok := srv.MustDo(append(cmd, args...)...).([]any)
	if !ok || len(group) != 1 {
		t.Fatalf("EVAL replied %T %v, want an array of one request's reply", group, group)
	}
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
	out := make([]limiter.Reply, len(policies))
	committed, err := lua.ParseBatchReplyV2(policies, vals, out)
	if err != nil || !committed {
		t.Fatalf("ParseBatchReplyV2: committed %v, %v (reply %+v)", committed, err, vals)
	}
	for i, r := range out {
		if r.Status != limiter.StatusAllowed || r.Remaining != policies[i].Limit()-1 || r.ServerNowMs < before {
			t.Errorf("key %d: %+v, want ALLOWED with %d remaining at or after %d", i, r, policies[i].Limit()-1, before)
		}
	}
	if n := srv.MustDo("DBSIZE"); n != int64(0) {
		t.Errorf("DBSIZE = %v after the stub ran: it must store nothing", n)
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
