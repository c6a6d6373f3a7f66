package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// fallbacks records Config.OnFallback's reports.
type fallbacks struct {
	mu      sync.Mutex
	reasons []string
}

func (f *fallbacks) report(r string) { f.mu.Lock(); f.reasons = append(f.reasons, r); f.mu.Unlock() }

func (f *fallbacks) got() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.reasons...)
}

// TestFunctionNotFoundLoads: after FUNCTION FLUSH (as after a restart
// without persistence) the next call loads the library and is decided by
// FCALL; nothing falls back.
func TestFunctionNotFoundLoads(t *testing.T) {
	e := newEnv(t, redistest.Local())
	p := fixed(t, "fn.flush", 2, time.Hour)
	sub := subjectOf("fn flush")
	if o := e.evaluate(p, sub, 1); o.Kind != limiter.Evaluated || o.Decision.Remaining != 1 {
		t.Fatalf("first call: %+v", o)
	}
	e.do("FUNCTION", "FLUSH")
	e.do("CONFIG", "RESETSTAT")
	if o := e.evaluate(p, sub, 1); o.Kind != limiter.Evaluated || o.Decision.Remaining != 0 {
		t.Fatalf("after FUNCTION FLUSH: %v %+v (%v)", o.Kind, o.Decision, o.Err)
	}
	calls := commandCalls(e.do("INFO", "commandstats").(string))
	if calls["fcall"] != 2 || calls["function|load"] != 1 || calls["evalsha"] != 0 || e.store.evalsha.Load() {
		t.Fatalf("commandstats %v: want FCALL, FUNCTION LOAD, FCALL", calls)
	}
	if l := fmt.Sprint(e.do("FUNCTION", "LIST", "LIBRARYNAME", batchFunction.Library)); !strings.Contains(l, batchFunction.Function) {
		t.Fatalf("FUNCTION LIST: %s", l)
	}
}

// TestFunctionRefusedFallsBack: when Redis refuses FCALL (here the ACL,
// taken away after the store started), the call is decided by EVALSHA, and
// so is every later call; the fallback is reported once, without the
// reply's text.
func TestFunctionRefusedFallsBack(t *testing.T) {
	e := newEnv(t, redistest.Local())
	e.do("ACL", "SETUSER", "envoy-rls", "on", ">s3cret-pw", "~*", "+@all")
	var fb fallbacks
	s := newStore(t, Config{Addrs: []string{e.srv.Addr()}, Username: "envoy-rls", Password: "s3cret-pw", OnFallback: fb.report})
	p := fixed(t, "fn.refused", 3, time.Hour)
	sub := subjectOf("fn refused")
	out := make([]limiter.Outcome, 1)
	call := func(want int64) {
		t.Helper()
		s.Evaluate(context.Background(), []limiter.Request{{Policy: p, Subject: sub, Cost: 1}}, out)
		if o := out[0]; o.Kind != limiter.Evaluated || !o.Decision.Allowed || o.Decision.Remaining != want {
			t.Fatalf("%v %+v (%v), want allowed, %d left", o.Kind, o.Decision, o.Err, want)
		}
	}
	call(2)
	if len(fb.got()) != 0 {
		t.Fatalf("fell back with FCALL allowed: %v", fb.got())
	}
	e.do("ACL", "SETUSER", "envoy-rls", "-fcall")
	e.do("CONFIG", "RESETSTAT")
	call(1)
	call(0)
	calls := commandCalls(e.do("INFO", "commandstats").(string))
	if calls["fcall"] != 0 || calls["evalsha"] != 2 {
		t.Fatalf("commandstats %v: want the refused FCALL, then EVALSHA for both calls", calls)
	}
	if r := fb.got(); len(r) != 1 || !strings.Contains(r[0], "FCALL refused: NOPERM") || strings.Contains(r[0], "rate:") {
		t.Fatalf("fallback reports %q, want one naming the refusal", r)
	}
}

// TestLeastPrivilegeWithoutFunctions: the user of docs/redis.md without the
// optional FCALL line works through the fallback (FUNCTION LOAD refused at
// start: the one denial in ACL LOG); with that line the store runs FCALL and
// Redis denies it nothing.
func TestLeastPrivilegeWithoutFunctions(t *testing.T) {
	e := newEnv(t, redistest.Local())
	acl := docACL(t, "s3cret-pw")
	fcallLine := docFcallLine(t, acl)
	e.do(acl[0]...)
	e.do("ACL", "LOG", "RESET")
	p := fixed(t, "fn.acl", 2, time.Hour)
	run := func(name string, wantFallback bool) {
		t.Helper()
		var fb fallbacks
		s := newStore(t, Config{Addrs: []string{e.srv.Addr()}, Username: "envoy-rls", Password: "s3cret-pw", OnFallback: fb.report})
		sub := subjectOf("fn acl " + name)
		out := make([]limiter.Outcome, 1)
		for i, want := range []bool{true, true, false} {
			s.Evaluate(context.Background(), []limiter.Request{{Policy: p, Subject: sub, Cost: 1}}, out)
			if o := out[0]; o.Kind != limiter.Evaluated || o.Decision.Allowed != want {
				t.Fatalf("%s, call %d: %v %+v (%v)", name, i, o.Kind, o.Decision, o.Err)
			}
		}
		if got := len(fb.got()) == 1; got != wantFallback || s.evalsha.Load() != wantFallback {
			t.Fatalf("%s: fallback reports %v, want a fallback: %v", name, fb.got(), wantFallback)
		}
	}
	run("base line", true)
	for _, entry := range e.do("ACL", "LOG").([]any) {
		if s := fmt.Sprint(entry); !strings.Contains(s, "function|load") {
			t.Fatalf("ACL LOG: %s, want only the refused FUNCTION LOAD", s)
		}
	}
	e.do(fcallLine...)
	e.do("ACL", "LOG", "RESET")
	e.do("CONFIG", "RESETSTAT")
	run("with the FCALL line", false)
	if l := e.do("ACL", "LOG").([]any); len(l) != 0 {
		t.Fatalf("ACL LOG: %v, want no denial", l)
	}
	if calls := commandCalls(e.do("INFO", "commandstats").(string)); calls["fcall"] != 3 || calls["evalsha"] != 0 {
		t.Fatalf("commandstats %v, want 3 FCALL", calls)
	}
}

