package rls

import (
	"context"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

func code(resp *rlsv3.RateLimitResponse) string { return resp.OverallCode.String() }

func TestFieldsAndFullHeaders(t *testing.T) {
	e := newRealEnv(t)
	for i, want := range []struct {
		code      rlsv3.RateLimitResponse_Code
		remaining uint32
	}{{rlsv3.RateLimitResponse_OK, 2}, {rlsv3.RateLimitResponse_OK, 1}, {rlsv3.RateLimitResponse_OK, 0}, {rlsv3.RateLimitResponse_OVER_LIMIT, 0}} {
		resp := e.call(t, request("rls", desc("user", "alice")))
		if resp.OverallCode != want.code || len(resp.Statuses) != 1 {
			t.Fatalf("step %d: %v", i, resp)
		}
		st := resp.Statuses[0]
		if st.Code != want.code || st.LimitRemaining != want.remaining {
			t.Fatalf("step %d: status %v remaining %d, want %v %d", i, st.Code, st.LimitRemaining, want.code, want.remaining)
		}
		cl := st.CurrentLimit
		if cl.GetName() != "per-user" || cl.GetRequestsPerUnit() != 3 || cl.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE {
			t.Fatalf("step %d: current_limit %v", i, cl)
		}
		if d := st.DurationUntilReset.AsDuration(); d != 50*time.Second {
			t.Fatalf("step %d: duration_until_reset %v, want 50s", i, d)
		}
		hd := headers(resp)
		if hd[headerLimit] != "3, 3;w=60" || hd[headerRemaining] != itoa(int(want.remaining)) || hd[headerReset] != "50" {
			t.Fatalf("step %d: headers %v", i, hd)
		}
		_, hasRetry := hd[headerRetryAfter]
		if over := want.code == rlsv3.RateLimitResponse_OVER_LIMIT; hasRetry != over || (resp.RawBody != nil) != over {
			t.Fatalf("step %d: Retry-After present %v, body %q", i, hasRetry, resp.RawBody)
		}
		if want.code == rlsv3.RateLimitResponse_OVER_LIMIT {
			if hd[headerRetryAfter] != "50" || hd[headerContentType] != "application/json" {
				t.Fatalf("over: headers %v", hd)
			}
			if got := string(resp.RawBody); got != `{"error":"rate_limited","policy":"rls:per-user","retry_after_seconds":50}` {
				t.Fatalf("body %s", got)
			}
		}
	}
	// Retry-After rounds up: 49.5s left is 50.
	e.clock.Advance(500 * time.Millisecond)
	resp := e.call(t, request("rls", desc("user", "alice")))
	if hd := headers(resp); hd[headerRetryAfter] != "50" || hd[headerReset] != "50" {
		t.Fatalf("rounding: %v", hd)
	}
	// A new window admits again.
	e.clock.Advance(50 * time.Second)
	if resp := e.call(t, request("rls", desc("user", "alice"))); resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 2 {
		t.Fatalf("next window: %v", resp)
	}
	// Another user has its own counter.
	if resp := e.call(t, request("rls", desc("user", "bob"))); resp.Statuses[0].LimitRemaining != 2 {
		t.Fatalf("bob shares alice's counter: %v", resp)
	}
}

func TestUnitsAndExtensionsInCurrentLimit(t *testing.T) {
	e := newRealEnv(t)
	resp := e.call(t, request("rls", desc("bucket", "b"), desc("multi", "m"), desc("weekly", "w")))
	b, m, w := resp.Statuses[0].CurrentLimit, resp.Statuses[1].CurrentLimit, resp.Statuses[2].CurrentLimit
	if b.GetUnit() != rlsv3.RateLimitResponse_RateLimit_SECOND || b.GetRequestsPerUnit() != 10 {
		t.Fatalf("bucket: %v", b)
	}
	if resp.Statuses[0].LimitRemaining != 19 {
		t.Fatalf("token bucket with burst 20: remaining %d, want 19", resp.Statuses[0].LimitRemaining)
	}
	if m.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE || m.GetUnitMultiplier().GetValue() != 5 {
		t.Fatalf("multi: %v", m)
	}
	if w.GetUnit() != rlsv3.RateLimitResponse_RateLimit_WEEK || w.GetRequestsPerUnit() != 7 {
		t.Fatalf("weekly: %v", w)
	}
	if got := headers(resp)[headerLimit]; got != "7, 10;w=1;burst=20, 100;w=300, 7;w=604800" {
		t.Fatalf("X-RateLimit-Limit %q", got)
	}
}

func TestMostRestrictiveStatusDrivesHeaders(t *testing.T) {
	e := newRealEnv(t)
	resp := e.call(t, request("rls", desc("user", "carol"), desc("route", "/tight")))
	hd := headers(resp)
	// route=/tight has 0 left of 1 per second; user has 2 left of 3.
	if hd[headerLimit] != "1, 3;w=60, 1;w=1" || hd[headerRemaining] != "0" || hd[headerReset] != "1" {
		t.Fatalf("headers %v", hd)
	}
	resp = e.call(t, request("rls", desc("user", "carol"), desc("route", "/tight")))
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].Code != rlsv3.RateLimitResponse_OK || resp.Statuses[1].Code != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("statuses %v", resp.Statuses)
	}
	hd = headers(resp)
	if hd[headerRetryAfter] != "1" || !strings.Contains(string(resp.RawBody), `"policy":"rls/route:_tight`) {
		t.Fatalf("over: %v %s", hd, resp.RawBody)
	}
	// The call was denied, so nothing consumed: the user still has the 2
	// left by the first call (the reference would show 1: it consumes the
	// user's quota of a call the route denied).
	if resp.Statuses[0].LimitRemaining != 2 {
		t.Fatalf("user remaining %d, want 2", resp.Statuses[0].LimitRemaining)
	}
}

