// Package limitertest holds the behavioural suite every limiter.Store
// passes, written once and run by the tests of each store: the memory
// store, the Redis store (standalone and Cluster) and the local deny cache
// (over memory and over Redis). Its parts:
//
//   - Run: the batch rule (a request consumes on every limit that admits it
//     or on none), roles, penalty boxes and calendar periods, on a clock the
//     test need not set (Cases);
//   - RunTimed: calendar boundaries, penalty blocks, their doubling and
//     decay, and sliding logs over time, on a fresh store per case deciding
//     by a Clock the suite sets (TimedCases); Redis decides with its own
//     TIME, which no test sets, so it runs Run and RunReset and its side of
//     time is the Go↔Lua parity of pkg/limiter/redis;
//   - RunReset: limiter.Resetter, one state and a whole policy;
//   - RunLeases: the lease scripts of concurrency limits;
//   - Exactness, LeaseExactness: concurrent callers (Hammer) on one or
//     more stores.
//
// A store joins by calling RunSuite from its own tests with a Suite (its
// stores: for RunTimed, a NewStore that builds one on a given clock) and a
// Config, or the parts on their own.
package limitertest

import (
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/calendar"
)

// FarWindow is an epoch-aligned window whose next boundary is years away, so
// that a table never straddles two windows on a real clock.
const FarWindow = 3650 * 24 * time.Hour

// Config says how the suites build requests.
type Config struct {
	// Prefix makes policy IDs and subjects unique to one run (stores that
	// outlive the test, such as Redis, keep state). (Required)
	Prefix string
	// Tag returns the hash tag of a request of case c; nil leaves every
	// tag zero (derived from the subject). (Optional)
	Tag func(c string) limiter.Tag
	// Clock is the clock the store decides by, which a timed case sets
	// (Case.Start). (Required by timed cases; RunTimed sets it)
	Clock *Clock
}

// Want is the expected outcome of one request.
type Want struct {
	Allowed, Consumed bool
	Remaining         int64
	// Failed: the request fails (Unavailable) instead.
	Failed bool
	// Blocked: denied by the policy's penalty box (Decision.Blocked).
	Blocked bool
	// Retry is the decision's RetryAfter, and Reset its ResetAt unless
	// zero: checked by timed cases only (on a running clock both move). A
	// deny cache's answer (limiter.SourceLocalCache) may say up to 1 ms
	// less than Retry: it expires that much early, the stores' resolution.
	Retry time.Duration
	Reset time.Time
}

// Req is one request of a step: the limit (an index into the case's
// policies), the subject name, the cost and the mode.
type Req struct {
	Limit   int
	Subject string
	Cost    int64
	Mode    limiter.Role
}

// Step is one batch and what each request must answer. In a timed case
// the clock is first set to At, unless zero.
type Step struct {
	Batch []Req
	Want  []Want
	At    time.Time
}

// Case is one named scenario: its limits and its steps, in order.
type Case struct {
	Name     string
	Policies []limiter.PolicySpec
	Steps    []Step
	// Start makes the case timed: it runs on a store deciding by
	// Config.Clock, set to Start, and checks Want.Retry and Want.Reset.
	Start time.Time
	// Subjects, when above 1, runs every step for that many subjects in
	// turn (each request's subject suffixed with the subject's number), so
	// that a bounded store holds some of them in its overflow.
	Subjects int
}

func fw(id string, limit int64) limiter.PolicySpec {
	return limiter.PolicySpec{ID: id, Algorithm: limiter.FixedWindow, Params: limiter.FixedWindowParams{Limit: limit, Window: FarWindow}}
}

func tb(id string, capacity int64) limiter.PolicySpec {
	// One token a year: no refill during a test.
	return limiter.PolicySpec{ID: id, Algorithm: limiter.TokenBucket, Params: limiter.TokenBucketParams{Capacity: capacity, RefillAmount: 1, RefillPeriod: 365 * 24 * time.Hour}}
}

// penalized is fw with a penalty box of an hour.
func penalized(id string, limit int64) limiter.PolicySpec {
	spec := fw(id, limit)
	spec.Penalty = limiter.Penalty{Duration: time.Hour, MaxDuration: 4 * time.Hour, Decay: time.Hour}
	return spec
}

