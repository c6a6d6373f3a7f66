package rls

import (
	"context"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// recordingAuditor keeps every denial, as text.
type recordingAuditor struct {
	mu      sync.Mutex
	denials []string
	raw     []Denial
}

func (r *recordingAuditor) Denied(d Denial) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.raw = append(r.raw, d)
	r.denials = append(r.denials, fmt.Sprintf("%s %s cost=%d limit=%d remaining=%d retry=%v shadow=%v failure=%v id=%q",
		d.Domain, d.PolicyID, d.Cost, d.Limit, d.Remaining, d.RetryAfter, d.Shadow, d.FailureMode, d.RequestID))
}

func (r *recordingAuditor) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.denials
	r.denials = nil
	return out
}

// TestAuditorHearsDenialsOnly scripts calls through every kind of limit and
// checks that the auditor hears exactly the denials (shadow ones flagged),
// step by step.
func TestAuditorHearsDenialsOnly(t *testing.T) {
	rec := &recordingAuditor{}
	e := newRealEnv(t, func(c *Config) { c.Auditor = rec })
	steps := []struct {
		run       func()
		want      []string
		failStore bool
	}{
		{run: func() {
			for range 3 {
				e.call(t, request("rls", desc("user", "alice")))
			}
		}},
		{run: func() { e.call(t, request("rls", withHits(desc("user", "alice"), 2))) },
			want: []string{`rls rls:per-user cost=2 limit=3 remaining=0 retry=50s shadow=false failure=false id=""`}},
		// Shadow: answered OK, audited as a shadow denial.
		{run: func() {
			e.call(t, request("rls", desc("shadow", "x")))
			e.call(t, request("rls", desc("shadow", "x")))
		},
			want: []string{`rls rls/shadow cost=1 limit=1 remaining=0 retry=50s shadow=true failure=false id=""`}},
		// Quota mode: one descriptor over while the other allows is no
		// denial.
		{run: func() {
			e.call(t, request("rls", desc("quota_a", "q"), desc("quota_b", "q")))
			e.call(t, request("rls", desc("quota_a", "q"), desc("quota_b", "q")))
		}},
		// Never fits; unlimited and unmatched say nothing.
		{run: func() { e.call(t, request("rls", desc("blocked", "x"), desc("internal", "y"), desc("nothing", "z"))) },
			want: []string{`rls rls/blocked cost=1 limit=0 remaining=0 retry=59m50s shadow=false failure=false id=""`}},
		// A failed store: fail open is no denial, fail closed is one.
		{failStore: true, run: func() { e.call(t, request("rls", desc("fail_open", "x"), desc("fail_closed", "x"))) },
			want: []string{`rls rls/fail_closed cost=1 limit=5 remaining=0 retry=2.5s shadow=false failure=true id=""`}},
	}
	for i, st := range steps {
		e.store.mu.Lock()
		e.store.fail = 0
		if st.failStore {
			e.store.fail = limiter.Unavailable
		}
		e.store.mu.Unlock()
		st.run()
		if got := rec.take(); fmt.Sprint(got) != fmt.Sprint(st.want) {
			t.Errorf("step %d: denials\n got %q\nwant %q", i, got, st.want)
		}
	}
}

// TestAuditorRequestIDAndPrivacy: the denial carries the x-request-id
// metadata and the subject digest, never the raw descriptor value.
func TestAuditorRequestIDAndPrivacy(t *testing.T) {
	rec := &recordingAuditor{}
	e := newRealEnv(t, func(c *Config) { c.Auditor = rec })
	const raw = "raw-user-value-7f3a"
	ctx, cancel := context.WithTimeout(metadataContext("x-request-id", "req-42"), 5*time.Second)
	defer cancel()
	for range 4 {
		if _, err := e.client.ShouldRateLimit(ctx, request("rls", desc("user", raw))); err != nil {
			t.Fatal(err)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.raw) != 1 {
		t.Fatalf("%d denials, want 1: %q", len(rec.raw), rec.denials)
	}
	d := rec.raw[0]
	if d.RequestID != "req-42" {
		t.Errorf("request id %q, want req-42", d.RequestID)
	}
	if d.Subject == (limiter.SubjectDigest{}) {
		t.Error("no subject digest")
	}
	if !d.Time.Equal(t0) {
		t.Errorf("time %v, want the store clock's %v", d.Time, t0)
	}
	all := fmt.Sprintf("%+v %s", d, hex.EncodeToString(d.Subject[:]))
	if strings.Contains(all, raw) {
		t.Errorf("the denial carries the raw value: %s", all)
	}
}

// TestRequestIDDescriptor: with RequestIDKey set, a descriptor of that one
// key carries the request id: it is never matched (here a rule would limit
// it), and its value wins over the x-request-id metadata.
func TestRequestIDDescriptor(t *testing.T) {
	rec := &recordingAuditor{}
	e := newRealEnv(t, func(c *Config) { c.Auditor = rec; c.RequestIDKey = "user" })
	ctx, cancel := context.WithTimeout(metadataContext("x-request-id", "from-metadata"), 5*time.Second)
	defer cancel()
	long := strings.Repeat("r", 200)
	for i, id := range []string{"from-descriptor", "again", "and-again", "fourth", long} {
		resp, err := e.client.ShouldRateLimit(ctx, request("rls", desc("user", id), desc("blocked", "x")))
		if err != nil {
			t.Fatal(err)
		}
		if st := resp.Statuses[0]; st.Code.String() != "OK" || st.CurrentLimit != nil {
			t.Fatalf("call %d: the request id descriptor was answered %v", i, st)
		}
	}
	got := rec.take()
	if len(got) != 5 {
		t.Fatalf("%d denials, want 5: %q", len(got), got)
	}
	if !strings.HasSuffix(got[0], `id="from-descriptor"`) || !strings.HasSuffix(got[4], `id="`+long[:128]+`"`) {
		t.Errorf("denials %q", got)
	}
	// Without the descriptor, the metadata.
	e.call(t, request("rls", desc("blocked", "x")))
	if _, err := e.client.ShouldRateLimit(ctx, request("rls", desc("blocked", "x"))); err != nil {
		t.Fatal(err)
	}
	if got := rec.take(); len(got) != 2 || !strings.HasSuffix(got[0], `id=""`) || !strings.HasSuffix(got[1], `id="from-metadata"`) {
		t.Errorf("denials %q", got)
	}
}