// TestNoPartialConsumption: a call consumes on every matched limit or on
// none; a limit that allowed in a denied call keeps its quota.
func TestNoPartialConsumption(t *testing.T) {
	e := newRealEnv(t)
	e.call(t, request("rls", desc("route", "/tight")))
	// The route denies: the user is reported with 3 left (allowed, nothing
	// taken), and the user's counter really is unchanged afterwards.
	for i := range 3 {
		resp := e.call(t, request("rls", desc("user", "erin"), desc("route", "/tight")))
		if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].Code != rlsv3.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 3 {
			t.Fatalf("call %d: %v", i, resp)
		}
	}
	if resp := e.call(t, request("rls", desc("user", "erin"))); resp.Statuses[0].LimitRemaining != 2 {
		t.Fatalf("user remaining %d after denied calls, want 2", resp.Statuses[0].LimitRemaining)
	}
	// A zero limit denies without reaching the store's commit: the others
	// are only checked.
	resp := e.call(t, request("rls", desc("user", "erin"), desc("blocked", "x")))
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].LimitRemaining != 2 {
		t.Fatalf("with a zero limit: %v", resp)
	}
	// A shadow denial does not block: the user consumes.
	e.call(t, request("rls", desc("shadow", "z")))
	resp = e.call(t, request("rls", desc("user", "erin"), desc("shadow", "z")))
	if resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 1 {
		t.Fatalf("with a shadow denial: %v", resp)
	}
	// Quota: a quota limit over while another allows consumes everywhere
	// (the call is OK); every quota limit over consumes nowhere.
	e.call(t, request("rls", desc("quota_a", "y")))
	resp = e.call(t, request("rls", desc("user", "frank"), desc("quota_a", "y"), desc("quota_b", "y")))
	if resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 2 || resp.Statuses[2].LimitRemaining != 1 {
		t.Fatalf("one quota over: %v", resp)
	}
	e.call(t, request("rls", desc("quota_b", "y")))
	resp = e.call(t, request("rls", desc("user", "frank"), desc("quota_a", "y"), desc("quota_b", "y")))
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].LimitRemaining != 2 {
		t.Fatalf("every quota over: %v", resp)
	}
}