func slPenalized(id string, limit int64) limiter.PolicySpec {
	spec := sl(id, limit)
	spec.Penalty = limiter.Penalty{Duration: time.Hour, MaxDuration: 4 * time.Hour, Decay: time.Hour}
	return spec
}

func sw(id string, limit int64) limiter.PolicySpec {
	// The longest window a sliding counter takes is about 104 days.
	return limiter.PolicySpec{ID: id, Algorithm: limiter.SlidingWindow, Params: limiter.SlidingWindowParams{Limit: limit, Window: 100 * 24 * time.Hour}}
}

func sl(id string, limit int64) limiter.PolicySpec {
	// Hits leave after 100 days: none during a test.
	return limiter.PolicySpec{ID: id, Algorithm: limiter.SlidingLog, Params: limiter.SlidingLogParams{Limit: limit, Window: 100 * 24 * time.Hour}}
}

var (
	allowedConsumed = func(rem int64) Want { return Want{Allowed: true, Consumed: true, Remaining: rem} }
	allowedHeld     = func(rem int64) Want { return Want{Allowed: true, Remaining: rem} }
	denied          = func(rem int64) Want { return Want{Remaining: rem} }
	blocked         = Want{Blocked: true}
)

// Cases is the batch-rule parity table (chargeCases included).
func Cases() []Case {
	return slices.Concat(batchCases(), roleCases(), penaltyCases(), chargeCases())
}

// batchCases: a batch commits on every limit or on none, by role.
func batchCases() []Case {
	const user, tenant = 0, 1
	o, s, q, c := limiter.RoleOrdinary, limiter.RoleShadow, limiter.RoleQuota, limiter.RoleCheck
	return []Case{
		{
			// The case: the tenant denies, so the user's quota is
			// not spent.
			Name:     "tenant denies: user unchanged",
			Policies: []limiter.PolicySpec{fw("user", 5), tb("tenant", 2)},
			Steps: []Step{
				{Batch: []Req{{tenant, "acme", 2, o}}, Want: []Want{allowedConsumed(0)}},
				{Batch: []Req{{user, "acme/bob", 1, o}, {tenant, "acme", 1, o}}, Want: []Want{allowedHeld(5), denied(0)}},
				{Batch: []Req{{user, "acme/bob", 1, o}, {tenant, "acme", 1, o}}, Want: []Want{allowedHeld(5), denied(0)}},
				{Batch: []Req{{user, "acme/bob", 1, o}}, Want: []Want{allowedConsumed(4)}},
			},
		},
		{
			Name:     "user denies: tenant unchanged",
			Policies: []limiter.PolicySpec{sw("user", 1), fw("tenant", 10)},
			Steps: []Step{
				{Batch: []Req{{user, "acme/bob", 1, o}, {tenant, "acme", 1, o}}, Want: []Want{allowedConsumed(0), allowedConsumed(9)}},
				{Batch: []Req{{user, "acme/bob", 1, o}, {tenant, "acme", 1, o}}, Want: []Want{denied(0), allowedHeld(9)}},
				{Batch: []Req{{user, "acme/eve", 1, o}, {tenant, "acme", 1, o}}, Want: []Want{allowedConsumed(0), allowedConsumed(8)}},
			},
		},
		{
			Name:     "shadow never blocks and consumes on commit",
			Policies: []limiter.PolicySpec{fw("user", 5), fw("shadow", 1)},
			Steps: []Step{
				{Batch: []Req{{user, "u", 1, o}, {tenant, "u", 1, s}}, Want: []Want{allowedConsumed(4), allowedConsumed(0)}},
				{Batch: []Req{{user, "u", 1, o}, {tenant, "u", 1, s}}, Want: []Want{allowedConsumed(3), denied(0)}},
			},
		},
		{
			Name:     "quota: commits unless every quota limit denies",
			Policies: []limiter.PolicySpec{fw("qa", 1), fw("qb", 2), fw("user", 9)},
			Steps: []Step{
				{Batch: []Req{{0, "q", 1, q}, {1, "q", 1, q}}, Want: []Want{allowedConsumed(0), allowedConsumed(1)}},
				{Batch: []Req{{0, "q", 1, q}, {1, "q", 1, q}}, Want: []Want{denied(0), allowedConsumed(0)}},
				{Batch: []Req{{0, "q", 1, q}, {1, "q", 1, q}, {2, "u", 1, o}}, Want: []Want{denied(0), denied(0), allowedHeld(9)}},
				{Batch: []Req{{2, "u", 1, o}}, Want: []Want{allowedConsumed(8)}},
			},
		},
		{
			Name:     "check mode never consumes",
			Policies: []limiter.PolicySpec{fw("user", 3)},
			Steps: []Step{
				{Batch: []Req{{user, "u", 2, c}}, Want: []Want{allowedHeld(3)}},
				{Batch: []Req{{user, "u", 2, o}}, Want: []Want{allowedConsumed(1)}},
				{Batch: []Req{{user, "u", 2, c}}, Want: []Want{denied(1)}},
			},
		},
	}
}

