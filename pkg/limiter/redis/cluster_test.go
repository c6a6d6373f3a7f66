package redis

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/calendar"
)

// TestClusterBatch runs the store suite on a local six-node Redis Cluster:
// the batch table and the exactness check with one shared hash tag (one
// slot: one atomic program), resets of states spread over every master,
// keys named like states that are not states left alone by a policy
// reset, reservations (limitertest.RunReservations), and a batch split over
// two slots, whose refund and best-effort window (docs/consistency.md) it
// observes through the store's test hook, and whose reserve a committed
// slot keeps held.
func TestClusterBatch(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster topology: skipped with -short")
	}
	t.Parallel()
	c := redistest.StartCluster(t)
	cfg := Config{Addrs: c.Addrs(), Mode: ModeCluster, Timeout: 5 * time.Second}
	s := newStore(t, cfg)
	sharedTag := func(name string) limiter.Tag {
		var tag limiter.Tag
		h := sha256.Sum256([]byte(name))
		copy(tag[:], h[:])
		return tag
	}

	// First, on an empty cluster: each step of a reset scans from the start
	// of each master's keys, so the states the other subtests leave behind
	// would only add steps.
	t.Run("a policy reset skips keys that are not states, on every master", func(t *testing.T) {
		checkResetSkipsForeignKeys(t, s, c.MasterFor)
	})

	t.Run("table with a shared hash tag", func(t *testing.T) {
		limitertest.Run(t, s, limitertest.Config{Prefix: limitertest.Prefix(), Tag: sharedTag})
	})

	t.Run("reset", func(t *testing.T) {
		limitertest.RunReset(t, s, limitertest.Config{Prefix: limitertest.Prefix()})
	})

	t.Run("reservations, subjects spread over slots", func(t *testing.T) {
		limitertest.RunReservations(t, s, limitertest.Config{Prefix: reservationPrefix(t)}, nil)
	})

	t.Run("exactness with a shared hash tag, 3 stores x 32 goroutines", func(t *testing.T) {
		stores := []limiter.Store{s, newStore(t, cfg), newStore(t, cfg)}
		limitertest.Exactness(t, stores, limitertest.Config{Prefix: limitertest.Prefix(), Tag: sharedTag}, 32, 3, 100)
	})

	// Two tags in different slots (and, with three masters, usually on
	// different nodes).
	tagA, tagB := limiter.Tag{1}, limiter.Tag{2}
	for i := uint64(3); keySlot(tagKey(tagA)) == keySlot(tagKey(tagB)); i++ {
		binary.BigEndian.PutUint64(tagB[:], i)
	}
	prefix := limitertest.Prefix()
	user := fixed(t, prefix+".user", 5, farWindow)
	tenant := fixed(t, prefix+".tenant", 1, farWindow)
	hget := func(key, field string) string {
		t.Helper()
		return stateView(c.MasterFor(key).MustDo("GET", key))[field]
	}

	t.Run("cross-slot: the denying slot's refusal is refunded on the other", func(t *testing.T) {
		us, ts := subjectOf(prefix+"/user"), subjectOf(prefix+"/tenant")
		ureq := limiter.Request{Policy: user, Subject: us, Cost: 1, Tag: tagA}
		treq := limiter.Request{Policy: tenant, Subject: ts, Cost: 1, Tag: tagB}
		ukey := string(requestKey(nil, &ureq))
		out := make([]limiter.Outcome, 2)
		s.Evaluate(context.Background(), []limiter.Request{treq}, out[:1]) // exhaust the tenant
		if !out[0].Decision.Consumed {
			t.Fatalf("tenant: %+v", out[0])
		}
		// The window: between the user's slot committing and the refund,
		// the user's counter shows the cost (another request would see 4
		// left, not 5).
		var during atomic.Value
		s.beforeRefund = func() { during.Store(hget(ukey, "b")) }
		defer func() { s.beforeRefund = nil }()
		s.Evaluate(context.Background(), []limiter.Request{ureq, treq}, out)
		if d := out[0].Decision; out[0].Kind != limiter.Evaluated || !d.Allowed || d.Consumed || d.Remaining != 5 {
			t.Fatalf("user: %+v, want allowed, not consumed, 5 left", out[0])
		}
		if d := out[1].Decision; d.Allowed || d.Consumed {
			t.Fatalf("tenant: %+v, want denied", out[1])
		}
		if during.Load() != "1" {
			t.Fatalf("during the window the user's count read %v, want 1 (the committed cost)", during.Load())
		}
		if b := hget(ukey, "b"); b != "0" {
			t.Fatalf("after the refund the user's count is %s, want 0", b)
		}
		// Another request consuming inside the window keeps its own cost:
		// the refund gives back exactly what this batch took.
		s2 := newStore(t, cfg)
		s.beforeRefund = func() {
			o := make([]limiter.Outcome, 1)
			s2.Evaluate(context.Background(), []limiter.Request{ureq}, o)
			if !o[0].Decision.Consumed || o[0].Decision.Remaining != 3 {
				t.Errorf("inside the window: %+v, want 3 left (it saw the batch's cost)", o[0])
			}
		}
		s.Evaluate(context.Background(), []limiter.Request{ureq, treq}, out)
		if b := hget(ukey, "b"); b != "1" {
			t.Fatalf("after the second refund the user's count is %s, want 1 (the other request's)", b)
		}
	})

	t.Run("cross-slot: an invalid request blocks the batch, the others are only checked", func(t *testing.T) {
		us, ts := subjectOf(prefix+"/checked-user"), subjectOf(prefix+"/checked-tenant")
		ureq := limiter.Request{Policy: user, Subject: us, Cost: 1, Tag: tagA}
		treq := limiter.Request{Policy: user, Subject: ts, Cost: 1, Tag: tagB}
		invalid := limiter.Request{Policy: user, Subject: ts, Cost: 0, Tag: tagB}
		ukey, tkey := string(requestKey(nil, &ureq)), string(requestKey(nil, &treq))
		out := make([]limiter.Outcome, 3)
		s.Evaluate(context.Background(), []limiter.Request{ureq, treq}, out[:2])
		if !out[0].Decision.Consumed || !out[1].Decision.Consumed {
			t.Fatalf("first call: %+v", out[:2])
		}
		s.Evaluate(context.Background(), []limiter.Request{ureq, treq, invalid}, out)
		if out[2].Kind != limiter.Unavailable || out[2].Category != limiter.CategoryInvalidRequest {
			t.Fatalf("invalid request: %+v", out[2])
		}
		for i := range 2 {
			if d := out[i].Decision; out[i].Kind != limiter.Evaluated || !d.Allowed || d.Consumed || d.Remaining != 4 {
				t.Fatalf("request %d: %+v, want allowed, not consumed, 4 left", i, out[i])
			}
		}
		// Checked, so neither taken nor given back.
		if b := hget(ukey, "b"); b != "1" {
			t.Fatalf("user count %s, want 1", b)
		}
		if b := hget(tkey, "b"); b != "1" {
			t.Fatalf("tenant count %s, want 1", b)
		}
	})

	t.Run("cross-slot: a reserve its slot committed stays held, and its settle gives the budget back", func(t *testing.T) {
		budget := limitertest.Policy(t, limiter.PolicySpec{ID: prefix + ".budget", Algorithm: limiter.FixedWindow,
			Params:  limiter.FixedWindowParams{Limit: 1000, Window: farWindow},
			Reserve: limiter.Reserve{TTL: 10 * time.Minute}})
		bs := subjectOf(prefix + "/reserve-budget")
		reserve := limiter.Request{Policy: budget, Subject: bs, Cost: 400, Lease: limiter.LeaseTake, Tag: tagA}
		ureq := limiter.Request{Policy: user, Subject: subjectOf(prefix + "/reserve-user"), Cost: 1, Tag: tagA}
		treq := limiter.Request{Policy: tenant, Subject: subjectOf(prefix + "/reserve-tenant"), Cost: 1, Tag: tagB}
		ukey := string(requestKey(nil, &ureq))
		left := func() int64 {
			t.Helper()
			o := make([]limiter.Outcome, 1)
			s.Evaluate(context.Background(), []limiter.Request{{Policy: budget, Subject: bs, Cost: 1, Role: limiter.RoleCheck, Tag: tagA}}, o)
			if o[0].Kind != limiter.Evaluated {
				t.Fatalf("check of the budget: %+v", o[0])
			}
			return o[0].Decision.Remaining
		}
		out := make([]limiter.Outcome, 3)
		s.Evaluate(context.Background(), []limiter.Request{treq}, out[:1]) // exhaust the tenant
		if !out[0].Decision.Consumed {
			t.Fatalf("tenant: %+v", out[0])
		}
		// The reserve's slot (with the user) commits, the tenant's denies:
		// the batch does not commit, the user's cost is refunded, but the
		// reserve keeps its reservation and reports it.
		before := time.Now()
		s.Evaluate(context.Background(), []limiter.Request{reserve, ureq, treq}, out)
		after := time.Now()
		if d := out[2].Decision; out[2].Kind != limiter.Evaluated || d.Allowed || d.Consumed {
			t.Fatalf("tenant: %+v, want denied", out[2])
		}
		if d := out[1].Decision; out[1].Kind != limiter.Evaluated || !d.Allowed || d.Consumed || d.Remaining != 5 {
			t.Fatalf("user: %+v, want allowed, not consumed, 5 left", out[1])
		}
		if b := hget(ukey, "b"); b != "0" {
			t.Fatalf("after the refund the user's count is %s, want 0", b)
		}
		d := out[0].Decision
		if out[0].Kind != limiter.Evaluated || !d.Allowed || !d.Consumed || d.Remaining != 600 {
			t.Fatalf("reserve: %+v, want allowed, consumed (held), 600 left", out[0])
		}
		ttl := budget.Reserve().TTL
		if lo, hi := before.Add(ttl-time.Second), after.Add(ttl+time.Second); d.HoldAt.Before(lo) || d.HoldAt.After(hi) {
			t.Fatalf("reserve: HoldAt %v, want about now + %v (%v..%v)", d.HoldAt, ttl, lo, hi)
		}
		if got := left(); got != 600 {
			t.Fatalf("budget: %d left after the split batch, want 600 (the reservation held)", got)
		}
		// The holder settles it with a usage of 0: the reservation goes
		// and the budget is whole again; a replay changes nothing.
		settle := limiter.Request{Policy: budget, Subject: bs, Cost: 0, Lease: limiter.LeaseRelease, LeaseAt: d.HoldAt.UnixMilli(), Tag: tagA}
		for i := range 2 {
			s.Evaluate(context.Background(), []limiter.Request{settle}, out[:1])
			if sd := out[0].Decision; out[0].Kind != limiter.Evaluated || !sd.Allowed || !sd.Consumed || sd.Remaining != 1000 || !sd.HoldAt.IsZero() {
				t.Fatalf("settle %d of the held reservation with usage 0: %+v, want allowed, recorded, 1000 left", i, out[0])
			}
			if got := left(); got != 1000 {
				t.Fatalf("budget: %d left after settle %d with usage 0, want 1000", got, i)
			}
		}

		// The reserve's own slot does not commit (the user there denies),
		// the tenant's slot does (a fresh tenant) and is refunded: the
		// reserve holds nothing and names no reservation.
		full := limiter.Request{Policy: tenant, Subject: subjectOf(prefix + "/reserve-user-full"), Cost: 1, Tag: tagA}
		fresh := limiter.Request{Policy: user, Subject: subjectOf(prefix + "/reserve-tenant-fresh"), Cost: 1, Tag: tagB}
		s.Evaluate(context.Background(), []limiter.Request{full}, out[:1]) // exhaust it
		s.Evaluate(context.Background(), []limiter.Request{reserve, full, fresh}, out)
		if d := out[1].Decision; out[1].Kind != limiter.Evaluated || d.Allowed || d.Consumed {
			t.Fatalf("the denying request of the reserve's slot: %+v", out[1])
		}
		if d := out[0].Decision; out[0].Kind != limiter.Evaluated || !d.Allowed || d.Consumed || !d.HoldAt.IsZero() || d.Remaining != 1000 {
			t.Fatalf("reserve in the slot that did not commit: %+v, want allowed, not consumed, no HoldAt, 1000 left", out[0])
		}
		if d := out[2].Decision; out[2].Kind != limiter.Evaluated || !d.Allowed || d.Consumed || d.Remaining != 5 {
			t.Fatalf("the other slot's request: %+v, want allowed, not consumed, 5 left", out[2])
		}
		if b := hget(string(requestKey(nil, &fresh)), "b"); b != "0" {
			t.Fatalf("after the refund the other slot's count is %s, want 0", b)
		}
		if got := left(); got != 1000 {
			t.Fatalf("budget: %d left, want 1000 (nothing reserved)", got)
		}
	})

	t.Run("cross-slot: quota limits are decided over every slot", func(t *testing.T) {
		qa := limitertest.Policy(t, limiter.PolicySpec{ID: prefix + ".qa", Algorithm: limiter.FixedWindow, Params: limiter.FixedWindowParams{Limit: 1, Window: farWindow}})
		qb := limitertest.Policy(t, limiter.PolicySpec{ID: prefix + ".qb", Algorithm: limiter.FixedWindow, Params: limiter.FixedWindowParams{Limit: 2, Window: farWindow}})
		sub := subjectOf(prefix + "/quota")
		a := limiter.Request{Policy: qa, Subject: sub, Cost: 1, Role: limiter.RoleQuota, Tag: tagA}
		b := limiter.Request{Policy: qb, Subject: sub, Cost: 1, Role: limiter.RoleQuota, Tag: tagB}
		out := make([]limiter.Outcome, 2)
		for i, want := range []struct {
			consumedA, consumedB bool
			remA, remB           int64
		}{
			{true, true, 0, 1},   // both allow
			{false, true, 0, 0},  // a over, b allows: commits (b in the other slot consumes)
			{false, false, 0, 0}, // both over: nothing
		} {
			s.Evaluate(context.Background(), []limiter.Request{a, b}, out)
			da, db := out[0].Decision, out[1].Decision
			if da.Consumed != want.consumedA || db.Consumed != want.consumedB || da.Remaining != want.remA || db.Remaining != want.remB {
				t.Fatalf("call %d: a %+v b %+v, want %+v", i, da, db, want)
			}
		}
		if v := hget(string(requestKey(nil, &b)), "b"); v != "2" {
			t.Fatalf("qb consumed %s, want 2", v)
		}
	})

	t.Run("cross-slot: a calendar window's cost is refunded into its period", func(t *testing.T) {
		month := calendarPolicy(t, prefix+".month", 5, calendar.Month, "Europe/Berlin")
		creq := limiter.Request{Policy: month, Subject: subjectOf(prefix + "/calendar"), Cost: 2, Tag: tagA}
		treq := limiter.Request{Policy: tenant, Subject: subjectOf(prefix + "/calendar-tenant"), Cost: 1, Tag: tagB}
		ckey := string(requestKey(nil, &creq))
		out := make([]limiter.Outcome, 2)
		s.Evaluate(context.Background(), []limiter.Request{treq}, out[:1]) // exhaust the tenant
		s.Evaluate(context.Background(), []limiter.Request{creq, treq}, out)
		if d := out[0].Decision; out[0].Kind != limiter.Evaluated || !d.Allowed || d.Consumed || d.Remaining != 5 {
			t.Fatalf("calendar: %+v, want allowed, not consumed, 5 left", out[0])
		}
		start, end := month.Calendar().Period(time.Now().UnixMilli())
		if d := out[0].Decision; d.ResetAt.UnixMilli() != end {
			t.Fatalf("calendar: reset at %v, the month ends at %v", d.ResetAt, time.UnixMilli(end))
		}
		if a, b := hget(ckey, "a"), hget(ckey, "b"); a != strconv.FormatInt(start, 10) || b != "0" {
			t.Fatalf("after the refund: window %s count %s, want window %d count 0", a, b, start)
		}
	})

	t.Run("cross-slot: probes block over every slot and are never taken or refunded", func(t *testing.T) {
		lim := func(id string, n int64) *limiter.Policy {
			return limitertest.Policy(t, limiter.PolicySpec{ID: prefix + "." + id, Algorithm: limiter.FixedWindow, Params: limiter.FixedWindowParams{Limit: n, Window: farWindow}})
		}
		pa, pb, qa, qb := lim("pa", 1), lim("pb", 5), lim("pqa", 1), lim("pqb", 5)
		sub := subjectOf(prefix + "/probe")
		full := limiter.Request{Policy: pa, Subject: sub, Cost: 1, Tag: tagA}
		out := make([]limiter.Outcome, 2)
		s.Evaluate(context.Background(), []limiter.Request{full}, out[:1])
		// A probe of the full limit in one slot blocks the ordinary request
		// in the other, which the store gives back.
		probe := limiter.Request{Policy: pa, Subject: sub, Cost: 1, Role: limiter.RoleProbe, Tag: tagA}
		other := limiter.Request{Policy: pb, Subject: sub, Cost: 1, Tag: tagB}
		s.Evaluate(context.Background(), []limiter.Request{probe, other}, out)
		if d := out[0].Decision; out[0].Kind != limiter.Evaluated || d.Allowed || d.Consumed {
			t.Fatalf("probe of a full limit: %+v", out[0])
		}
		if d := out[1].Decision; !d.Allowed || d.Consumed || d.Remaining != 5 {
			t.Fatalf("the other slot's request: %+v, want allowed, not consumed, 5 left", d)
		}
		if v := hget(string(requestKey(nil, &other)), "b"); v != "0" && v != "" {
			t.Fatalf("the other slot's count is %s after the refund, want 0", v)
		}
		// Quota: a denying quota probe in one slot, a quota limit that
		// allows in the other: commits; the probe's limit is not taken.
		qfull := limiter.Request{Policy: qa, Subject: sub, Cost: 1, Role: limiter.RoleQuota, Tag: tagA}
		s.Evaluate(context.Background(), []limiter.Request{qfull}, out[:1])
		qprobe := limiter.Request{Policy: qa, Subject: sub, Cost: 1, Role: limiter.RoleQuotaProbe, Tag: tagA}
		qother := limiter.Request{Policy: qb, Subject: sub, Cost: 1, Role: limiter.RoleQuota, Tag: tagB}
		s.Evaluate(context.Background(), []limiter.Request{qprobe, qother}, out)
		if d := out[0].Decision; d.Allowed || d.Consumed {
			t.Fatalf("quota probe of a full limit: %+v", out[0])
		}
		if d := out[1].Decision; !d.Allowed || !d.Consumed || d.Remaining != 4 {
			t.Fatalf("the other slot's quota request: %+v, want consumed, 4 left", d)
		}
		// An allowing quota probe takes nothing.
		qprobe.Policy, qprobe.Tag = qb, tagB
		s.Evaluate(context.Background(), []limiter.Request{qfull, qprobe}, out)
		if d := out[1].Decision; !d.Allowed || d.Consumed || d.Remaining != 4 {
			t.Fatalf("allowing quota probe: %+v, want allowed, not consumed, 4 left", d)
		}
		if v := hget(string(requestKey(nil, &qother)), "b"); v != "1" {
			t.Fatalf("quota count %s, want 1", v)
		}
	})

	t.Run("deadline: every slot has an estimate from connect; a slot past its deadline commits nothing, the other is refunded", func(t *testing.T) {
		for slot := range s.offsets {
			if _, ok := s.offsets[slot].estimate(); !ok {
				t.Fatalf("slot %d: no clock offset estimate after connecting", slot)
			}
		}
		ureq := limiter.Request{Policy: user, Subject: subjectOf(prefix + "/late-user"), Cost: 1, Tag: tagA}
		treq := limiter.Request{Policy: tenant, Subject: subjectOf(prefix + "/late-tenant"), Cost: 1, Tag: tagB}
		ukey, tkey := string(requestKey(nil, &ureq)), string(requestKey(nil, &treq))
		// The tenant's slot believes its node an hour behind: its program
		// reads TIME past the deadline it is sent.
		off := &s.offsets[keySlot(tkey)]
		cur, prev := off.cur.Load(), off.prev.Load()
		defer func() { off.cur.Store(cur); off.prev.Store(prev) }()
		off.cur.Store(0)
		off.prev.Store(0)
		now := s.local.ms(time.Now())
		off.sample(now, now-time.Hour.Milliseconds())
		out := make([]limiter.Outcome, 2)
		s.Evaluate(context.Background(), []limiter.Request{ureq, treq}, out)
		if o := out[1]; o.Kind != limiter.Unavailable || o.Category != limiter.CategoryDeadline {
			t.Fatalf("tenant: %v/%s (%v), want unavailable/deadline", o.Kind, o.Category, o.Err)
		}
		if d := out[0].Decision; out[0].Kind != limiter.Evaluated || !d.Allowed || d.Consumed || d.Remaining != 5 {
			t.Fatalf("user: %+v, want allowed, not consumed, 5 left", out[0])
		}
		if b := hget(ukey, "b"); b != "0" {
			t.Fatalf("after the refund the user's count is %s, want 0", b)
		}
		if b := hget(tkey, "b"); b != "" {
			t.Fatalf("the expired slot wrote the tenant's count %s", b)
		}
	})
	t.Run("demand exchange: aggregates of several slots in one call, each in its state's slot", func(t *testing.T) {
		p := limitertest.Prefix()
		aggs := []DemandSwap{
			{Policy: fixed(t, p+".rlqs", 5, time.Second), Subject: subjectOf(p + "/a"), Tag: tagA},
			{Policy: fixed(t, p+".rlqs", 5, time.Second), Subject: subjectOf(p + "/b"), Tag: tagB},
			{Policy: fixed(t, p+".rlqs", 5, time.Second), Subject: subjectOf(p + "/c")},
		}
		// Every node without the program: each gets its source once.
		for _, n := range c.Nodes {
			n.MustDo("SCRIPT", "FLUSH")
		}
		s2 := newStore(t, cfg)
		mustSwap(t, s, "A", time.Minute, aggs, []int64{1}, []int64{2, 3}, nil)
		wantOthers(t, "B", mustSwap(t, s2, "B", time.Minute, aggs, []int64{10}, nil, []int64{30}), []int64{1}, []int64{2, 3}, nil)
		wantOthers(t, "A", mustSwap(t, s, "A", time.Minute, aggs, []int64{1}, []int64{2, 3}, nil), []int64{10}, nil, []int64{30})
		for _, a := range aggs {
			key := string(DemandKey(nil, a.Policy, a.Subject, a.Tag))
			if n := c.MasterFor(string(StorageKey(nil, a.Policy, a.Subject, a.Tag))).MustDo("HLEN", key); n != int64(2) {
				t.Errorf("%s: HLEN %v on the master of its state's slot, want 2", key, n)
			}
		}
	})

	t.Run("cross-slot spans: one program run per slot and the refund, under the caller's span", func(t *testing.T) {
		exp := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
		tcfg := cfg
		tcfg.TracerProvider = tp
		st := newStore(t, tcfg)
		p := limitertest.Prefix()
		ureq := limiter.Request{Policy: fixed(t, p+".user", 5, farWindow), Subject: subjectOf(p + "/span-user"), Cost: 1, Tag: tagA}
		treq := limiter.Request{Policy: fixed(t, p+".tenant", 1, farWindow), Subject: subjectOf(p + "/span-tenant"), Cost: 1, Tag: tagB}
		out := make([]limiter.Outcome, 2)
		ctx, call := tp.Tracer("test").Start(context.Background(), "call")
		st.Evaluate(ctx, []limiter.Request{treq}, out[:1]) // exhausts the tenant
		st.Evaluate(ctx, []limiter.Request{ureq, treq}, out)
		call.End()
		if out[1].Decision.Allowed || out[0].Decision.Consumed {
			t.Fatalf("outcomes %+v, want the tenant denied and the user not consumed", out)
		}
		counts := map[string]int{}
		outcomes := map[string]int{}
		for _, sp := range exp.GetSpans() {
			if sp.Name == "call" {
				continue
			}
			counts[sp.Name]++
			if sp.Parent.SpanID() != call.SpanContext().SpanID() {
				t.Errorf("span %q: parent %v, want the caller's %v", sp.Name, sp.Parent.SpanID(), call.SpanContext().SpanID())
			}
			for _, kv := range sp.Attributes {
				v := kv.Value.Emit()
				if kv.Key == "envoy_rls.outcome" {
					outcomes[v]++
				}
				for _, r := range []limiter.Request{ureq, treq} {
					if strings.Contains(v, string(requestKey(nil, &r))) || strings.Contains(v, fmt.Sprintf("%x", r.Subject[:])) {
						t.Errorf("span %q records a key or subject: %s=%q", sp.Name, kv.Key, v)
					}
				}
			}
		}
		// First call: one run. Second: one run per slot, then the refund of
		// the user's slot.
		if counts[batchSpanName] != 3 || counts[refundSpanName] != 1 {
			t.Errorf("spans %v, want 3 %s and 1 %s", counts, batchSpanName, refundSpanName)
		}
		if outcomes["allowed"] != 2 || outcomes["denied"] != 1 {
			t.Errorf("program run outcomes %v, want 2 allowed (tenant's first, user's) and 1 denied", outcomes)
		}
	})
}

