package lua

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/algorithm"
)

func leasePolicy(t testing.TB) *limiter.Policy {
	t.Helper()
	return limitertest.LeasePolicy(t, "inflight", 5, time.Minute)
}

func ints(v ...int64) []Value {
	out := make([]Value, len(v))
	for i, n := range v {
		out[i] = Value{Int: n, IsInt: true}
	}
	return out
}

func TestParseLeaseReply(t *testing.T) {
	p := leasePolicy(t)
	for _, c := range []struct {
		name string
		vals []Value
		ok   bool
	}{
		{"allowed", ints(1, 1000, 1000, 5, 4, 0, 61000), true},
		{"denied", ints(2, 1000, 1000, 5, 0, 30000, 61000), true},
		{"incompatible", ints(4, 1000, 1000, 5, 0, 0, 0), true},
		{"invalid", ints(5, 1000, 1000, 0, 0, 0, 0), true},
		{"invalid with a limit", ints(5, 1000, 1000, 5, 0, 0, 0), false},
		{"six values", ints(1, 1000, 1000, 5, 4, 0), false},
		{"a string", append(ints(1, 1000, 1000, 5, 4, 0), Value{Str: "x"}), false},
		{"blocked", ints(6, 1000, 1000, 5, 0, 10, 61000), false},
		{"clock unsafe", ints(3, 1000, 1000, 5, 0, 0, 0), false},
		{"another limit", ints(1, 1000, 1000, 6, 4, 0, 61000), false},
		{"remaining above the limit", ints(1, 1000, 1000, 5, 6, 0, 61000), false},
		{"an allow with a retry", ints(1, 1000, 1000, 5, 4, 5, 61000), false},
		{"a denial without a retry", ints(2, 1000, 1000, 5, 0, 0, 61000), false},
		{"effective now ahead", ints(1, 1000, 1001, 5, 4, 0, 61000), false},
		{"reset before now", ints(1, 1000, 1000, 5, 4, 0, 999), false},
		{"negative", ints(1, 1000, 1000, 5, -1, 0, 61000), false},
		{"past the deadline without its time", ints(0), false},
		{"past the deadline at a negative time", ints(0, -1), false},
		{"status 0 with seven values", ints(0, 1000, 1000, 5, 4, 0, 61000), false},
	} {
		r, err := ParseLeaseReply(p, c.vals)
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, ErrMalformedReply)) {
			t.Errorf("%s: %+v %v", c.name, r, err)
		}
	}
	// A run past the caller's deadline changed nothing: an expiry, not a
	// malformed reply.
	_, err := ParseLeaseReply(p, ints(0, 1000))
	var expired *ExpiredError
	if !errors.As(err, &expired) || expired.ServerNowMs != 1000 || errors.Is(err, ErrMalformedReply) {
		t.Errorf("past the deadline: %v", err)
	}
}

// FuzzParseLeaseReply: any reply either parses to a reply consistent with
// the policy, which OutcomeFromReply never refuses, or is malformed.
func FuzzParseLeaseReply(f *testing.F) {
	f.Add("#1 #1000 #1000 #5 #4 #0 #61000")
	f.Add("#2 #1000 #1000 #5 #0 #30000 #61000")
	f.Add("#4 #7 #7 #5 #0 #0 #0")
	f.Add("#0 #1000")
	p := leasePolicy(f)
	f.Fuzz(func(t *testing.T, data string) {
		r, err := ParseLeaseReply(p, decodeFuzzValues(data))
		if errors.Is(err, ErrExpired) {
			return // a run past its deadline: nothing to decide
		}
		if err != nil {
			refused(t, err, false)
			return
		}
		o := algorithm.OutcomeFromReply(p, r, limiter.SourceRedis)
		if o.Kind == limiter.Evaluated && o.Decision.Allowed != (r.Status == algorithm.StatusAllowed) {
			t.Fatalf("%+v became %+v", r, o)
		}
		if o.Category == limiter.CategoryReplyMalformed {
			t.Fatalf("parsed %+v, which OutcomeFromReply refuses: %v", r, o.Err)
		}
	})
}

// TestLeaseArgs: the arguments lease-v2.lua reads, in its header's order.
func TestLeaseArgs(t *testing.T) {
	p := leasePolicy(t)
	got := LeaseArgs(&limiter.Request{Policy: p, Cost: 2, Lease: limiter.LeaseRelease, Role: limiter.RoleCheck, LeaseAt: 61000}, 0)
	if want := "1 0 5 60000 2 1000 61000 0"; strings.Join(got, " ") != want {
		t.Errorf("args %v, want %s", got, want)
	}
	got = LeaseArgs(&limiter.Request{Policy: p, Cost: 1}, 5000)
	if want := "0 1 5 60000 1 1000 0 5000"; strings.Join(got, " ") != want {
		t.Errorf("args %v, want %s", got, want)
	}
}

// TestLeaseProgramShape: the lease program's header names its keys,
// arguments and reply, it reads TIME once and writes only with SET and
// UNLINK (commands of the ACL user docs/redis.md documents).
func TestLeaseProgramShape(t *testing.T) {
	src := Lease().Source
	for _, want := range []string{"-- KEYS[1]", "-- ARGV[8]", "-- Reply:"} {
		if !strings.Contains(src, want) {
			t.Errorf("lease-v2.lua: missing %q", want)
		}
	}
	if n := strings.Count(src, "redis.call('TIME')"); n != 1 {
		t.Errorf("TIME called %d times", n)
	}
	calls := map[string]bool{}
	for _, part := range strings.Split(src, "redis.call('")[1:] {
		name, _, _ := strings.Cut(part, "'")
		calls[name] = true
	}
	for name := range calls {
		if name != "TIME" && name != "GET" && name != "SET" && name != "UNLINK" {
			t.Errorf("lease-v2.lua calls %s", name)
		}
	}
	doc, err := os.ReadFile("../../docs/redis.md")
	if err != nil {
		t.Fatal(err)
	}
	for name := range calls {
		if !strings.Contains(string(doc), "+"+strings.ToLower(name)) {
			t.Errorf("docs/redis.md's ACL user lacks +%s", strings.ToLower(name))
		}
	}
}