// roleCases: probes, quota probes, one state twice in a batch.
func roleCases() []Case {
	const user, tenant = 0, 1
	o, q, pr, qp := limiter.RoleOrdinary, limiter.RoleQuota, limiter.RoleProbe, limiter.RoleQuotaProbe
	return []Case{
		{
			// A probe never consumes and blocks as an ordinary limit does:
			// below the limit it allows and the batch commits; at a full
			// limit it denies and the batch consumes nothing.
			Name:     "probe blocks and never consumes",
			Policies: []limiter.PolicySpec{fw("user", 2), tb("tenant", 9)},
			Steps: []Step{
				{Batch: []Req{{user, "u", 1, pr}}, Want: []Want{allowedHeld(2)}},
				{Batch: []Req{{user, "u", 1, pr}, {tenant, "t", 1, o}}, Want: []Want{allowedHeld(2), allowedConsumed(8)}},
				{Batch: []Req{{user, "u", 2, o}}, Want: []Want{allowedConsumed(0)}},
				{Batch: []Req{{user, "u", 1, pr}, {tenant, "t", 1, o}}, Want: []Want{denied(0), allowedHeld(8)}},
				{Batch: []Req{{tenant, "t", 1, pr}}, Want: []Want{allowedHeld(8)}},
				// A later request on the same state does not see a probe's cost.
				{Batch: []Req{{tenant, "t", 8, pr}, {tenant, "t", 8, o}}, Want: []Want{allowedHeld(8), allowedConsumed(0)}},
				{Batch: []Req{{tenant, "t", 1, pr}}, Want: []Want{denied(0)}},
			},
		},
		{
			// A quota probe takes part as a quota limit: the batch is
			// blocked only when it and every other quota limit deny.
			Name:     "quota probe: a quota limit that never consumes",
			Policies: []limiter.PolicySpec{fw("qa", 1), fw("qb", 2), fw("user", 9)},
			Steps: []Step{
				{Batch: []Req{{0, "q", 1, q}}, Want: []Want{allowedConsumed(0)}},
				{Batch: []Req{{0, "q", 1, qp}, {1, "q", 1, q}}, Want: []Want{denied(0), allowedConsumed(1)}},
				{Batch: []Req{{0, "q", 1, q}, {1, "q", 1, qp}, {2, "u", 1, o}}, Want: []Want{denied(0), allowedHeld(1), allowedConsumed(8)}},
				{Batch: []Req{{1, "q", 1, q}}, Want: []Want{allowedConsumed(0)}},
				{Batch: []Req{{0, "q", 1, qp}, {1, "q", 1, qp}, {2, "u", 1, o}}, Want: []Want{denied(0), denied(0), allowedHeld(8)}},
			},
		},
		{
			// The second request on one state sees the first's tentative
			// cost; when the batch does not commit neither consumes.
			Name:     "one state twice in a batch",
			Policies: []limiter.PolicySpec{fw("user", 3)},
			Steps: []Step{
				{Batch: []Req{{user, "u", 2, o}, {user, "u", 2, o}}, Want: []Want{allowedHeld(3), denied(1)}},
				{Batch: []Req{{user, "u", 1, o}, {user, "u", 2, o}}, Want: []Want{allowedConsumed(2), allowedConsumed(0)}},
				{Batch: []Req{{user, "u", 1, o}}, Want: []Want{denied(0)}},
			},
		},
	}
}

