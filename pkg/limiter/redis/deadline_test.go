package redis

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/algorithm"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/calendar"
	"github.com/envoy-rls/envoy-rls/pkg/lua"
)

// execBatch runs rate-batch-v2.lua on keys with args and parses the reply
// for pols as the store does.
func (e *env) execBatch(keys, args []string, pols []*limiter.Policy) (bool, []algorithm.Reply, error) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	msgs, err := e.store.execBatch(ctx, keys, args).ToArray()
	if err != nil {
		return false, nil, err
	}
	if len(msgs) != 1 {
		e.t.Fatalf("rate-batch-v2: %d replies for one request", len(msgs))
	}
	if msgs, err = msgs[0].ToArray(); err != nil {
		return false, nil, err
	}
	replies := make([]algorithm.Reply, len(keys))
	committed, err := lua.ParseBatchReplyV2(pols, replyValues(nil, msgs), replies)
	return committed, replies, err
}

// TestProgramDeadline: rate-batch-v2.lua with a request's deadline in
// Redis's clock (its group field). Up to it the batch runs as without it;
// past it nothing is evaluated or written and the reply is { 2, TIME };
// a deadline that is not 0 or an integer in [1, 2^53-1] is an error reply.
func TestProgramDeadline(t *testing.T) {
	e := newEnv(t)
	p := fixed(t, "dl", 5, farWindow)
	key, other := keyOf(p, subjectOf("dl")), keyOf(p, subjectOf("dl2"))
	keys := []string{key, other}
	pols := []*limiter.Policy{p, p}
	args := batchArgs(batchArgs(nil, p, 1, limiter.RoleOrdinary), p, 2, limiter.RoleOrdinary)
	with := func(dl int64) []string {
		return oneCall(args, 2, dl)
	}

	now := e.serverNow()
	committed, r, err := e.execBatch(keys, with(now+time.Hour.Milliseconds()), pols)
	if err != nil || !committed || r[0].Remaining != 4 || r[1].Remaining != 3 {
		t.Fatalf("deadline ahead: %v %+v %v", committed, r, err)
	}
	before := []any{e.dump(key), e.dump(other)}

	now = e.serverNow()
	_, _, err = e.execBatch(keys, with(now-1), pols)
	var expired *lua.ExpiredError
	if !errors.As(err, &expired) || expired.ServerNowMs < now {
		t.Fatalf("deadline passed: error %v, want an ExpiredError at TIME >= %d", err, now)
	}
	if after := []any{e.dump(key), e.dump(other)}; fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatal("a program past its deadline wrote state")
	}
	// Even a batch that would only be denied replies expired: nothing is
	// evaluated.
	_, _, err = e.execBatch([]string{key}, oneCall(batchArgs(nil, p, 5, limiter.RoleOrdinary), 1, 1), pols[:1])
	if !errors.Is(err, lua.ErrExpired) {
		t.Fatalf("deadline 1: %v", err)
	}

	for _, dl := range []float64{-1, 1.5, 9007199254740992, 1e300, math.Inf(1), math.NaN()} {
		group := binary.BigEndian.AppendUint16(nil, 2)
		group = binary.BigEndian.AppendUint64(group, math.Float64bits(dl))
		_, _, err := e.execBatch(keys, append(append([]string{}, args...), string(group)), pols)
		if err == nil || errors.Is(err, lua.ErrExpired) {
			t.Errorf("deadline %v: %v, want an error reply", dl, err)
			continue
		}
		if o := classify(p, err); o.Kind != limiter.Incompatible {
			t.Errorf("deadline %v: classified %v", dl, o.Kind)
		}
	}
	if after := []any{e.dump(key), e.dump(other)}; fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatal("a program with a bad deadline wrote state")
	}
}