// TestQuotaLimitThatNeverFits: a quota-mode limit whose cost can never fit
// is a quota denial known before the store is asked. With another quota
// limit that allows, the call is OK and consumes; as the only quota limit it
// denies the call and the other limits are only checked.
func TestQuotaLimitThatNeverFits(t *testing.T) {
	e := newRealEnv(t)
	// quota_a: 1/min, so a cost of 5 never fits; quota_b: 2/min; user: 3/min.
	resp := e.call(t, request("rls", desc("user", "gil"), withHits(desc("quota_a", "n"), 5), desc("quota_b", "n")))
	if resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[1].Code != rlsv3.RateLimitResponse_OK ||
		resp.Statuses[0].LimitRemaining != 2 || resp.Statuses[2].LimitRemaining != 1 {
		t.Fatalf("with another quota limit allowing: %v", resp)
	}
	resp = e.call(t, request("rls", desc("user", "gil"), withHits(desc("quota_a", "n"), 5)))
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || resp.Statuses[1].Code != rlsv3.RateLimitResponse_OVER_LIMIT ||
		resp.Statuses[0].LimitRemaining != 2 {
		t.Fatalf("as the only quota limit: %v", resp)
	}
	if resp := e.call(t, request("rls", desc("user", "gil"))); resp.Statuses[0].LimitRemaining != 1 {
		t.Fatalf("the denied call consumed: user remaining %d, want 1", resp.Statuses[0].LimitRemaining)
	}
}

func TestUnknownDomainAndDescriptor(t *testing.T) {
	e := newRealEnv(t)
	resp := e.call(t, request("nope", desc("user", "alice")))
	if resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].CurrentLimit != nil || len(resp.ResponseHeadersToAdd) != 0 {
		t.Fatalf("unknown domain: %v", resp)
	}
	resp = e.call(t, request("rls", desc("color", "blue"), desc("user", "dora")))
	if resp.Statuses[0].CurrentLimit != nil || resp.Statuses[0].Code != rlsv3.RateLimitResponse_OK || resp.Statuses[1].CurrentLimit == nil {
		t.Fatalf("unknown descriptor: %v", resp)
	}
	m := e.metrics(t)
	if counterValue(m, `envoy_rls_unmatched_total{domain="unknown"}`) != "1" || counterValue(m, `envoy_rls_unmatched_total{domain="rls"}`) != "1" {
		t.Fatalf("unmatched_total:\n%s", m)
	}
	if batches, _ := e.store.Counts(); batches != 1 {
		t.Fatalf("store batches %d, want 1 (the unknown domain never reaches the store)", batches)
	}
}

func TestShadowMode(t *testing.T) {
	e := newRealEnv(t)
	for i := 0; i < 3; i++ {
		resp := e.call(t, request("rls", desc("shadow", "s")))
		if resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].Code != rlsv3.RateLimitResponse_OK {
			t.Fatalf("call %d: shadow reported %v", i, resp)
		}
		if len(resp.ResponseHeadersToAdd) != 0 || resp.RawBody != nil {
			t.Fatalf("call %d: shadow rule produced headers %v", i, resp.ResponseHeadersToAdd)
		}
	}
	m := e.metrics(t)
	if v := counterValue(m, `envoy_rls_decisions_total{domain="rls",policy="rls/shadow",result="shadow_over_limit"}`); v != "2" {
		t.Fatalf("shadow_over_limit %q:\n%s", v, m)
	}
	if v := counterValue(m, `envoy_rls_decisions_total{domain="rls",policy="rls/shadow",result="ok"}`); v != "1" {
		t.Fatalf("ok %q", v)
	}
	if e.logs.FilterMessage(msgShadowDenied).Len() != 2 {
		t.Fatal("shadow denials not logged")
	}
}