// penaltyCases: penalty boxes, a calendar period, a sliding log, a failed
// limit.
func penaltyCases() []Case {
	const user, tenant = 0, 1
	o, s, c, pr, qp := limiter.RoleOrdinary, limiter.RoleShadow, limiter.RoleCheck, limiter.RoleProbe, limiter.RoleQuotaProbe
	return []Case{
		{
			// An offence is recorded whatever the batch commits (never by
			// a check); a blocked request consumes nothing; a shadow limit
			// records and reports its blocks without blocking.
			Name:     "penalty box",
			Policies: []limiter.PolicySpec{penalized("boxed", 2), fw("tenant", 5), slPenalized("logged", 1)},
			Steps: []Step{
				{Batch: []Req{{user, "u", 2, o}}, Want: []Want{allowedConsumed(0)}},
				{Batch: []Req{{user, "u", 1, c}}, Want: []Want{denied(0)}},
				{Batch: []Req{{user, "u", 1, c}}, Want: []Want{denied(0)}},
				{Batch: []Req{{tenant, "t", 1, o}, {user, "u", 1, o}}, Want: []Want{allowedHeld(5), denied(0)}},
				{Batch: []Req{{tenant, "t", 1, o}}, Want: []Want{allowedConsumed(4)}},
				{Batch: []Req{{user, "u", 1, c}, {user, "u", 1, o}}, Want: []Want{blocked, blocked}},
				{Batch: []Req{{user, "v", 2, s}, {tenant, "t", 1, o}}, Want: []Want{allowedConsumed(0), allowedConsumed(3)}},
				{Batch: []Req{{user, "v", 1, s}, {tenant, "t", 1, o}}, Want: []Want{denied(0), allowedConsumed(2)}},
				{Batch: []Req{{user, "v", 1, s}, {tenant, "t", 1, o}}, Want: []Want{blocked, allowedConsumed(1)}},
				// A probe (of either kind) reports a denial and a block
				// but never records an offence; its block blocks the batch.
				{Batch: []Req{{user, "w", 2, o}}, Want: []Want{allowedConsumed(0)}},
				{Batch: []Req{{user, "w", 1, pr}}, Want: []Want{denied(0)}},
				{Batch: []Req{{user, "w", 1, qp}}, Want: []Want{denied(0)}},
				{Batch: []Req{{user, "w", 1, o}}, Want: []Want{denied(0)}},
				{Batch: []Req{{user, "w", 1, pr}, {tenant, "t", 1, o}}, Want: []Want{blocked, allowedHeld(1)}},
				{Batch: []Req{{user, "w", 1, qp}}, Want: []Want{blocked}},
				// A sliding log's offence blocks as a window's does.
				{Batch: []Req{{2, "x", 1, o}}, Want: []Want{allowedConsumed(0)}},
				{Batch: []Req{{2, "x", 1, pr}}, Want: []Want{denied(0)}},
				{Batch: []Req{{2, "x", 1, o}}, Want: []Want{denied(0)}},
				{Batch: []Req{{2, "x", 1, o}, {tenant, "t", 1, o}}, Want: []Want{blocked, allowedHeld(1)}},
			},
		},
		{
			// A calendar period counts and boxes as a window does; a probe
			// records neither a hit nor an offence. A calendar year (of a
			// fixed offset), so that no period ends during the case.
			Name: "calendar year with a penalty box",
			Policies: []limiter.PolicySpec{func() limiter.PolicySpec {
				spec := calendarSpec("year-pen", 2, calendar.Year, time.FixedZone("+05:30", 5*3600+30*60))
				spec.Penalty = limiter.Penalty{Duration: time.Hour, MaxDuration: 8 * time.Hour, Decay: time.Hour}
				return spec
			}()},
			Steps: []Step{
				{Batch: []Req{{user, "u", 1, pr}}, Want: []Want{allowedHeld(2)}},
				{Batch: []Req{{user, "u", 1, o}}, Want: []Want{allowedConsumed(1)}},
				{Batch: []Req{{user, "u", 1, pr}}, Want: []Want{allowedHeld(1)}},
				{Batch: []Req{{user, "u", 1, o}}, Want: []Want{allowedConsumed(0)}},
				{Batch: []Req{{user, "u", 1, pr}}, Want: []Want{denied(0)}},
				{Batch: []Req{{user, "u", 1, o}}, Want: []Want{denied(0)}},
				{Batch: []Req{{user, "u", 1, pr}}, Want: []Want{blocked}},
				{Batch: []Req{{user, "u", 1, o}}, Want: []Want{blocked}},
			},
		},
		{
			// A sliding log in a batch that another limit blocks: its hit
			// is not logged; then two of its hits are, in one batch.
			Name:     "sliding log: all or nothing",
			Policies: []limiter.PolicySpec{sl("user", 4), fw("tenant", 2)},
			Steps: []Step{
				{Batch: []Req{{user, "u", 2, o}, {tenant, "t", 3, o}}, Want: []Want{allowedHeld(4), {Failed: true}}},
				{Batch: []Req{{user, "u", 2, o}, {user, "u", 1, o}, {tenant, "t", 2, o}}, Want: []Want{allowedConsumed(2), allowedConsumed(1), allowedConsumed(0)}},
				{Batch: []Req{{user, "u", 2, o}}, Want: []Want{denied(1)}},
				{Batch: []Req{{user, "u", 1, o}}, Want: []Want{allowedConsumed(0)}},
			},
		},
		{
			// A cost above the policy's max cost is an invalid request: a
			// failure, which blocks like a denial under fail-closed.
			Name:     "a failed fail-closed limit blocks",
			Policies: []limiter.PolicySpec{fw("user", 5), fw("tenant", 2)},
			Steps: []Step{
				{Batch: []Req{{user, "u", 1, o}, {tenant, "t", 3, o}}, Want: []Want{allowedHeld(5), {Failed: true}}},
				{Batch: []Req{{user, "u", 1, o}}, Want: []Want{allowedConsumed(4)}},
			},
		},
	}
}