// TestHangChargesNoAnsweredCall: while Redis is stopped (SIGSTOP), calls
// with short deadlines return Indeterminate by their deadline; their
// programs wait in Redis's socket and run after SIGCONT, past the deadline
// they carry, so none of them is counted. A call made after the resume
// with an ordinary deadline commits, and is the only one counted.
func TestHangChargesNoAnsweredCall(t *testing.T) {
	// A Timeout long enough that the connection is not closed during the
	// pause: the stalled programs stay queued on it and do run on resume.
	e := newEnvWith(t, Config{Timeout: 10 * time.Second}, redistest.Local())
	srv := e.srv
	p := fixed(t, "hang", 1000, farWindow)
	sub, sub2 := subjectOf("hang"), subjectOf("hang 2")
	e.mustDecide(p, subjectOf("warm-up"))

	const calls = 20
	srv.Pause()
	defer srv.Resume()
	var wg sync.WaitGroup
	outs := make([][]limiter.Outcome, calls)
	for i := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			batch := []limiter.Request{{Policy: p, Subject: sub, Cost: 1}}
			if i%2 == 1 {
				batch = append(batch, limiter.Request{Policy: p, Subject: sub2, Cost: 2})
			}
			outs[i] = make([]limiter.Outcome, len(batch))
			e.store.Evaluate(ctx, batch, outs[i])
		}()
	}
	wg.Wait()
	for i, out := range outs {
		for j, o := range out {
			if o.Kind == limiter.Evaluated {
				t.Fatalf("call %d, request %d: evaluated on a stopped server", i, j)
			}
		}
	}
	srv.Resume()

	// The same connection carries this call after the stalled ones, so
	// Redis has run them all when it answers.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out := make([]limiter.Outcome, 2)
	e.store.Evaluate(ctx, []limiter.Request{{Policy: p, Subject: sub, Cost: 1}, {Policy: p, Subject: sub2, Cost: 1}}, out)
	for j, o := range out {
		if o.Kind != limiter.Evaluated || !o.Decision.Allowed || !o.Decision.Consumed || o.Decision.Remaining != 999 {
			t.Errorf("request %d after the resume: %v %+v (%v), want allowed with 999 left: the stalled calls were counted", j, o.Kind, o.Decision, o.Err)
		}
	}
	for _, s := range []limiter.SubjectDigest{sub, sub2} {
		if h := e.hash(keyOf(p, s)); h["b"] != "1" {
			t.Errorf("count %q after one call in time, want 1 (hash %v)", h["b"], h)
		}
	}
}

// TestExpiredReplyIsUnavailable: a program that reads TIME past the
// deadline it was sent with (here because the store's estimate says Redis
// is an hour behind) writes nothing, and the call is Unavailable with
// category deadline, like a call not sent in time. The TIME of that reply
// corrects the estimate: the next call commits.
func TestExpiredReplyIsUnavailable(t *testing.T) {
	e := newEnv(t)
	p := fixed(t, "expired", 10, farWindow)
	sub := subjectOf("expired")
	now := e.store.local.ms(time.Now())
	e.store.offsets[0] = clockOffset{}
	e.store.offsets[0].sample(now, now-time.Hour.Milliseconds())
	if o := e.evaluate(p, sub, 1); o.Kind != limiter.Unavailable || o.Category != limiter.CategoryDeadline || !errors.Is(o.Err, lua.ErrExpired) {
		t.Fatalf("past the deadline in Redis's clock: %v/%s (%v), want unavailable/deadline", o.Kind, o.Category, o.Err)
	}
	if e.do("EXISTS", keyOf(p, sub)) != int64(0) {
		t.Fatal("an expired program wrote state")
	}
	if off, _ := e.store.offsets[0].estimate(); off < -time.Minute.Milliseconds() {
		t.Fatalf("estimate %d ms after a reply: not corrected", off)
	}
	if o := e.evaluate(p, sub, 1); o.Kind != limiter.Evaluated || o.Decision.Remaining != 9 {
		t.Fatalf("after the correction: %v %+v (%v)", o.Kind, o.Decision, o.Err)
	}
}

// TestDeadlineSentFromConnect: a standalone store reads TIME when it
// connects, so its first program call already carries a deadline. The
// estimate is a lower bound of the offset: at most the TIME read later
// minus the local time before that read, plus the two millisecond floors.
func TestDeadlineSentFromConnect(t *testing.T) {
	e := newEnv(t)
	off, ok := e.store.offsets[0].estimate()
	if !ok {
		t.Fatal("no offset estimate after connecting")
	}
	local := e.store.local.ms(time.Now())
	bound := e.serverNow() - local + 2
	if off > bound || off < bound-time.Minute.Milliseconds() {
		t.Errorf("estimate %d ms, want at most %d ms (and not far below)", off, bound)
	}
}

// TestClockOffsetSteps: the offset estimate, step by step in local ms: the
// largest sample of the current and the previous window with samples; no
// estimate (so no deadline) before the first sample.
func TestClockOffsetSteps(t *testing.T) {
	const margin = int64(deadlineMargin / time.Millisecond)
	var c clockOffset
	if _, ok := c.redisDeadline(5000); ok {
		t.Fatal("a deadline without any sample")
	}
	type step struct {
		local, server int64 // a sample, when local > 0
		want          int64 // the estimate afterwards
	}
	steps := []step{
		{local: 10_000, server: 10_500, want: 500},
		{local: 10_200, server: 10_650, want: 500},                   // a slower reply: lower
		{local: 10_300, server: 10_805, want: 505},                   // a faster one: tighter
		{local: 11_000, server: 11_400, want: 505},                   // new window; the previous stays
		{local: 12_100, server: 12_500, want: 400},                   // two windows on: the old one is gone
		{local: 12_200, server: 13_200, want: 1000},                  // Redis stepped forward: at once
		{local: 13_000, server: 12_950, want: 1000},                  // stepped back: the previous window stays
		{local: 14_000, server: 13_960, want: -40},                   // after one more window, followed
		{local: 13_500, server: 99_999, want: -40},                   // a late sample of an old window: dropped
		{local: 14_100, server: 14_100 + maxOffsetMs + 1, want: -40}, // beyond the trusted range: dropped
	}
	for i, s := range steps {
		c.sample(s.local, s.server)
		got, ok := c.estimate()
		if !ok || got != s.want {
			t.Fatalf("step %d: estimate %d %v, want %d", i, got, ok, s.want)
		}
		if d, ok := c.redisDeadline(20_000); !ok || d != 20_000+s.want-margin {
			t.Fatalf("step %d: deadline %d %v, want %d", i, d, ok, 20_000+s.want-margin)
		}
	}
	// The deadline sent is an integer in [1, 2^53-1].
	var low, high clockOffset
	low.sample(10_000, 0)
	if d, _ := low.redisDeadline(5_000); d != 1 {
		t.Errorf("a deadline before Redis's epoch: %d, want 1", d)
	}
	high.sample(10_000, 10_000+maxOffsetMs)
	if d, _ := high.redisDeadline(limiter.MaxSafeInteger); d != limiter.MaxSafeInteger {
		t.Errorf("a deadline past 2^53-1: %d", d)
	}
}