func TestQuotaMode(t *testing.T) {
	e := newRealEnv(t)
	req := func() *rlsv3.RateLimitRequest { return request("rls", desc("quota_a", "q"), desc("quota_b", "q")) }
	// a: 1/min, b: 2/min. Call 1: both allowed. Call 2: a over, b allowed
	// -> OK (not every quota descriptor is over). Call 3: both over.
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		resp := e.call(t, req())
		if resp.OverallCode != want {
			t.Fatalf("call %d: %v, want %v", i, resp.OverallCode, want)
		}
		if i == 1 && (resp.Statuses[0].Code != rlsv3.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 0) {
			t.Fatalf("call 1: quota_a reported %v", resp.Statuses[0])
		}
		if i == 2 && (resp.Statuses[0].Code != rlsv3.RateLimitResponse_OVER_LIMIT || resp.Statuses[1].Code != rlsv3.RateLimitResponse_OVER_LIMIT) {
			t.Fatalf("call 2: %v", resp.Statuses)
		}
	}
	// An ordinary descriptor over denies regardless of quota descriptors.
	e.call(t, request("rls", desc("route", "/tight")))
	if resp := e.call(t, request("rls", desc("route", "/tight"), desc("quota_b", "fresh"))); resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("ordinary over with quota ok: %v", resp.OverallCode)
	}
}

func TestUnlimited(t *testing.T) {
	e := newRealEnv(t)
	resp := e.call(t, request("rls", desc("internal", "svc")))
	st := resp.Statuses[0]
	if st.Code != rlsv3.RateLimitResponse_OK || st.LimitRemaining != math.MaxUint32 || st.CurrentLimit != nil {
		t.Fatalf("unlimited: %v", st)
	}
	if batches, _ := e.store.Counts(); batches != 0 {
		t.Fatal("an unlimited rule reached the store")
	}
}

func TestZeroLimitNeverTouchesStore(t *testing.T) {
	e := newRealEnv(t)
	resp := e.call(t, request("rls", desc("blocked", "x")))
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 0 {
		t.Fatalf("zero limit: %v", resp)
	}
	// 00:00:10 -> the hour window ends in 59m50s.
	if d := resp.Statuses[0].DurationUntilReset.AsDuration(); d != 59*time.Minute+50*time.Second {
		t.Fatalf("duration_until_reset %v", d)
	}
	if hd := headers(resp); hd[headerRetryAfter] != "3590" {
		t.Fatalf("headers %v", hd)
	}
	if batches, _ := e.store.Counts(); batches != 0 {
		t.Fatal("a zero limit reached the store")
	}
}

func TestReplaces(t *testing.T) {
	e := newRealEnv(t)
	both := func() *rlsv3.RateLimitRequest {
		return request("rls", desc("key_1", "value_1", "user", "bkthomps"), desc("key_2", "value_2", "user", "bkthomps"))
	}
	for i := 0; i < 7; i++ {
		resp := e.call(t, both())
		if resp.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("call %d: %v (the replaced 5/s limit must not apply)", i, resp.OverallCode)
		}
		if st := resp.Statuses[0]; st.CurrentLimit != nil || st.Code != rlsv3.RateLimitResponse_OK {
			t.Fatalf("call %d: replaced status %v", i, st)
		}
		if st := resp.Statuses[1]; st.CurrentLimit.GetRequestsPerUnit() != 10 || st.LimitRemaining != uint32(9-i) {
			t.Fatalf("call %d: replacing status %v", i, st)
		}
	}
	if _, requests := e.store.Counts(); requests != 7 {
		t.Fatalf("store saw %d requests, want 7 (replaced limits are not evaluated)", requests)
	}
	// The replaced limit consumed nothing.
	if resp := e.call(t, request("rls", desc("key_1", "value_1", "user", "bkthomps"))); resp.Statuses[0].LimitRemaining != 4 {
		t.Fatalf("specific_limit remaining %d, want 4", resp.Statuses[0].LimitRemaining)
	}
}

