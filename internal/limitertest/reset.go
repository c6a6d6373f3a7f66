package limitertest

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// RunReset checks limiter.Resetter on store, which must implement it: a
// reset state starts from its full limit, another subject's state stays; a
// policy reset at one revision deletes every state of it, bounded then
// complete, and leaves other revisions and policies; a policy reset without
// a bound is refused. Denials are asked twice before a reset, so that a
// store that repeats them locally (the deny cache) must forget them too.
func RunReset(t *testing.T, store limiter.Store, cfg Config) {
	rs, ok := store.(limiter.Resetter)
	if !ok {
		t.Fatalf("%T does not implement limiter.Resetter", store)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var tag limiter.Tag
	if cfg.Tag != nil {
		tag = cfg.Tag("reset")
	}
	spec := func(id string, revision uint32) limiter.PolicySpec {
		s := fw(id, 3)
		s.ID, s.Revision = cfg.Prefix+".reset."+id, revision
		return s
	}
	p1, p2, q := Policy(t, spec("p", 1)), Policy(t, spec("p", 2)), Policy(t, spec("q", 1))
	const n = 120
	req := func(p *limiter.Policy, i int) limiter.Request {
		return limiter.Request{Policy: p, Subject: Subject(cfg.Prefix + "/reset/" + strconv.Itoa(i)), Cost: 1, Tag: tag}
	}
	spend := func(what string, p *limiter.Policy, i int, w Want) {
		t.Helper()
		out := make([]limiter.Outcome, 1)
		store.Evaluate(ctx, []limiter.Request{req(p, i)}, out)
		checkOutcome(t, what+" "+p.ID()+" subject "+strconv.Itoa(i), out[0], w, false)
	}
	for i := range n {
		for _, p := range []*limiter.Policy{p1, p2, q} {
			spend("seed", p, i, allowedConsumed(2))
		}
	}
	for _, full := range []struct {
		p *limiter.Policy
		i int
	}{{p1, 0}, {p1, 1}, {q, 1}} {
		spend("fill", full.p, full.i, allowedConsumed(1))
		spend("fill", full.p, full.i, allowedConsumed(0))
		spend("full", full.p, full.i, denied(0))
		spend("full again", full.p, full.i, denied(0))
	}

	got, err := rs.Reset(ctx, []limiter.Request{req(p1, 0), req(p1, n+1)})
	if err != nil || got != 1 {
		t.Fatalf("Reset of one state and one that does not exist: %d, %v; want 1", got, err)
	}
	spend("after its reset", p1, 0, allowedConsumed(2))
	spend("another subject after a reset", p1, 1, denied(0))

	res, err := rs.ResetPolicy(ctx, p1.ID(), 1, limiter.ResetBounds{MaxScanned: 10})
	if err != nil || res.Complete || res.Scanned < 10 || res.Deleted >= n {
		t.Fatalf("ResetPolicy looking at 10: %+v, %v; want an incomplete reset that looked at 10 or more", res, err)
	}
	total := res.Deleted
	for range 10 {
		if res, err = rs.ResetPolicy(ctx, p1.ID(), 1, limiter.ResetBounds{MaxScanned: 1 << 20}); err != nil {
			t.Fatal(err)
		}
		if total += res.Deleted; res.Complete {
			break
		}
	}
	if !res.Complete || total != n {
		t.Fatalf("ResetPolicy: last %+v, %d deleted in all; want complete, %d", res, total, n)
	}
	for i := range n {
		spend("after the policy's reset", p1, i, allowedConsumed(2))
		spend("another revision after the policy's reset", p2, i, allowedConsumed(1))
		if i == 1 {
			spend("another policy after the policy's reset", q, i, denied(0))
		} else {
			spend("another policy after the policy's reset", q, i, allowedConsumed(1))
		}
	}
	if _, err := rs.ResetPolicy(ctx, p1.ID(), 1, limiter.ResetBounds{}); err == nil {
		t.Fatal("a policy reset without a bound was accepted")
	}
}
