package limitertest

import (
	"context"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/leases"
)

// LeasePolicy returns a concurrency policy (limiter.Concurrency) of limit
// leases living ttl.
func LeasePolicy(t testing.TB, id string, limit int64, ttl time.Duration) *limiter.Policy {
	t.Helper()
	return Policy(t, limiter.PolicySpec{ID: id, Algorithm: limiter.Concurrency,
		Params: limiter.ConcurrencyParams{Limit: limit, LeaseTTL: ttl}})
}

// leaseReq is one request of a lease script: a lease operation on the
// concurrency limit (rate false) or a request of the rate limit.
type leaseReq struct {
	op   limiter.LeaseOp
	role limiter.Role
	rate bool
	cost int64
}

// leaseStep is one batch and, per request, whether it is allowed and
// consumed and what remains.
type leaseStep struct {
	batch []leaseReq
	want  []Want
}

var (
	take    = leaseReq{op: limiter.LeaseTake, cost: 1}
	release = leaseReq{op: limiter.LeaseRelease, cost: 1, role: limiter.RoleCheck}
	probe   = leaseReq{op: limiter.LeaseTake, cost: 1, role: limiter.RoleProbe}
	rate    = leaseReq{rate: true, cost: 1}
)

// leaseCases are the lease scripts every store runs, on a concurrency
// limit of 2 (lease TTL an hour) and a fixed window of 3.
var leaseCases = []struct {
	name  string
	steps []leaseStep
}{
	{"take up to the limit, release, take again", []leaseStep{
		{[]leaseReq{take}, []Want{allowedConsumed(1)}},
		{[]leaseReq{take}, []Want{allowedConsumed(0)}},
		{[]leaseReq{take}, []Want{denied(0)}},
		{[]leaseReq{probe}, []Want{denied(0)}},
		{[]leaseReq{release}, []Want{allowedHeld(1)}},
		{[]leaseReq{probe}, []Want{allowedHeld(1)}},
		{[]leaseReq{take}, []Want{allowedConsumed(0)}},
	}},
	{"releases without a lease do not go negative", []leaseStep{
		{[]leaseReq{release}, []Want{allowedHeld(2)}},
		{[]leaseReq{release, release}, []Want{allowedHeld(2), allowedHeld(2)}},
		{[]leaseReq{take}, []Want{allowedConsumed(1)}},
		{[]leaseReq{release}, []Want{allowedHeld(2)}},
		{[]leaseReq{release}, []Want{allowedHeld(2)}},
		{[]leaseReq{take}, []Want{allowedConsumed(1)}},
		{[]leaseReq{take}, []Want{allowedConsumed(0)}},
		{[]leaseReq{take}, []Want{denied(0)}},
	}},
	{"a batch the rate limit denies takes no lease", []leaseStep{
		{[]leaseReq{take, {rate: true, cost: 3}}, []Want{allowedConsumed(1), allowedConsumed(0)}},
		{[]leaseReq{take, rate}, []Want{allowedHeld(1), denied(0)}},
		{[]leaseReq{probe}, []Want{allowedHeld(1)}},
		{[]leaseReq{take}, []Want{allowedConsumed(0)}},
	}},
	{"a batch the lease denies consumes no rate", []leaseStep{
		{[]leaseReq{take, rate}, []Want{allowedConsumed(1), allowedConsumed(2)}},
		{[]leaseReq{take, rate}, []Want{allowedConsumed(0), allowedConsumed(1)}},
		{[]leaseReq{take, rate}, []Want{denied(0), allowedHeld(1)}},
		{[]leaseReq{release, rate}, []Want{allowedHeld(1), allowedConsumed(0)}},
	}},
}

// RunLeases runs the lease scripts (leaseCases) on s behind the leases
// wrapper (pkg/limiter/leases), as the service runs a store: takes up to
// the limit, releases, releases without a lease, probes, and batches
// mixing a concurrency limit with a rate limit (all or nothing).
func RunLeases(t *testing.T, s limiter.Store, cfg Config) {
	t.Helper()
	s = leases.New(s, s)
	for _, c := range leaseCases {
		t.Run(c.name, func(t *testing.T) {
			lp := LeasePolicy(t, cfg.Prefix+".lease", 2, time.Hour)
			rp := Policy(t, fw(cfg.Prefix+".rate", 3))
			subject := Subject(cfg.Prefix + c.name)
			for i, st := range c.steps {
				batch := make([]limiter.Request, len(st.batch))
				for k, r := range st.batch {
					batch[k] = limiter.Request{Policy: lp, Subject: subject, Cost: r.cost, Role: r.role, Lease: r.op}
					if r.rate {
						batch[k] = limiter.Request{Policy: rp, Subject: subject, Cost: r.cost, Role: r.role}
					}
				}
				out := make([]limiter.Outcome, len(batch))
				s.Evaluate(context.Background(), batch, out)
				for k, w := range st.want {
					o := out[k]
					d := o.Decision
					if o.Kind != limiter.Evaluated || d.Allowed != w.Allowed || d.Consumed != w.Consumed || d.Remaining != w.Remaining {
						t.Fatalf("step %d request %d: %s %v allowed %t consumed %t remaining %d, want %+v",
							i, k, o.Kind, o.Err, d.Allowed, d.Consumed, d.Remaining, w)
					}
				}
			}
		})
	}
}

// LeaseExpiry: a holder that never releases (a crashed proxy) keeps its
// lease until the TTL and no longer. p is a concurrency policy of limit 1;
// now reads the store's clock and wait lets it move on (a fake clock's
// Advance, or a sleep on a real one). The take must be denied while the
// lease lives (checked only when the store's clock says it still does) and
// allowed once the TTL has passed.
func LeaseExpiry(t *testing.T, s limiter.Store, p *limiter.Policy, subject limiter.SubjectDigest, now func() time.Time, wait func(time.Duration)) {
	t.Helper()
	ttl := time.Duration(p.LeaseTTLMillis()) * time.Millisecond
	one := func(op limiter.LeaseOp, role limiter.Role) limiter.Decision {
		t.Helper()
		out := make([]limiter.Outcome, 1)
		s.Evaluate(context.Background(), []limiter.Request{{Policy: p, Subject: subject, Cost: 1, Lease: op, Role: role}}, out)
		if out[0].Kind != limiter.Evaluated {
			t.Fatalf("%s: %s %v", op, out[0].Kind, out[0].Err)
		}
		return out[0].Decision
	}
	start := now()
	if d := one(limiter.LeaseTake, limiter.RoleOrdinary); !d.Consumed {
		t.Fatalf("first take: %+v", d)
	}
	if d := one(limiter.LeaseTake, limiter.RoleProbe); d.Allowed && now().Sub(start) < ttl {
		t.Fatalf("a second take allowed while the first lease lives: %+v", d)
	}
	deadline := time.Now().Add(ttl + 10*time.Second)
	for {
		wait(ttl / 4)
		d := one(limiter.LeaseTake, limiter.RoleOrdinary)
		if d.Allowed {
			if elapsed := now().Sub(start); elapsed < ttl {
				t.Fatalf("the crashed holder's lease returned after %s, before its TTL %s", elapsed, ttl)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the crashed holder's lease never returned (TTL %s)", ttl)
		}
	}
}