func TestLimitOverride(t *testing.T) {
	e := newRealEnv(t)
	ov := func(value string) *rlv3.RateLimitDescriptor {
		d := desc("user", value)
		d.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_HOUR}
		return d
	}
	resp := e.call(t, request("rls", ov("erin")))
	if st := resp.Statuses[0]; st.Code != rlsv3.RateLimitResponse_OK || st.CurrentLimit.GetRequestsPerUnit() != 1 || st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_HOUR {
		t.Fatalf("override: %v", st)
	}
	if resp := e.call(t, request("rls", ov("erin"))); resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("override not enforced: %v", resp.OverallCode)
	}
	// An override applies to a descriptor no rule matches too (the
	// reference's behaviour), but only in a known domain.
	d := desc("anything", "v")
	d.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: typev3.RateLimitUnit_SECOND}
	if resp := e.call(t, request("rls", d)); resp.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 5 {
		t.Fatalf("override of an unmatched descriptor: %v", resp.Statuses[0])
	}
	// unit_multiplier widens the window: 2 per 3 seconds, reported as such.
	m := desc("user", "gil")
	m.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typev3.RateLimitUnit_SECOND, UnitMultiplier: wrapperspb.UInt32(3)}
	resp = e.call(t, request("rls", m))
	if st := resp.Statuses[0]; st.CurrentLimit.GetUnitMultiplier().GetValue() != 3 || st.LimitRemaining != 1 || st.DurationUntilReset.AsDuration() > 3*time.Second {
		t.Fatalf("override with unit_multiplier: %v", st)
	}
	d2 := desc("anything", "v")
	d2.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: typev3.RateLimitUnit_SECOND}
	if resp := e.call(t, request("elsewhere", d2)); resp.Statuses[0].CurrentLimit != nil {
		t.Fatalf("override in an unknown domain: %v", resp.Statuses[0])
	}
}

func TestHitsAddend(t *testing.T) {
	e := newRealEnv(t)
	// Request-level hits_addend 2: 3-2 = 1 left.
	req := request("rls", desc("user", "fay"))
	req.HitsAddend = 2
	if resp := e.call(t, req); resp.Statuses[0].LimitRemaining != 1 {
		t.Fatalf("hits_addend 2: remaining %d", resp.Statuses[0].LimitRemaining)
	}
	// A descriptor's hits_addend overrides the request's; an explicit 0
	// checks without taking anything (probe_test.go has the rest).
	req = request("rls", withHits(desc("user", "gus"), 3), withHits(desc("user", "hal"), 0), desc("user", "ida"))
	req.HitsAddend = 2
	resp := e.call(t, req)
	if r := []uint32{resp.Statuses[0].LimitRemaining, resp.Statuses[1].LimitRemaining, resp.Statuses[2].LimitRemaining}; r[0] != 0 || r[1] != 3 || r[2] != 1 {
		t.Fatalf("per-descriptor hits: remaining %v, want [0 3 1]", r)
	}
	// A cost above the limit can never fit: OVER_LIMIT, nothing consumed.
	resp = e.call(t, request("rls", withHits(desc("user", "jan"), 4)))
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("cost 4 of 3: %v", resp.OverallCode)
	}
	if resp := e.call(t, request("rls", desc("user", "jan"))); resp.Statuses[0].LimitRemaining != 2 {
		t.Fatalf("the oversized call consumed: remaining %d", resp.Statuses[0].LimitRemaining)
	}
	// Huge values are clamped, not wrapped.
	if resp := e.call(t, request("rls", withHits(desc("user", "kim"), math.MaxUint64))); resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("hits MaxUint64: %v", resp.OverallCode)
	}
}

