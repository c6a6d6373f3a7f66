package limiter_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// batchIn is one request of a batch-rule table: its policy, its mode and
// the outcome it is given.
type batchIn struct {
	p    *limiter.Policy
	mode limiter.Role
	out  limiter.Outcome
}

// batchPolicies are the policies the batch-rule tables use: fail closed,
// fail open, and a shadow policy.
func batchPolicies(t *testing.T) (closed, open, shadow *limiter.Policy) {
	t.Helper()
	closed = fixed(t, 5, time.Second)
	open = limitertest.Policy(t, limiter.PolicySpec{ID: "open", Algorithm: limiter.FixedWindow, FailureMode: limiter.FailOpen,
		Params: limiter.FixedWindowParams{Limit: 5, Window: time.Second}})
	shadow = limitertest.Policy(t, limiter.PolicySpec{ID: "sp", Algorithm: limiter.FixedWindow, Shadow: true,
		Params: limiter.FixedWindowParams{Limit: 5, Window: time.Second}})
	return closed, open, shadow
}

// batchOf builds the batch and its outcomes from a table row.
func batchOf(reqs []batchIn) ([]limiter.Request, []limiter.Outcome) {
	batch := make([]limiter.Request, len(reqs))
	out := make([]limiter.Outcome, len(reqs))
	for i, r := range reqs {
		batch[i] = limiter.Request{Policy: r.p, Role: r.mode, Cost: 1}
		out[i] = r.out
	}
	return batch, out
}

// batchCase is one row of a batch-rule table: the batch, with the outcome
// of each request, and what the rule answers.
type batchCase struct {
	name string
	reqs []batchIn
	want bool
}

// checkBatchRule runs rule, named name in messages, over a table.
func checkBatchRule(t *testing.T, name string, rule func([]limiter.Request, []limiter.Outcome) bool, cases []batchCase) {
	t.Helper()
	for _, tc := range cases {
		batch, out := batchOf(tc.reqs)
		if got := rule(batch, out); got != tc.want {
			t.Errorf("%s: %s = %v, want %v", tc.name, name, got, tc.want)
		}
	}
}

func TestCommits(t *testing.T) {
	closed, open, shadowPolicy := batchPolicies(t)
	allow := limiter.EvaluatedOutcome(limiter.Decision{Allowed: true})
	deny := limiter.EvaluatedOutcome(limiter.Decision{})
	fail := limiter.UnavailableOutcome(0, limiter.CategoryNotConnected, nil)
	o, s, q, c, pr, qp := limiter.RoleOrdinary, limiter.RoleShadow, limiter.RoleQuota, limiter.RoleCheck, limiter.RoleProbe, limiter.RoleQuotaProbe
	type in = batchIn
	checkBatchRule(t, "Commits", limiter.Commits, []batchCase{
		{"a probe that allows", []in{{closed, o, allow}, {closed, pr, allow}}, true},
		{"a probe that denies blocks", []in{{closed, o, allow}, {closed, pr, deny}}, false},
		{"a probe alone denies", []in{{closed, pr, deny}}, false},
		{"a fail-closed probe failure blocks", []in{{closed, pr, fail}}, false},
		{"a fail-open probe failure takes no part", []in{{closed, o, allow}, {open, pr, fail}}, true},
		{"a probe of a shadow policy never blocks", []in{{closed, o, allow}, {shadowPolicy, pr, deny}}, true},
		{"a probe is not a quota", []in{{closed, q, allow}, {closed, pr, deny}}, false},
		{"a quota probe denies, another quota allows", []in{{closed, qp, deny}, {closed, q, allow}}, true},
		{"a quota probe allows, every other quota denies", []in{{closed, q, deny}, {closed, qp, allow}}, true},
		{"every quota denies, a probe among them", []in{{closed, o, allow}, {closed, q, deny}, {closed, qp, deny}}, false},
		{"a quota probe alone denies", []in{{closed, qp, deny}}, false},
		{"a quota probe of a shadow policy never blocks", []in{{shadowPolicy, qp, deny}}, true},
		{"empty", nil, true},
		{"all ordinary allow", []in{{closed, o, allow}, {closed, o, allow}}, true},
		{"one ordinary denies", []in{{closed, o, allow}, {closed, o, deny}}, false},
		{"shadow denial never blocks", []in{{closed, o, allow}, {closed, s, deny}}, true},
		{"shadow policy never blocks", []in{{closed, o, allow}, {shadowPolicy, o, deny}}, true},
		{"check never blocks", []in{{closed, o, allow}, {closed, c, deny}}, true},
		{"check of a shadow policy", []in{{shadowPolicy, c, deny}}, true},
		{"one quota allows", []in{{closed, q, deny}, {closed, q, allow}}, true},
		{"every quota denies", []in{{closed, o, allow}, {closed, q, deny}, {closed, q, deny}}, false},
		{"quota allows, ordinary denies", []in{{closed, o, deny}, {closed, q, allow}}, false},
		{"fail-closed failure blocks", []in{{closed, o, allow}, {closed, o, fail}}, false},
		{"fail-open failure takes no part", []in{{closed, o, allow}, {open, o, fail}}, true},
		{"fail-closed quota failure is a quota denial", []in{{closed, q, fail}, {closed, q, deny}}, false},
		{"fail-open quota failure takes no part", []in{{open, q, fail}, {closed, q, allow}}, true},
		{"only a fail-open quota failure", []in{{open, q, fail}}, true},
		{"nil policy fails closed", []in{{nil, o, fail}}, false},
	})
}