// TestFunctionOOM: Redis over maxmemory refuses FCALL of a function
// without flags before it runs, where EVALSHA's program is refused only at
// its first write. The store sends such a call again by EVALSHA, so the
// outcomes are EVALSHA's: a check (no write) is decided, a call that
// writes is Unavailable (capacity); nothing falls back for good.
func TestFunctionOOM(t *testing.T) {
	e := newEnv(t, redistest.Local())
	p := fixed(t, "fn.oom", 5, time.Hour)
	sub := subjectOf("fn oom")
	if o := e.evaluate(p, sub, 1); o.Kind != limiter.Evaluated {
		t.Fatalf("before: %+v", o)
	}
	e.do("CONFIG", "SET", "maxmemory-policy", "noeviction")
	e.do("CONFIG", "SET", "maxmemory", "1")
	defer e.do("CONFIG", "SET", "maxmemory", "0")
	out := make([]limiter.Outcome, 1)
	e.store.Evaluate(context.Background(), []limiter.Request{{Policy: p, Subject: sub, Cost: 1, Role: limiter.RoleCheck}}, out)
	if o := out[0]; o.Kind != limiter.Evaluated || o.Decision.Remaining != 4 {
		t.Fatalf("a check over maxmemory: %v %+v (%v), want decided", o.Kind, o.Decision, o.Err)
	}
	if o := e.evaluate(p, sub, 1); o.Kind != limiter.Unavailable || o.Category != limiter.CategoryCapacity {
		t.Fatalf("a write over maxmemory: %v/%s (%v), want unavailable/capacity", o.Kind, o.Category, o.Err)
	}
	if e.store.evalsha.Load() {
		t.Fatal("OOM made the store fall back for good")
	}
}

// docFcallLine is the optional ACL line of docs/redis.md (docACL's acl)
// that allows Redis functions.
func docFcallLine(t testing.TB, acl [][]string) []string {
	t.Helper()
	l, err := redistest.OptionalACL(acl, "+fcall")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestFunctionNotFoundIsNotRun: FCALL's "Function not found", which stands
// when the library could not be loaded, is a call that ran nothing:
// Unavailable, like NOSCRIPT; a user no longer allowed FUNCTION LOAD meets
// it after FUNCTION FLUSH and is decided by EVALSHA from then on.
func TestFunctionNotFoundIsNotRun(t *testing.T) {
	e := newEnv(t, redistest.Local())
	p := fixed(t, "fn.notfound", 3, time.Hour)
	for _, msg := range []string{"ERR Function not found", "NOSCRIPT No matching script."} {
		if o := classifyText(p, msg, errors.New(msg)); o.Kind != limiter.Unavailable || o.Category != limiter.CategoryNotConnected {
			t.Errorf("%q: %v/%s, want unavailable/not_connected", msg, o.Kind, o.Category)
		}
	}
	e.do("ACL", "SETUSER", "envoy-rls", "on", ">s3cret-pw", "~*", "+@all")
	var fb fallbacks
	s := newStore(t, Config{Addrs: []string{e.srv.Addr()}, Username: "envoy-rls", Password: "s3cret-pw", OnFallback: fb.report})
	if len(fb.got()) != 0 {
		t.Fatalf("fell back at start: %v", fb.got())
	}
	e.do("ACL", "SETUSER", "envoy-rls", "-function|load")
	e.do("FUNCTION", "FLUSH")
	out := make([]limiter.Outcome, 1)
	s.Evaluate(context.Background(), []limiter.Request{{Policy: p, Subject: subjectOf("fn notfound"), Cost: 1}}, out)
	if o := out[0]; o.Kind != limiter.Evaluated || o.Decision.Remaining != 2 {
		t.Fatalf("after FUNCTION FLUSH without FUNCTION LOAD: %v %+v (%v)", o.Kind, o.Decision, o.Err)
	}
	if r := fb.got(); len(r) != 1 || !strings.Contains(r[0], "FUNCTION LOAD refused: NOPERM") {
		t.Fatalf("fallback reports %q", r)
	}
}