func TestHeaderModes(t *testing.T) {
	e := newRealEnv(t)
	// retry_after: nothing on OK, only Retry-After on OVER_LIMIT.
	if resp := e.call(t, request("rls", desc("login", "l"))); len(resp.ResponseHeadersToAdd) != 0 {
		t.Fatalf("retry_after mode, OK: %v", headers(resp))
	}
	resp := e.call(t, request("rls", desc("login", "l")))
	hd := headers(resp)
	if len(hd) != 2 || hd[headerRetryAfter] != "50" || hd[headerContentType] != "application/json" {
		t.Fatalf("retry_after mode, over: %v", hd)
	}
	// none: no rate-limit headers, and a body that names nothing.
	e.call(t, request("rls", desc("secret_route", "s")))
	resp = e.call(t, request("rls", desc("secret_route", "s")))
	hd = headers(resp)
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || len(hd) != 1 || hd[headerContentType] == "" {
		t.Fatalf("none mode: %v", hd)
	}
	if string(resp.RawBody) != `{"error":"rate_limited"}` {
		t.Fatalf("none mode body %s", resp.RawBody)
	}
	// The stricter mode wins when rules disagree.
	resp = e.call(t, request("rls", desc("user", "lee"), desc("secret_route", "t")))
	if len(resp.ResponseHeadersToAdd) != 0 {
		t.Fatalf("full + none: %v", headers(resp))
	}
}

func TestDefaultHeadersOption(t *testing.T) {
	e := newRealEnv(t, func(c *Config) { c.DefaultHeaders = descriptors.HeadersRetryAfter })
	if resp := e.call(t, request("rls", desc("user", "max"))); len(resp.ResponseHeadersToAdd) != 0 {
		t.Fatalf("default retry_after, OK: %v", headers(resp))
	}
	// A rule's own setting beats the default.
	e2 := newRealEnv(t, func(c *Config) { c.DefaultHeaders = descriptors.HeadersNone })
	if hd := headers(e2.call(t, request("rls", desc("user", "max")))); hd[headerLimit] != "" {
		t.Fatalf("default none: %v", hd)
	}
}

func TestFailureModesWithRealRules(t *testing.T) {
	for _, kind := range []limiter.OutcomeKind{limiter.Unavailable, limiter.Indeterminate, limiter.Incompatible} {
		t.Run(kind.String(), func(t *testing.T) {
			e := newRealEnv(t)
			e.setFail(kind)
			resp := e.call(t, request("rls", desc("fail_open", "o")))
			if resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].CurrentLimit != nil || len(resp.ResponseHeadersToAdd) != 0 {
				t.Fatalf("fail open: %v", resp)
			}
			resp = e.call(t, request("rls", desc("fail_closed", "c")))
			hd := headers(resp)
			want := "1"
			if kind == limiter.Unavailable {
				want = "3" // the store's 2.5s hint, rounded up
			}
			if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || hd[headerRetryAfter] != want || hd[headerRemaining] != "0" {
				t.Fatalf("fail closed: %v %v", resp.OverallCode, hd)
			}
			m := e.metrics(t)
			if counterValue(m, `envoy_rls_store_errors_total{outcome="`+kind.String()+`"}`) != "2" ||
				counterValue(m, `envoy_rls_fallback_total{mode="open"}`) != "1" ||
				counterValue(m, `envoy_rls_fallback_total{mode="closed"}`) != "1" {
				t.Fatalf("metrics:\n%s", m)
			}
			if n := e.logs.FilterMessage(msgStoreFailure).Len(); n != 2 {
				t.Fatalf("%d store failure logs, want 2", n)
			}
		})
	}
}