// TestCheckOnly: with the undecided requests counted as allowing, the batch
// is resent as checks exactly when the known outcomes alone block it.
func TestCheckOnly(t *testing.T) {
	closed, open, _ := batchPolicies(t)
	var undecided limiter.Outcome
	deny := limiter.EvaluatedOutcome(limiter.Decision{})
	invalid := limiter.UnavailableOutcome(0, limiter.CategoryInvalidRequest, nil)
	o, s, q, c, pr := limiter.RoleOrdinary, limiter.RoleShadow, limiter.RoleQuota, limiter.RoleCheck, limiter.RoleProbe
	type in = batchIn
	checkBatchRule(t, "CheckOnly", limiter.CheckOnly, []batchCase{
		{"a known probe denial", []in{{closed, o, undecided}, {closed, pr, deny}}, true},
		{"an undecided probe", []in{{closed, pr, undecided}, {closed, o, undecided}}, false},
		{"nothing known", []in{{closed, o, undecided}, {closed, q, undecided}}, false},
		{"an ordinary denial is known", []in{{closed, o, undecided}, {closed, o, deny}}, true},
		{"a known shadow denial", []in{{closed, o, undecided}, {closed, s, deny}}, false},
		{"a known check denial", []in{{closed, o, undecided}, {closed, c, deny}}, false},
		{"one quota denial of two", []in{{closed, q, undecided}, {closed, q, deny}}, false},
		{"every quota denial is known", []in{{closed, o, undecided}, {closed, q, deny}, {closed, q, deny}}, true},
		{"a fail-closed invalid request", []in{{closed, o, undecided}, {closed, o, invalid}}, true},
		{"a fail-open invalid request", []in{{closed, o, undecided}, {open, o, invalid}}, false},
	})
	// Commits counts an undecided (zero) outcome as a failure, not an allow.
	if limiter.Commits([]limiter.Request{{Policy: closed, Cost: 1}}, []limiter.Outcome{undecided}) {
		t.Error("Commits: an undecided outcome committed")
	}
}

// TestQuotaBlocks: quota-mode limits block only when there is one and none
// allows; shadow and fail-open failures take no part.
func TestQuotaBlocks(t *testing.T) {
	closed, open, shadowPolicy := batchPolicies(t)
	allow := limiter.EvaluatedOutcome(limiter.Decision{Allowed: true})
	deny := limiter.EvaluatedOutcome(limiter.Decision{})
	fail := limiter.UnavailableOutcome(0, limiter.CategoryNotConnected, nil)
	o, q, qp := limiter.RoleOrdinary, limiter.RoleQuota, limiter.RoleQuotaProbe
	type in = batchIn
	checkBatchRule(t, "QuotaBlocks", limiter.QuotaBlocks, []batchCase{
		{"a quota probe is a quota limit", []in{{closed, q, deny}, {closed, qp, deny}}, true},
		{"an allowing quota probe", []in{{closed, q, deny}, {closed, qp, allow}}, false},
		{"no quota", []in{{closed, o, deny}}, false},
		{"every quota denies", []in{{closed, q, deny}, {closed, q, deny}}, true},
		{"one quota allows", []in{{closed, q, deny}, {closed, q, allow}}, false},
		{"a shadow policy is not a quota", []in{{shadowPolicy, q, deny}}, false},
		{"fail-closed failure is a quota denial", []in{{closed, q, fail}}, true},
		{"fail-open failure takes no part", []in{{open, q, fail}, {closed, q, deny}}, true},
		{"only a fail-open failure", []in{{open, q, fail}}, false},
	})
}

