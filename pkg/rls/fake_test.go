package rls

import (
	"context"
	"crypto/sha256"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// fakeRules matches descriptors by their exact "k=v/k2=v2" string, or by
// "k=v/k2" for a per-value rule. It stands in for a descriptors.Snapshot in
// tests of the server's own logic.
type fakeRules struct {
	domain string
	rules  map[string]*descriptors.Rule
}

func (f *fakeRules) HasDomain(d string) bool { return d == f.domain }

func (f *fakeRules) Match(d string, entries []descriptors.Entry) (descriptors.Match, bool) {
	if d != f.domain {
		return descriptors.Match{}, false
	}
	var exact, perValue strings.Builder
	for i, e := range entries {
		if i > 0 {
			exact.WriteByte('/')
			perValue.WriteByte('/')
		}
		exact.WriteString(e.Key + "=" + e.Value)
		if i == len(entries)-1 {
			perValue.WriteString(e.Key)
		} else {
			perValue.WriteString(e.Key + "=" + e.Value)
		}
	}
	r := f.rules[exact.String()]
	if r == nil {
		r = f.rules[perValue.String()]
	}
	if r == nil {
		return descriptors.Match{}, false
	}
	return descriptors.Match{Rule: r, Subject: sha256.Sum256([]byte(exact.String()))}, true
}

func (f *fakeRules) Override(d string, entries []descriptors.Entry, rpu uint32, unit descriptors.Unit, _ uint32) (descriptors.Match, bool) {
	if d != f.domain {
		return descriptors.Match{}, false
	}
	r := fakeRule("override", rpu, unit)
	return descriptors.Match{Rule: r, Subject: sha256.Sum256([]byte("override"))}, true
}

func fakeRule(id string, rpu uint32, unit descriptors.Unit) *descriptors.Rule {
	p, err := limiter.NewPolicy(limiter.PolicySpec{
		ID: id, Algorithm: limiter.FixedWindow,
		Params: limiter.FixedWindowParams{Limit: int64(rpu), Window: unit.Duration()},
	})
	if err != nil {
		panic(err)
	}
	return &descriptors.Rule{Policy: p, Name: id, Unit: unit, RequestsPerUnit: rpu, Path: id}
}

// fakeStore is a fixed-window counter (batches all or nothing; a state
// twice in one batch is not modelled), or a store that fails or panics.
type fakeStore struct {
	mu     sync.Mutex
	now    time.Time
	used   map[string]int64
	fail   limiter.OutcomeKind // 0: evaluate
	panics bool
	// hang makes Evaluate wait for its context to end, then answer
	// Indeterminate, as a store whose server stopped answering does.
	hang    bool
	batches int
}

func (f *fakeStore) Evaluate(ctx context.Context, batch []limiter.Request, out []limiter.Outcome) {
	if f.hang {
		<-ctx.Done()
		for i := range batch {
			out[i] = limiter.IndeterminateOutcome(time.Second, ctx.Err())
		}
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.batches++
	if f.panics {
		panic("fake store: boom")
	}
	if f.used == nil {
		f.used = map[string]int64{}
	}
	for i, r := range batch {
		switch f.fail {
		case limiter.Unavailable:
			out[i] = limiter.UnavailableOutcome(3*time.Second, limiter.CategoryNotConnected, nil)
			continue
		case limiter.Indeterminate:
			out[i] = limiter.IndeterminateOutcome(0, nil)
			continue
		case limiter.Incompatible:
			out[i] = limiter.IncompatibleOutcome(limiter.CategoryReplyMalformed, nil)
			continue
		}
		// Check only; the batch commits below (limiter.Store's rule).
		k := r.Policy.ID() + string(r.Subject[:])
		w := time.Duration(r.Policy.WindowMillis()) * time.Millisecond
		reset := f.now.Truncate(w).Add(w)
		d := limiter.Decision{Limit: r.Policy.Limit(), ResetAt: reset, PolicyID: r.Policy.ID(), Source: limiter.SourceMemory}
		if f.used[k]+r.Cost <= r.Policy.Limit() {
			d.Allowed = true
		} else {
			d.RetryAfter = reset.Sub(f.now)
		}
		d.Remaining = r.Policy.Limit() - f.used[k]
		out[i] = limiter.EvaluatedOutcome(d)
	}
	if !limiter.Commits(batch, out) {
		return
	}
	for i, r := range batch {
		if d := &out[i].Decision; out[i].Kind == limiter.Evaluated && d.Allowed && r.EffectiveRole().Consumes() {
			f.used[r.Policy.ID()+string(r.Subject[:])] += r.Cost
			d.Remaining -= r.Cost
			d.Consumed = true
		}
	}
}

func TestFakeRulesSanity(t *testing.T) {
	f := &fakeRules{domain: "d", rules: map[string]*descriptors.Rule{"k": fakeRule("p", 1, descriptors.UnitSecond)}}
	if _, ok := f.Match("d", []descriptors.Entry{{Key: "k", Value: "v"}}); !ok {
		t.Fatal("per-value rule did not match")
	}
}
