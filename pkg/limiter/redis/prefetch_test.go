package redis

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// TestOneKeyReadFailsClosed: a run of one key reads its state with GET and
// takes only a WRONGTYPE error for a key of another type; any other error
// (here an ACL user without GET) fails the decision, never passes as
// STATE_INCOMPATIBLE or as a key without state.
func TestOneKeyReadFailsClosed(t *testing.T) {
	e := newEnv(t, redistest.Local())
	e.do(docACL(t, "s3cret-pw")[0]...)
	e.do("ACL", "SETUSER", "envoy-rls", "-get")
	s := newStore(t, Config{Addrs: []string{e.srv.Addr()}, Username: "envoy-rls", Password: "s3cret-pw"})
	p := fixed(t, "noget", 10, time.Hour)
	out := make([]limiter.Outcome, 1)
	s.Evaluate(context.Background(), []limiter.Request{{Policy: p, Subject: subjectOf("noget"), Cost: 1}}, out)
	if o := out[0]; o.Kind == limiter.Evaluated || o.Category != limiter.CategoryProgramInvalid || o.Err == nil ||
		!strings.Contains(o.Err.Error(), "can't run this command") {
		t.Fatalf("one key without GET: %v %s (%v), want the program's failure, Redis's ACL refusal", o.Kind, o.Category, o.Err)
	}
	if n := e.do("DBSIZE"); n != int64(0) {
		t.Fatalf("DBSIZE %v after a failed read, want 0", n)
	}
}