func TestOneBatchPerCallAndDeadline(t *testing.T) {
	e := newRealEnv(t)
	e.call(t, request("rls", desc("user", "a"), desc("route", "/tight"), desc("bucket", "b"), desc("internal", "i"), desc("nothing", "n")))
	if b, r := e.store.Counts(); b != 1 || r != 3 {
		t.Fatalf("store saw %d batches with %d requests, want 1 with 3", b, r)
	}
	if _, deadline := e.store.Last(); !deadline {
		t.Fatal("the call's deadline did not reach Store.Evaluate")
	}
	// A call whose deadline has passed does no work.
	ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-ctx.Done()
	if _, err := e.client.ShouldRateLimit(ctx, request("rls", desc("user", "a"))); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("expired deadline: %v", err)
	}
}

func TestNegativeHitsAreNotEvaluated(t *testing.T) {
	e := newRealEnv(t)
	d := desc("user", "neg")
	d.IsNegativeHits = true
	resp := e.call(t, request("rls", d))
	if resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].CurrentLimit != nil {
		t.Fatalf("negative hits: %v", resp)
	}
	if b, _ := e.store.Counts(); b != 0 {
		t.Fatal("a negative-hits descriptor reached the store")
	}
}

func TestBounds(t *testing.T) {
	e := newRealEnv(t)
	long := strings.Repeat("x", MaxValueBytes+1)
	many := func(n int) []*rlv3.RateLimitDescriptor {
		ds := make([]*rlv3.RateLimitDescriptor, n)
		for i := range ds {
			ds[i] = desc("user", "u")
		}
		return ds
	}
	deep := &rlv3.RateLimitDescriptor{}
	for i := 0; i <= MaxEntries; i++ {
		deep.Entries = append(deep.Entries, &rlv3.RateLimitDescriptor_Entry{Key: "k", Value: "v"})
	}
	badUnit := desc("user", "u")
	badUnit.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1}
	multiplier := desc("user", "u")
	multiplier.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_YEAR, UnitMultiplier: wrapperspb.UInt32(11)}
	for _, tc := range []struct {
		name string
		req  *rlsv3.RateLimitRequest
		want string
	}{
		{"empty domain", request("", desc("user", "u")), "domain is empty"},
		{"long domain", request(strings.Repeat("d", MaxDomainBytes+1), desc("user", "u")), "domain is 1025 bytes, above the 1024-byte bound"},
		{"no descriptors", request("rls"), "descriptors is empty"},
		{"too many descriptors", &rlsv3.RateLimitRequest{Domain: "rls", Descriptors: many(MaxDescriptors + 1)}, "65 descriptors, above the bound of 64"},
		{"no entries", request("rls", &rlv3.RateLimitDescriptor{}), "descriptor 0 has no entries"},
		{"too many entries", request("rls", desc("user", "u"), deep), "descriptor 1 has 17 entries, above the bound of 16"},
		{"empty key", request("rls", desc("", "v")), "descriptor 0 entry 0: key is empty"},
		{"long key", request("rls", desc(long, "v")), "key is 1025 bytes, above the 1024-byte bound"},
		{"long value", request("rls", desc("user", long)), "descriptor 0 entry 0: value is 1025 bytes, above the 1024-byte bound"},
		{"override unit", request("rls", badUnit), "limit override unit 0 is not one of"},
		{"override multiplier", request("rls", multiplier), "limit override window (unit × unit_multiplier 11) is above the bound of"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.client.ShouldRateLimit(context.Background(), tc.req)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want InvalidArgument mentioning %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "xxxx") {
				t.Fatal("the message echoes the value")
			}
		})
	}
	// Exactly at the bounds is fine.
	atBound := &rlsv3.RateLimitRequest{Domain: "rls", Descriptors: many(MaxDescriptors)}
	atBound.Descriptors[0] = desc("user", strings.Repeat("v", MaxValueBytes))
	if resp := e.call(t, atBound); len(resp.Statuses) != MaxDescriptors {
		t.Fatalf("%d statuses", len(resp.Statuses))
	}
	if v := counterValue(e.metrics(t), `envoy_rls_calls_total{code="InvalidArgument"}`); v != "11" {
		t.Fatalf("calls_total{InvalidArgument} = %q", v)
	}
}