// Suite is what one kind of store runs the suite on.
type Suite struct {
	// Store returns the store of a part of the suite (the batch table,
	// resets, the lease scripts). (Required)
	Store func(t *testing.T) limiter.Store
	// Timed builds the store of each timed case; nil for a store that
	// decides by a clock no test sets (Redis's TIME). (Optional)
	Timed NewStore
	// Leases: the store holds concurrency limits (RunLeases). (Optional)
	Leases bool
	// Reservations: the store holds reservations (RunReservations), run
	// on a Timed store when there is one, its clock moved by the script.
	// (Optional)
	Reservations bool
}

// RunSuite runs the parts of the suite s says on its stores, each a
// subtest ("batch", "timed", "reset", "leases", "reservations") with
// cfg's prefix followed by the part's name: Run, RunTimed, RunReset,
// RunLeases and RunReservations.
func RunSuite(t *testing.T, s Suite, cfg Config) {
	parts := []struct {
		name string
		on   bool
		run  func(t *testing.T, cfg Config)
	}{
		{"batch", true, func(t *testing.T, cfg Config) { Run(t, s.Store(t), cfg) }},
		{"timed", s.Timed != nil, func(t *testing.T, cfg Config) { RunTimed(t, s.Timed, cfg) }},
		{"reset", true, func(t *testing.T, cfg Config) { RunReset(t, s.Store(t), cfg) }},
		{"leases", s.Leases, func(t *testing.T, cfg Config) { RunLeases(t, s.Store(t), cfg) }},
		{"reservations", s.Reservations, func(t *testing.T, cfg Config) {
			if s.Timed == nil {
				RunReservations(t, s.Store(t), cfg, nil)
				return
			}
			clock := NewClock(time.UnixMilli(1_700_000_000_000 / 3_600_000 * 3_600_000))
			RunReservations(t, s.Timed(t, clock), cfg, clock)
		}},
	}
	for _, part := range parts {
		if !part.on {
			continue
		}
		t.Run(part.name, func(t *testing.T) {
			c := cfg
			c.Prefix = cfg.Prefix + "." + part.name
			part.run(t, c)
		})
	}
}

// Run runs every case of Cases against store.
func Run(t *testing.T, store limiter.Store, cfg Config) {
	for _, tc := range Cases() {
		t.Run(tc.Name, func(t *testing.T) {
			RunCase(t, store, cfg, tc)
		})
	}
}

