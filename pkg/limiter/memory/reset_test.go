package memory

import (
	"context"
	"crypto/sha256"
	"fmt"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

func resetPolicy(t *testing.T, id string, revision uint32) *limiter.Policy {
	t.Helper()
	p, err := limiter.NewPolicy(limiter.PolicySpec{ID: id, Revision: revision, Algorithm: limiter.FixedWindow,
		Params: limiter.FixedWindowParams{Limit: 3, Window: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func digest(i int) limiter.SubjectDigest {
	return sha256.Sum256(fmt.Appendf(nil, "subject-%d", i))
}

// TestReset: a reset subject starts from its full limit; the others keep
// their counts; resetting a state that does not exist counts nothing.
func TestReset(t *testing.T) {
	clk := limitertest.NewClock(time.UnixMilli(1_700_000_000_000))
	s, err := New(Config{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	p := resetPolicy(t, "p", 1)
	ctx := context.Background()
	spend := func(subj limiter.SubjectDigest, cost int64) limiter.Decision {
		out := make([]limiter.Outcome, 1)
		s.Evaluate(ctx, []limiter.Request{{Policy: p, Subject: subj, Cost: cost}}, out)
		return out[0].Decision
	}
	spend(digest(1), 3)
	spend(digest(2), 3)
	if n, err := s.Reset(ctx, []limiter.Request{{Policy: p, Subject: digest(1)}, {Policy: p, Subject: digest(3)}}); n != 1 || err != nil {
		t.Fatalf("Reset: %d, %v; want 1", n, err)
	}
	if d := spend(digest(1), 1); !d.Allowed || d.Remaining != 2 {
		t.Fatalf("after reset: %+v, want allowed with 2 remaining", d)
	}
	if d := spend(digest(2), 1); d.Allowed {
		t.Fatalf("another subject was reset: %+v", d)
	}
}

// TestResetPolicy: every state of the policy at the revision goes, in every
// shard; other revisions and policies stay; a bound stops the walk early
// and says so.
func TestResetPolicy(t *testing.T) {
	clk := limitertest.NewClock(time.UnixMilli(1_700_000_000_000))
	s, err := New(Config{Clock: clk, MaxEntries: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p1, p2, q := resetPolicy(t, "p", 1), resetPolicy(t, "p", 2), resetPolicy(t, "q", 1)
	for i := range 300 {
		for _, p := range []*limiter.Policy{p1, p2, q} {
			s.Evaluate(ctx, []limiter.Request{{Policy: p, Subject: digest(i), Cost: 1}}, make([]limiter.Outcome, 1))
		}
	}
	if got := s.Len(); got != 900 {
		t.Fatalf("%d states, want 900", got)
	}
	res, err := s.ResetPolicy(ctx, "p", 1, limiter.ResetBounds{MaxScanned: 1})
	if err != nil || res.Complete || res.Deleted >= 300 {
		t.Fatalf("bounded reset: %+v, %v; want an incomplete one", res, err)
	}
	res, err = s.ResetPolicy(ctx, "p", 1, limiter.ResetBounds{MaxScanned: 1 << 20})
	if err != nil || !res.Complete {
		t.Fatalf("reset: %+v, %v", res, err)
	}
	if got := s.Len(); got != 600 {
		t.Fatalf("%d states after the reset, want 600 (other revision and policy kept)", got)
	}
	if _, err := s.ResetPolicy(ctx, "p", 1, limiter.ResetBounds{}); err == nil {
		t.Fatal("a reset without a bound was accepted")
	}
}