func TestRequestRoleAndValidate(t *testing.T) {
	p := fixed(t, 5, time.Second)
	sp := limitertest.Policy(t, limiter.PolicySpec{ID: "sp", Algorithm: limiter.FixedWindow, Shadow: true,
		Params: limiter.FixedWindowParams{Limit: 5, Window: time.Second}})
	for _, tc := range []struct {
		r    limiter.Request
		want limiter.Role
	}{
		{limiter.Request{Policy: p}, limiter.RoleOrdinary},
		{limiter.Request{Policy: p, Role: limiter.RoleQuota}, limiter.RoleQuota},
		{limiter.Request{Policy: sp, Role: limiter.RoleQuota}, limiter.RoleShadow},
		{limiter.Request{Policy: sp, Role: limiter.RoleCheck}, limiter.RoleCheck},
		{limiter.Request{Policy: p, Role: limiter.RoleProbe}, limiter.RoleProbe},
		{limiter.Request{Policy: sp, Role: limiter.RoleProbe}, limiter.RoleCheck},
		{limiter.Request{Policy: p, Role: limiter.RoleQuotaProbe}, limiter.RoleQuotaProbe},
		{limiter.Request{Policy: sp, Role: limiter.RoleQuotaProbe}, limiter.RoleCheck},
		{limiter.Request{Policy: p, Role: 9}, limiter.RoleOrdinary},
		{limiter.Request{}, limiter.RoleOrdinary},
	} {
		if got := tc.r.EffectiveRole(); got != tc.want {
			t.Errorf("Role of %+v = %v, want %v", tc.r, got, tc.want)
		}
	}
	if err := (limiter.Request{Policy: p, Cost: 1, Role: 9}).Validate(); err == nil {
		t.Error("unknown mode validated")
	}
	if err := (limiter.Request{Policy: p, Cost: 1, Role: limiter.RoleQuotaProbe + 1}).Validate(); err == nil {
		t.Error("mode 6 validated")
	}
	if err := (limiter.Request{Policy: p, Cost: 1, Role: limiter.RoleProbe}).Validate(); err != nil {
		t.Errorf("probe: %v", err)
	}
}

func TestRoleConsumesAndBlocks(t *testing.T) {
	for _, tt := range []struct {
		role                    limiter.Role
		consumes, blocks, quota bool
		name                    string
	}{
		{limiter.RoleOrdinary, true, true, false, "ordinary"},
		{limiter.RoleShadow, true, false, false, "shadow"},
		{limiter.RoleQuota, true, true, true, "quota"},
		{limiter.RoleCheck, false, false, false, "check"},
		{limiter.RoleProbe, false, true, false, "probe"},
		{limiter.RoleQuotaProbe, false, true, true, "quota-probe"},
	} {
		if got := tt.role.Consumes(); got != tt.consumes {
			t.Errorf("%v.Consumes() = %v, want %v", tt.role, got, tt.consumes)
		}
		if got := tt.role.Blocks(); got != tt.blocks {
			t.Errorf("%v.Blocks() = %v, want %v", tt.role, got, tt.blocks)
		}
		if got := tt.role.Quota(); got != tt.quota {
			t.Errorf("%v.Quota() = %v, want %v", tt.role, got, tt.quota)
		}
		if got := tt.role.String(); got != tt.name {
			t.Errorf("String() = %q, want %q", got, tt.name)
		}
	}
}

// TestSummarize: a batch's outcomes named in one word, a failure winning
// over a denial and the first failure over later ones.
func TestSummarize(t *testing.T) {
	allow := limiter.EvaluatedOutcome(limiter.Decision{Allowed: true})
	deny := limiter.EvaluatedOutcome(limiter.Decision{})
	unavailable := limiter.UnavailableOutcome(0, limiter.CategoryNotConnected, nil)
	indeterminate := limiter.IndeterminateOutcome(0, nil)
	incompatible := limiter.IncompatibleOutcome(limiter.CategoryReplyMalformed, nil)
	for _, tc := range []struct {
		name                 string
		outs                 []limiter.Outcome
		wantOutcome, wantCat string
	}{
		{"empty", nil, "allowed", ""},
		{"every request allows", []limiter.Outcome{allow, allow}, "allowed", ""},
		{"one denies", []limiter.Outcome{allow, deny, allow}, "denied", ""},
		{"a failure after a denial", []limiter.Outcome{deny, unavailable}, "unavailable", limiter.CategoryNotConnected},
		{"the first failure", []limiter.Outcome{allow, incompatible, unavailable}, "incompatible", limiter.CategoryReplyMalformed},
		{"no category: the kind", []limiter.Outcome{indeterminate, deny}, "indeterminate", "indeterminate"},
	} {
		outcome, failure := limiter.Summarize(tc.outs)
		if outcome != tc.wantOutcome || failure != tc.wantCat {
			t.Errorf("%s: Summarize = %q, %q; want %q, %q", tc.name, outcome, failure, tc.wantOutcome, tc.wantCat)
		}
	}
}