// TestLocalClock: local ms follow the monotonic clock from the wall clock
// at the base, floored.
func TestLocalClock(t *testing.T) {
	base := time.UnixMilli(1_000_000).Add(400 * time.Microsecond)
	l := newLocalClock(base)
	for _, c := range []struct {
		d    time.Duration
		want int64
	}{
		{0, 1_000_000},
		{599 * time.Microsecond, 1_000_000},
		{600 * time.Microsecond, 1_000_000},
		{time.Millisecond, 1_000_001},
		{-time.Microsecond, 999_999},
		{-time.Millisecond, 999_999},
		{-1001 * time.Microsecond, 999_998},
	} {
		if got := l.ms(base.Add(c.d)); got != c.want {
			t.Errorf("base%+v: %d, want %d", c.d, got, c.want)
		}
	}
}

// TestHangEveryKindOfLimit: while Redis is stopped (SIGSTOP), calls of
// every kind of limit — each rate algorithm, a penalty box, a calendar
// window, a post-paid charge and a concurrency take — fail by their
// deadline; their programs run after SIGCONT, past the deadline they
// carry, and change nothing: each subject's first call after the resume
// finds its whole limit but its own cost. (A charge missed this way is
// the journal's to replay, above the store.)
func TestHangEveryKindOfLimit(t *testing.T) {
	e := newEnvWith(t, Config{Timeout: 10 * time.Second}, redistest.Local())
	const limit = 6
	spec := func(id string, alg limiter.Algorithm, prm limiter.Params) limiter.PolicySpec {
		return limiter.PolicySpec{ID: id, Algorithm: alg, Params: prm}
	}
	penalty := spec("hang.penalty", limiter.FixedWindow, limiter.FixedWindowParams{Limit: limit, Window: farWindow})
	penalty.Penalty = limiter.Penalty{Duration: time.Minute}
	charge := spec("hang.charge", limiter.FixedWindow, limiter.FixedWindowParams{Limit: limit, Window: farWindow})
	charge.Charge = limiter.ChargeAlways
	pols := []*limiter.Policy{
		fixed(t, "hang.fixed", limit, farWindow),
		sliding(t, "hang.sliding", limit, time.Hour),
		slidingLog(t, "hang.log", limit, farWindow),
		bucket(t, "hang.bucket", limit, 1, time.Hour),
		cellRate(t, "hang.gcra", limit, 1, time.Hour),
		limitertest.Policy(t, penalty),
		limitertest.Policy(t, charge),
		calendarPolicy(t, "hang.calendar", limit, calendar.Month, "UTC"),
		limitertest.LeasePolicy(t, "hang.lease", limit, time.Hour),
	}
	// Every program is loaded, as on a replica that has served: the
	// stalled runs are the ones Redis runs on resume.
	for _, p := range pols {
		e.mustDecide(p, subjectOf("warm-up"))
	}
	e.srv.Pause()
	defer e.srv.Resume()
	var wg sync.WaitGroup
	var evaluated atomic.Int64
	for _, p := range pols {
		for range 3 {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
				defer cancel()
				out := make([]limiter.Outcome, 1)
				e.store.Evaluate(ctx, []limiter.Request{{Policy: p, Subject: subjectOf("hang"), Cost: 2}}, out)
				if out[0].Kind == limiter.Evaluated {
					evaluated.Add(1)
				}
			})
		}
	}
	wg.Wait()
	e.srv.Resume()
	if n := evaluated.Load(); n > 0 {
		t.Fatalf("%d calls evaluated on a stopped server", n)
	}
	for _, p := range pols {
		o := e.evaluate(p, subjectOf("hang"), 1)
		if o.Kind != limiter.Evaluated || !o.Decision.Consumed || o.Decision.Remaining != limit-1 {
			t.Errorf("%s after the resume: %v %+v (%v), want %d left: a stalled call was counted", p.ID(), o.Kind, o.Decision, o.Err, limit-1)
		}
	}
}
