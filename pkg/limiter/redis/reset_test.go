package redis

import (
	"context"
	"crypto/sha256"
	"fmt"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

func resetFixed(t *testing.T, id string, revision uint32) *limiter.Policy {
	t.Helper()
	p, err := limiter.NewPolicy(limiter.PolicySpec{ID: id, Revision: revision, Algorithm: limiter.FixedWindow,
		Params: limiter.FixedWindowParams{Limit: 3, Window: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func resetSubject(i int) limiter.SubjectDigest {
	return sha256.Sum256(fmt.Appendf(nil, "reset-subject-%d", i))
}

// checkReset runs the reset suite on s: one subject reset, then a policy at
// one revision, bounded then complete, leaving other revisions and policies.
func checkReset(t *testing.T, s *Store, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p1, p2, q := resetFixed(t, prefix+"p", 1), resetFixed(t, prefix+"p", 2), resetFixed(t, prefix+"q", 1)
	spend := func(p *limiter.Policy, i int) limiter.Outcome {
		out := make([]limiter.Outcome, 1)
		s.Evaluate(ctx, []limiter.Request{{Policy: p, Subject: resetSubject(i), Cost: 1}}, out)
		return out[0]
	}
	const n = 120
	for i := range n {
		for _, p := range []*limiter.Policy{p1, p2, q} {
			if o := spend(p, i); o.Kind != limiter.Evaluated || !o.Decision.Allowed {
				t.Fatalf("seed %d: %+v", i, o)
			}
		}
	}
	spend(p1, 0)
	spend(p1, 0) // subject 0 of p1 has used its 3
	got, err := s.Reset(ctx, []limiter.Request{{Policy: p1, Subject: resetSubject(0)}, {Policy: p1, Subject: resetSubject(n + 1)}})
	if err != nil || got != 1 {
		t.Fatalf("Reset: %d, %v; want 1", got, err)
	}
	if o := spend(p1, 0); !o.Decision.Allowed || o.Decision.Remaining != 2 {
		t.Fatalf("after reset: %+v, want allowed with 2 remaining", o.Decision)
	}

	res, err := s.ResetPolicy(ctx, prefix+"p", 1, limiter.ResetBounds{MaxScanned: 10})
	if err != nil || res.Complete || res.Scanned < 10 {
		t.Fatalf("bounded ResetPolicy: %+v, %v; want an incomplete scan of at least 10 keys", res, err)
	}
	total := res.Deleted
	for range 10 {
		res, err = s.ResetPolicy(ctx, prefix+"p", 1, limiter.ResetBounds{MaxScanned: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		total += res.Deleted
		if res.Complete {
			break
		}
	}
	if !res.Complete || total != n {
		t.Fatalf("ResetPolicy: last %+v, %d deleted in all; want complete, %d", res, total, n)
	}
	for i := range n {
		if o := spend(p1, i); o.Decision.Remaining != 2 {
			t.Fatalf("subject %d after the policy reset: %+v", i, o.Decision)
		}
		if o := spend(p2, i); o.Decision.Remaining != 1 {
			t.Fatalf("subject %d of revision 2 was reset: %+v", i, o.Decision)
		}
		if o := spend(q, i); o.Decision.Remaining != 1 {
			t.Fatalf("subject %d of another policy was reset: %+v", i, o.Decision)
		}
	}
}

func TestReset(t *testing.T) {
	e := newEnv(t)
	checkReset(t, e.store, "reset.")
}

func TestResetCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster topology: skipped with -short")
	}
	c := redistest.StartCluster(t)
	s := newStore(t, Config{Addrs: c.Addrs(), Mode: ModeCluster, Timeout: 5 * time.Second})
	checkReset(t, s, "reset.cluster.")
}