func TestNearLimitMetric(t *testing.T) {
	e := newRealEnv(t)
	// 3 per minute: the 3rd call leaves 0 (100% used); the 2nd leaves 1
	// (67%) — only the 3rd is near the limit.
	for i := 0; i < 3; i++ {
		e.call(t, request("rls", desc("user", "near")))
	}
	if v := counterValue(e.metrics(t), `envoy_rls_near_limit_total{domain="rls",policy="rls:per-user"}`); v != "1" {
		t.Fatalf("near_limit_total = %q", v)
	}
}

func TestDenialLogs(t *testing.T) {
	e := newRealEnv(t)
	ctx := metadataContext("x-request-id", "req-123")
	for i := 0; i < 4; i++ {
		if _, err := e.client.ShouldRateLimit(ctx, request("rls", desc("user", "nia"))); err != nil {
			t.Fatal(err)
		}
	}
	logs := e.logs.FilterMessage(msgDenied).All()
	if len(logs) != 1 {
		t.Fatalf("%d denial logs, want 1", len(logs))
	}
	f := logs[0].ContextMap()
	if f["policy"] != "rls:per-user" || f["x_request_id"] != "req-123" || len(f["subject"].(string)) != 8 || f["retry_after_seconds"] != int64(50) || f["remaining"] != uint32(0) {
		t.Fatalf("denial log fields %v", f)
	}
}

func TestDenialLogsAreSampled(t *testing.T) {
	e := newRealEnv(t, func(c *Config) { c.DenialLogFirst = 2; c.DenialLogThereafter = 1000 })
	for i := 0; i < 50; i++ {
		e.call(t, request("rls", desc("route", "/tight")))
	}
	if n := e.logs.FilterMessage(msgDenied).Len(); n != 2 {
		t.Fatalf("%d denial lines for 49 denials, want 2 (sampled)", n)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func metadataContext(kv ...string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), kv...)
}

func TestOverrideMetricsUseAFixedLabel(t *testing.T) {
	e := newRealEnv(t)
	d := desc("request-chosen-key", "v")
	d.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_SECOND}
	e.call(t, request("rls", d))
	m := e.metrics(t)
	if strings.Contains(m, "request-chosen-key") || counterValue(m, `envoy_rls_decisions_total{domain="rls",policy="override",result="ok"}`) != "1" {
		t.Fatalf("override metrics:\n%s", m)
	}
}

// TestConcurrencyHeaders: a concurrency limit is listed in X-RateLimit-Limit
// without a window (its lease_ttl is no window: a lease is held until its
// release), so "3 in flight" beside "3 an hour" (lease_ttl 1h) are two
// quota policies; the rate limit keeps its w. X-RateLimit-Reset of a
// binding concurrency limit is when its last lease expires.
func TestConcurrencyHeaders(t *testing.T) {
	snap := rulesOf(t, `
domain: ai
descriptors:
  - key: team
    rate_limits:
      - concurrency: 3
        lease_ttl: 1h
      - unit: hour
        requests_per_unit: 3
  - key: tenant
    rate_limit:
      concurrency: 4
      lease_ttl: 10m
`)
	clock := limitertest.NewClock(t0)
	h := newHarness(t, func() Rules { return snap }, memStore(t, clock, 1000), clock)
	for _, s := range []struct {
		desc                    *rlv3.RateLimitDescriptor
		limit, remaining, reset string
	}{
		{desc("tenant", "t"), "4, 4", "3", "600"},
		{desc("team", "a"), "3, 3, 3;w=3600", "2", "3600"},
	} {
		hd := headers(h.call(t, request("ai", s.desc)))
		if hd[headerLimit] != s.limit || hd[headerRemaining] != s.remaining || hd[headerReset] != s.reset {
			t.Errorf("%v: headers %v, want limit %q, remaining %s, reset %s", s.desc.GetEntries(), hd, s.limit, s.remaining, s.reset)
		}
	}
}