// TestFailIfEnded: an ended context answers every request Unavailable with
// the deadline category and the cause; a live one leaves the outcomes alone.
func TestFailIfEnded(t *testing.T) {
	out := make([]limiter.Outcome, 3)
	if limiter.FailIfEnded(context.Background(), out, "test store") {
		t.Fatal("a live context reported as ended")
	}
	for i, o := range out {
		if o.Kind != 0 {
			t.Fatalf("outcome %d set for a live context: %+v", i, o)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if !limiter.FailIfEnded(ctx, out, "test store") {
		t.Fatal("an ended context not reported")
	}
	for i, o := range out {
		if o.Kind != limiter.Unavailable || o.Category != limiter.CategoryDeadline || !errors.Is(o.Err, context.Canceled) ||
			!strings.HasPrefix(o.Err.Error(), "test store: ") {
			t.Errorf("outcome %d = %+v, want Unavailable deadline wrapping the cancellation", i, o)
		}
	}
}

// TestPendingEvaluate: the undecided requests reach the store, as checks
// when the known outcomes block the batch (a charge keeps its role), their
// outcomes land in their places; a batch with nothing known goes as it is,
// one with everything known not at all.
func TestPendingEvaluate(t *testing.T) {
	closed, _, _ := batchPolicies(t)
	charge := limitertest.Policy(t, limiter.PolicySpec{ID: "charge", Algorithm: limiter.FixedWindow, Charge: limiter.ChargeAlways,
		Params: limiter.FixedWindowParams{Limit: 5, Window: time.Second}})
	denied := limiter.EvaluatedOutcome(limiter.Decision{})
	allowed := limiter.EvaluatedOutcome(limiter.Decision{Allowed: true})
	cases := []struct {
		name  string
		reqs  []batchIn
		roles []limiter.Role // of the requests the store gets; nil: not called
		same  bool           // the store gets the caller's batch itself
	}{
		{"nothing known", []batchIn{{p: closed}, {p: closed}}, []limiter.Role{limiter.RoleOrdinary, limiter.RoleOrdinary}, true},
		{"everything known", []batchIn{{p: closed, out: denied}}, nil, false},
		{"an allow known", []batchIn{{p: closed, out: allowed}, {p: closed, mode: limiter.RoleQuota}}, []limiter.Role{limiter.RoleQuota}, false},
		{"a denial known", []batchIn{{p: closed}, {p: closed, out: denied}, {p: charge}}, []limiter.Role{limiter.RoleCheck, limiter.RoleOrdinary}, false},
	}
	for _, tc := range cases {
		batch, out := batchOf(tc.reqs)
		var got []limiter.Request
		var p limiter.Pending
		p.Evaluate(context.Background(), batch, out, func(_ context.Context, reqs []limiter.Request, outs []limiter.Outcome) {
			got = reqs
			for k := range outs {
				outs[k] = limiter.EvaluatedOutcome(limiter.Decision{Allowed: true, Remaining: int64(k + 1)})
			}
		})
		if (got == nil) != (tc.roles == nil) || len(got) != len(tc.roles) || (len(got) > 0 && (&got[0] == &batch[0]) != tc.same) {
			t.Fatalf("%s: the store got %d requests (the batch itself %t), want %d (%t)", tc.name, len(got), len(got) > 0 && &got[0] == &batch[0], len(tc.roles), tc.same)
		}
		k := 0
		for i := range batch {
			if tc.reqs[i].out.Kind != 0 {
				if out[i] != tc.reqs[i].out {
					t.Errorf("%s: request %d's known outcome changed: %+v", tc.name, i, out[i])
				}
				continue
			}
			if got[k].Role != tc.roles[k] || out[i].Decision.Remaining != int64(k+1) {
				t.Errorf("%s: request %d sent as %s, outcome %+v; want %s and the store's %d-th outcome", tc.name, i, got[k].Role, out[i].Decision, tc.roles[k], k+1)
			}
			k++
		}
	}
}

// fixed is a fixed window of limit per window.
func fixed(t testing.TB, limit int64, window time.Duration) *limiter.Policy {
	t.Helper()
	return limitertest.Policy(t, limiter.PolicySpec{Algorithm: limiter.FixedWindow, Params: limiter.FixedWindowParams{Limit: limit, Window: window}})
}