func tagKey(tag limiter.Tag) string {
	var sub limiter.SubjectDigest
	p, _ := limiter.NewPolicy(limiter.PolicySpec{ID: "k", Algorithm: limiter.FixedWindow, Params: limiter.FixedWindowParams{Limit: 1, Window: time.Second}})
	return string(StorageKey(nil, p, sub, tag))
}

// reservationPrefix is a policy ID prefix for limitertest.RunReservations
// on a Cluster whose subjects spread over slots but for the two of its
// batch that does not commit ("-tenant" and "-u1"), which share one: that
// case asserts what one atomic program promises (the reserve takes
// nothing), while a reserve its slot committed in a split batch stays held
// (the cross-slot subtest of TestClusterBatch). "-u2", in another slot,
// puts a settle beside an allowed request of another slot.
func reservationPrefix(t *testing.T) string {
	slot := func(prefix, name string) uint16 {
		return keySlot(string(appendTag(nil, limitertest.Subject(prefix+name), limiter.Tag{})))
	}
	base := limitertest.Prefix()
	for i := range 1 << 20 {
		p := base + "r" + strconv.Itoa(i)
		if a := slot(p, "-tenant"); a == slot(p, "-u1") && a != slot(p, "-u2") {
			return p
		}
	}
	t.Fatal("no prefix puts the suite's uncommitted batch in one slot")
	return ""
}