// RunCase runs one case.
func RunCase(t *testing.T, store limiter.Store, cfg Config, tc Case) {
	t.Helper()
	timed := !tc.Start.IsZero()
	if timed && cfg.Clock == nil {
		t.Fatalf("case %q is timed: Config.Clock is required", tc.Name)
	}
	pols := make([]*limiter.Policy, len(tc.Policies))
	for i, spec := range tc.Policies {
		spec.ID = cfg.Prefix + "." + spec.ID
		pols[i] = Policy(t, spec)
	}
	var tag limiter.Tag
	if cfg.Tag != nil {
		tag = cfg.Tag(tc.Name)
	}
	subjects := max(tc.Subjects, 1)
	for si, st := range tc.Steps {
		if !st.At.IsZero() {
			if !timed {
				t.Fatalf("step %d sets the clock in an untimed case", si)
			}
			cfg.Clock.Set(st.At)
		}
		for n := range subjects {
			batch := make([]limiter.Request, len(st.Batch))
			for i, r := range st.Batch {
				name := cfg.Prefix + "/" + tc.Name + "/" + r.Subject
				if subjects > 1 {
					name += "#" + strconv.Itoa(n)
				}
				batch[i] = limiter.Request{Policy: pols[r.Limit], Subject: Subject(name), Cost: r.Cost, Role: r.Mode, Tag: tag}
			}
			out := make([]limiter.Outcome, len(batch))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			store.Evaluate(ctx, batch, out)
			cancel()
			for i, w := range st.Want {
				where := fmt.Sprintf("step %d request %d (%s %s cost %d", si, i, batch[i].Policy.ID(), batch[i].Role, batch[i].Cost)
				if subjects > 1 {
					where += fmt.Sprintf(", subject %d", n)
				}
				if timed {
					where += " at " + cfg.Clock.Now().Format(time.RFC3339Nano)
				}
				checkOutcome(t, where+")", out[i], w, timed)
			}
		}
	}
}

// checkOutcome fails t unless o answers w; timed checks the retry and reset
// points too.
func checkOutcome(t *testing.T, where string, o limiter.Outcome, w Want, timed bool) {
	t.Helper()
	if w.Failed {
		if o.Kind == limiter.Evaluated {
			t.Errorf("%s: %+v, want a failure", where, o.Decision)
		}
		return
	}
	if o.Kind != limiter.Evaluated {
		t.Fatalf("%s: %v %s: %v", where, o.Kind, o.Category, o.Err)
	}
	d := o.Decision
	if d.Allowed != w.Allowed || d.Consumed != w.Consumed || d.Remaining != w.Remaining || d.Blocked != w.Blocked {
		t.Errorf("%s: allowed %v consumed %v remaining %d blocked %v; want allowed %v consumed %v remaining %d blocked %v",
			where, d.Allowed, d.Consumed, d.Remaining, d.Blocked, w.Allowed, w.Consumed, w.Remaining, w.Blocked)
	}
	if !timed {
		return
	}
	early := time.Duration(0)
	if d.Source == limiter.SourceLocalCache {
		early = time.Millisecond
	}
	if d.RetryAfter > w.Retry || d.RetryAfter < w.Retry-early {
		t.Errorf("%s: retry after %v, want %v", where, d.RetryAfter, w.Retry)
	}
	if !w.Reset.IsZero() && !d.ResetAt.Equal(w.Reset) {
		t.Errorf("%s: reset at %v, want %v", where, d.ResetAt.UTC(), w.Reset.UTC())
	}
}

// Policy builds the policy of spec (ID "test" when spec has none) and fails
// t when spec is invalid.
func Policy(t testing.TB, spec limiter.PolicySpec) *limiter.Policy {
	t.Helper()
	if spec.ID == "" {
		spec.ID = "test"
	}
	p, err := limiter.NewPolicy(spec)
	if err != nil {
		t.Fatalf("NewPolicy(%+v): %v", spec, err)
	}
	return p
}

// Subject is a stand-in for the HMAC subject digest of pkg/descriptors.
func Subject(s string) limiter.SubjectDigest { return sha256.Sum256([]byte(s)) }

// Prefix returns a policy ID prefix unique to this run.
func Prefix() string {
	return fmt.Sprintf("lt%d", time.Now().UnixNano()%1_000_000_000_000)
}
