package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/envoy-rls/envoy-rls/internal/polltest"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// Fault tests of group commit (commit.go): Redis hung or killed while group
// runs are in flight and calls wait in the slot's queue, and calls that
// leave the queue. Each test drives the queue into a known state (runs in
// flight behind a stopped Redis, calls waiting behind them) by watching the
// group metrics and the queue, never by sleeping.

// faultWait bounds waiting for a state the test drives the store into, and
// for every call of a test to return.
const faultWait = 30 * time.Second

// faultLate is how much later than its deadline a call may return: a
// generous bound for a loaded machine (the store answers at the deadline).
const faultLate = 2 * time.Second

// faultEnv is a Store (with group metrics on a registry of its own) on a
// local Redis that the test stops, resumes or kills. The Timeout is long,
// so that rueidis does not close the connection of a stopped server on its
// own: the programs sent to it stay in its socket and run on resume.
type faultEnv struct {
	*env
	reg *prometheus.Registry
}

func newFaultEnv(t *testing.T) *faultEnv {
	t.Helper()
	reg, m := newMetrics(t)
	e := newEnvWith(t, Config{Timeout: 10 * time.Second, Metrics: m}, redistest.Local())
	return &faultEnv{env: e, reg: reg}
}

// histogram returns the named histogram of fe's registry.
func (fe *faultEnv) histogram(name string) *dto.Histogram {
	fe.t.Helper()
	return histogramOf(fe.t, fe.reg, name)
}

// runCalls is how many calls the group runs started so far carried.
func (fe *faultEnv) runCalls() uint64 {
	return uint64(fe.histogram("envoy_rls_redis_group_requests").GetSampleSum())
}

// runs is how many group runs have started (each is observed as it is sent).
func (fe *faultEnv) runs() uint64 {
	return fe.histogram("envoy_rls_redis_group_requests").GetSampleCount()
}

// grouped is how many runs carried more than one call, and how many calls
// waited in the queue before their run was sent.
func (fe *faultEnv) grouped() (runs, waited uint64) {
	size := fe.histogram("envoy_rls_redis_group_requests")
	runs = size.GetSampleCount()
	for _, b := range size.GetBucket() {
		if b.GetUpperBound() == 1 {
			runs -= b.GetCumulativeCount()
		}
	}
	wait := fe.histogram("envoy_rls_redis_group_wait_seconds")
	waited = wait.GetSampleCount()
	for _, b := range wait.GetBucket() {
		if b.GetUpperBound() == 0 {
			waited -= b.GetCumulativeCount()
		}
	}
	return runs, waited
}

// waitValue polls get until it returns want (what it counts: what), for
// at most faultWait.
func waitValue[T comparable](t *testing.T, what string, want T, get func() T) {
	t.Helper()
	polltest.Eventually(t, faultWait, time.Millisecond, fmt.Sprintf("%v %s", want, what), func() error {
		if got := get(); got != want {
			return fmt.Errorf("%v %s", got, what)
		}
		return nil
	})
}

// waitRuns waits until n group runs have started.
func (fe *faultEnv) waitRuns(t *testing.T, n uint64) {
	t.Helper()
	waitValue(t, "group runs started", n, fe.runs)
}

// stall stops Redis and makes the slot's GroupInFlight first calls on fc
// (deadline d, on p, sub and sub2 as fc.start makes them): it returns them
// once each has been sent alone in a run that Redis does not answer. The
// caller resumes (or kills) Redis.
func (fe *faultEnv) stall(t *testing.T, fc *faultCalls, d time.Duration, p *limiter.Policy, sub, sub2 limiter.SubjectDigest) []*faultCall {
	t.Helper()
	base := fe.runs()
	fe.srv.Pause()
	heads := fc.start(fe.store, "head", DefaultGroupInFlight, d, p, sub, sub2)
	fe.waitRuns(t, base+DefaultGroupInFlight)
	return heads
}

// queued is how many calls wait in the queue of the store's only slot.
func (fe *faultEnv) queued() int {
	_, q := committerState(fe.store)
	return q
}

// waitQueued waits until n calls wait in the queue.
func (fe *faultEnv) waitQueued(t *testing.T, n int) {
	t.Helper()
	waitValue(t, "calls queued", n, fe.queued)
}

// programCalls is how many FCALL commands Redis has run since its
// statistics were last reset: group runs that reached the program.
func (fe *faultEnv) programCalls() int64 {
	fe.t.Helper()
	info, _ := fe.do("INFO", "commandstats").(string)
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_fcall:calls=")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(strings.SplitN(rest, ",", 2)[0], 10, 64)
		if err != nil {
			fe.t.Fatalf("INFO commandstats: %q: %v", line, err)
		}
		return n
	}
	return 0
}

// warmUp makes two concurrent calls while Redis is stopped, then lets it
// answer: the second finds the first waiting, which starts rueidis's
// pipelined reader and writer on the connection. From then on a call that
// reaches its deadline is abandoned without closing the connection (a lone
// call on an idle connection is written and read in place instead, and its
// timeout closes the connection), so that programs stalled by a stop stay
// on the one connection, ahead of later calls.
func (fe *faultEnv) warmUp(t *testing.T, p *limiter.Policy) {
	t.Helper()
	base := fe.runs()
	fe.srv.Pause()
	var fc faultCalls
	calls := fc.start(fe.store, "warm-up", 2, 20*time.Second, p, subjectOf("warm-up"), subjectOf("warm-up 2"))
	fe.waitRuns(t, base+2)
	fe.srv.Resume()
	fc.wait(t, "warm-up")
	checkFailed(t, calls, "warm-up", func(o limiter.Outcome) bool { return o.Kind == limiter.Evaluated })
}

// faultCall is one Evaluate call of a fault test, made in its own goroutine.
type faultCall struct {
	name     string
	deadline time.Duration
	cancel   context.CancelFunc
	batch    []limiter.Request
	want     []limiter.Request // batch as made (batch may be reused)
	out      []limiter.Outcome
	took     time.Duration
}

// faultCalls is a set of calls made concurrently.
type faultCalls struct {
	calls []*faultCall
	wg    sync.WaitGroup
	// reuse: each call's goroutine overwrites its batch once Evaluate has
	// returned, as a caller that pools its batches does.
	reuse bool
}

// start makes n calls on s, each with its own deadline d from now: one
// request of cost 1 on sub, and for every other call a second one of cost 2
// on sub2 (so that a run carries calls of different sizes).
func (fc *faultCalls) start(s *Store, name string, n int, d time.Duration, p *limiter.Policy, sub, sub2 limiter.SubjectDigest) []*faultCall {
	var started []*faultCall
	for i := range n {
		c := &faultCall{name: fmt.Sprintf("%s %d", name, i), deadline: d}
		c.batch = []limiter.Request{{Policy: p, Subject: sub, Cost: 1}}
		if i%2 == 1 {
			c.batch = append(c.batch, limiter.Request{Policy: p, Subject: sub2, Cost: 2})
		}
		want := append([]limiter.Request(nil), c.batch...)
		c.out = make([]limiter.Outcome, len(c.batch))
		ctx, cancel := context.WithTimeout(context.Background(), d)
		c.cancel = cancel
		fc.calls = append(fc.calls, c)
		started = append(started, c)
		fc.wg.Add(1)
		c.want = want
		go func() {
			defer fc.wg.Done()
			defer cancel()
			begin := time.Now()
			s.Evaluate(ctx, c.batch, c.out)
			c.took = time.Since(begin)
			if fc.reuse {
				for j := range c.batch {
					c.batch[j] = limiter.Request{}
				}
			}
		}()
	}
	return started
}

// wait waits for every call to return, failing t after faultWait.
func (fc *faultCalls) wait(t *testing.T, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		fc.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(faultWait):
		t.Fatalf("%s: calls still running after %v", what, faultWait)
	}
}

// committed is how many times sub and sub2 were counted by calls that
// report their requests consumed.
func committedCounts(calls []*faultCall, sub, sub2 limiter.SubjectDigest) (int64, int64) {
	var n, n2 int64
	for _, c := range calls {
		for j, o := range c.out {
			if o.Kind == limiter.Evaluated && o.Decision.Allowed && o.Decision.Consumed {
				if c.want[j].Subject == sub {
					n += c.want[j].Cost
				} else if c.want[j].Subject == sub2 {
					n2 += c.want[j].Cost
				}
			}
		}
	}
	return n, n2
}

// checkFailed checks that every request of calls failed with the outcome
// want accepts and that each call returned by its deadline (plus
// faultLate).
func checkFailed(t *testing.T, calls []*faultCall, what string, want func(o limiter.Outcome) bool) {
	t.Helper()
	for _, c := range calls {
		if c.took > c.deadline+faultLate {
			t.Errorf("%s (%s): returned after %v, deadline %v", c.name, what, c.took, c.deadline)
		}
		for j, o := range c.out {
			if !want(o) {
				t.Errorf("%s (%s), request %d: %v/%s %+v (%v)", c.name, what, j, o.Kind, o.Category, o.Decision, o.Err)
			}
		}
	}
}

func indeterminate(o limiter.Outcome) bool { return o.Kind == limiter.Indeterminate && o.Err != nil }

// notSentDeadline: a call that left the queue at its deadline.
func notSentDeadline(o limiter.Outcome) bool {
	return o.Kind == limiter.Unavailable && o.Category == limiter.CategoryDeadline &&
		o.Err != nil && strings.Contains(o.Err.Error(), "not sent")
}

// checkCounts checks that sub's and sub2's counts in Redis are want and
// want2.
func (fe *faultEnv) checkCounts(p *limiter.Policy, sub, sub2 limiter.SubjectDigest, want, want2 int64) {
	fe.t.Helper()
	for _, k := range []struct {
		sub  limiter.SubjectDigest
		want int64
	}{{sub, want}, {sub2, want2}} {
		h := fe.hash(keyOf(p, k.sub))
		got, _ := strconv.ParseInt(h["b"], 10, 64)
		if got != k.want {
			fe.t.Errorf("count %d, want %d: the calls reported committed (hash %v)", got, k.want, h)
		}
	}
}

// TestGroupHangEachCallOwnOutcome: Redis stops (SIGSTOP) with two runs in
// flight (the slot's GroupInFlight) and 48 calls queued behind them. The
// calls whose deadline passes in the queue leave it, Unavailable with
// category deadline, never sent; those taken into the next run (one group
// of 16 when the first runs give up) are Indeterminate at their deadline,
// like the first two. None is an allow. After SIGCONT the stalled programs
// run past the deadlines they carry and commit nothing: the runs carried
// only the 18 calls taken (those that left were never sent), and the count
// is that of the one call made after the resume.
func TestGroupHangEachCallOwnOutcome(t *testing.T) {
	fe := newFaultEnv(t)
	p := fixed(t, "group-hang", 1_000_000, farWindow)
	sub, sub2 := subjectOf("group hang"), subjectOf("group hang 2")
	fe.warmUp(t, p)
	fe.do("CONFIG", "RESETSTAT")
	base, baseCalls := fe.runs(), fe.runCalls()

	defer fe.srv.Resume()
	var fc faultCalls
	// The slot's two runs in flight, stalled.
	heads := fe.stall(t, &fc, 2*time.Second, p, sub, sub2)
	// Calls that the first runs outlive: they still wait when the runs
	// give up, and become the next run.
	long := fc.start(fe.store, "long", 16, 4*time.Second, p, sub, sub2)
	fe.waitQueued(t, len(long))
	// Calls whose deadline passes while they wait.
	short := fc.start(fe.store, "short", 32, 700*time.Millisecond, p, sub, sub2)
	fc.wait(t, "while Redis is stopped")

	checkFailed(t, heads, "sent alone", indeterminate)
	checkFailed(t, long, "sent in a group", indeterminate)
	checkFailed(t, short, "left the queue", notSentDeadline)
	if n := fe.queued(); n != 0 {
		t.Errorf("%d calls still in the queue after every call returned", n)
	}
	if got := fe.runs() - base; got != DefaultGroupInFlight+1 {
		t.Errorf("%d runs sent, want %d: the two first calls alone, then the 16 that waited as one group", got, DefaultGroupInFlight+1)
	}
	if got := fe.runCalls() - baseCalls; got != uint64(len(heads)+len(long)) {
		t.Errorf("the runs carried %d calls, want %d: a call that left the queue was sent", got, len(heads)+len(long))
	}
	if runs, waited := fe.grouped(); runs < 1 || waited < uint64(len(long)) {
		t.Errorf("group metrics: %d runs of more than one call, %d calls waited: want at least 1 and %d", runs, waited, len(long))
	}
	fe.srv.Resume()

	// The store's one pipelined connection carries this call after the
	// stalled programs, so Redis has run them when it answers.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out := make([]limiter.Outcome, 2)
	fe.store.Evaluate(ctx, []limiter.Request{{Policy: p, Subject: sub, Cost: 1}, {Policy: p, Subject: sub2, Cost: 1}}, out)
	for j, o := range out {
		if o.Kind != limiter.Evaluated || !o.Decision.Allowed || !o.Decision.Consumed {
			t.Fatalf("request %d after the resume: %v %+v (%v)", j, o.Kind, o.Decision, o.Err)
		}
	}
	// The calls that left the queue were never sent, and nothing is
	// resent: Redis ran at most the three stalled programs and this call's
	// (fewer when a stalled one was lost with its connection).
	if n := fe.programCalls(); n > DefaultGroupInFlight+2 || n < 1 {
		t.Errorf("Redis ran %d programs, want 1 to %d: the two stalled runs, the stalled group, the call after the resume", n, DefaultGroupInFlight+2)
	}
	n, n2 := committedCounts(fc.calls, sub, sub2)
	if n != 0 || n2 != 0 {
		t.Errorf("calls made while Redis was stopped report %d and %d hits committed", n, n2)
	}
	fe.checkCounts(p, sub, sub2, n+1, n2+1)
}

// TestGroupCancelledLeavesQueue: calls whose context is cancelled while
// they wait behind runs stalled by a stopped Redis leave the queue at once,
// Unavailable (category deadline, context.Canceled), never sent. After
// SIGCONT the stalled runs and the calls that waited with them are
// evaluated; Redis ran exactly those runs, and the count is exactly what
// the evaluated calls report consumed.
func TestGroupCancelledLeavesQueue(t *testing.T) {
	fe := newFaultEnv(t)
	p := fixed(t, "group-cancel", 1_000_000, farWindow)
	sub, sub2 := subjectOf("group cancel"), subjectOf("group cancel 2")
	fe.mustDecide(p, subjectOf("warm-up"))
	fe.do("CONFIG", "RESETSTAT")
	base, baseCalls := fe.runs(), fe.runCalls()

	defer fe.srv.Resume()
	var fc faultCalls
	heads := fe.stall(t, &fc, 20*time.Second, p, sub, sub2)
	var gone faultCalls
	cancelled := gone.start(fe.store, "cancelled", 32, 20*time.Second, p, sub, sub2)
	fe.waitQueued(t, len(cancelled))
	for _, c := range cancelled {
		c.cancel()
	}
	gone.wait(t, "cancelled calls")
	checkFailed(t, cancelled, "cancelled in the queue", func(o limiter.Outcome) bool {
		return notSentDeadline(o) && errors.Is(o.Err, context.Canceled)
	})
	if n := fe.queued(); n != 0 {
		t.Fatalf("%d calls still in the queue after every cancelled call returned", n)
	}
	waiting := fc.start(fe.store, "waiting", 8, 20*time.Second, p, sub, sub2)
	fe.waitQueued(t, len(waiting))
	fe.srv.Resume()
	fc.wait(t, "after the resume")

	evaluated := func(o limiter.Outcome) bool {
		return o.Kind == limiter.Evaluated && o.Decision.Allowed && o.Decision.Consumed
	}
	checkFailed(t, heads, "sent alone", evaluated)
	checkFailed(t, waiting, "sent in a group", evaluated)
	if got := fe.runs() - base; got != DefaultGroupInFlight+1 {
		t.Errorf("%d runs sent, want %d: the first calls alone, then the 8 that waited as one group", got, DefaultGroupInFlight+1)
	}
	if got := fe.runCalls() - baseCalls; got != uint64(len(heads)+len(waiting)) {
		t.Errorf("the runs carried %d calls, want %d: a cancelled call was sent", got, len(heads)+len(waiting))
	}
	if n := fe.programCalls(); n != DefaultGroupInFlight+1 {
		t.Errorf("Redis ran %d programs, want %d", n, DefaultGroupInFlight+1)
	}
	if runs, waited := fe.grouped(); runs < 1 || waited < uint64(len(waiting)) {
		t.Errorf("group metrics: %d runs of more than one call, %d calls waited: want at least 1 and %d", runs, waited, len(waiting))
	}
	n, n2 := committedCounts(fc.calls, sub, sub2)
	if n != int64(len(heads)+len(waiting)) {
		t.Errorf("%d hits reported committed on the first subject, want %d", n, len(heads)+len(waiting))
	}
	fe.checkCounts(p, sub, sub2, n, n2)
}

// TestGroupKilledThenRestarted: Redis is killed (SIGKILL) with two runs in
// flight and 30 calls queued behind them. Every call returns well before
// its deadline with its own failure: the sent runs Indeterminate, the
// queued ones Indeterminate or Unavailable; none is an allow. Redis is
// restarted on the same port: the store reconnects and evaluates again, and
// the new server's count is exactly what 32 concurrent calls report
// consumed.
func TestGroupKilledThenRestarted(t *testing.T) {
	fe := newFaultEnv(t)
	p := fixed(t, "group-kill", 1_000_000, farWindow)
	sub, sub2 := subjectOf("group kill"), subjectOf("group kill 2")
	fe.mustDecide(p, subjectOf("warm-up"))

	// Stopped first, so that the runs are certainly in flight (sent, not
	// answered) and the queue full when the process dies; then killed
	// without being continued, so that it answers nothing.
	var fc faultCalls
	heads := fe.stall(t, &fc, 10*time.Second, p, sub, sub2)
	queued := fc.start(fe.store, "queued", 30, 10*time.Second, p, sub, sub2)
	fe.waitQueued(t, len(queued))
	pid := fe.srv.PID()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL %d: %v", pid, err)
	}
	fe.srv.Kill() // waits for the process to be gone
	fc.wait(t, "after the kill")

	checkFailed(t, heads, "sent alone", indeterminate)
	checkFailed(t, queued, "queued", func(o limiter.Outcome) bool {
		return o.Err != nil && (o.Kind == limiter.Indeterminate || o.Kind == limiter.Unavailable)
	})
	// "Well before": the deadline is 10 s, the failures come from the
	// closed connection, not from the deadline.
	for _, c := range fc.calls {
		if c.took > c.deadline/2 {
			t.Errorf("%s: returned after %v: it waited for its deadline, not for the lost connection", c.name, c.took)
		}
	}
	if n, n2 := committedCounts(fc.calls, sub, sub2); n != 0 || n2 != 0 {
		t.Errorf("calls made while Redis died report %d and %d hits committed", n, n2)
	}

	fe.srv.Restart()
	// A new connection for inspecting the new server.
	conn, err := redistest.Dial(fe.srv.Addr(), nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fe.conn = conn
	probe := subjectOf("group kill probe")
	polltest.Eventually(t, faultWait, 10*time.Millisecond, "the store evaluates after the restart", func() error {
		if o := fe.evaluate(p, probe, 1); o.Kind != limiter.Evaluated {
			return fmt.Errorf("%v/%s: %v", o.Kind, o.Category, o.Err)
		}
		return nil
	})
	// Concurrent calls are evaluated again, each counted once. (A call
	// just after the restart may still meet a connection rueidis has not
	// yet replaced, which answers EOF: Indeterminate. Each attempt uses
	// subjects of its own, so that such a call leaves no doubt about the
	// count of the attempt that passes.)
	attempt := 0
	polltest.Eventually(t, faultWait, 10*time.Millisecond, "32 concurrent calls evaluated after the restart", func() error {
		attempt++
		a, a2 := subjectOf(fmt.Sprint("group kill after ", attempt)), subjectOf(fmt.Sprint("group kill after 2 ", attempt))
		var after faultCalls
		burst := after.start(fe.store, "after the restart", 32, 10*time.Second, p, a, a2)
		after.wait(t, "after the restart")
		for _, c := range burst {
			for j, o := range c.out {
				if o.Kind != limiter.Evaluated || !o.Decision.Allowed || !o.Decision.Consumed {
					return fmt.Errorf("attempt %d: %s, request %d: %v (%v)", attempt, c.name, j, o.Kind, o.Err)
				}
			}
		}
		n, n2 := committedCounts(after.calls, a, a2)
		if n != int64(len(burst)) || n2 != int64(len(burst)) {
			t.Fatalf("%d and %d hits reported committed, want %d each", n, n2, len(burst))
		}
		fe.checkCounts(p, a, a2, n, n2)
		return nil
	})
	t.Logf("concurrent calls all evaluated at attempt %d after the restart", attempt)
}

// TestGroupLateCallReusesBatch: calls taken into a group run whose
// deadline passes before the run ends return Indeterminate at once, and
// their callers reuse their batches (here: zero them) while the run still
// waits for Redis. The run, failing later at the deadline of the last of
// its calls, reads none of those batches (it answered with a nil policy, a
// crash, when it did): every call is Indeterminate, and nothing is counted
// after SIGCONT. Run with -race it also shows that no run reads a batch its
// caller has taken back.
func TestGroupLateCallReusesBatch(t *testing.T) {
	fe := newFaultEnv(t)
	p := fixed(t, "group-reuse", 1_000_000, farWindow)
	sub, sub2 := subjectOf("group reuse"), subjectOf("group reuse 2")
	fe.warmUp(t, p)
	base, baseCalls := fe.runs(), fe.runCalls()

	defer fe.srv.Resume()
	fc := faultCalls{reuse: true}
	heads := fe.stall(t, &fc, time.Second, p, sub, sub2)
	// Both sets wait behind the first runs and are taken together when
	// those give up; the early ones give up long before the group's run.
	early := fc.start(fe.store, "early", 8, 1500*time.Millisecond, p, sub, sub2)
	late := fc.start(fe.store, "late", 8, 3*time.Second, p, sub, sub2)
	fe.waitQueued(t, len(early)+len(late))
	fc.wait(t, "while Redis is stopped")

	checkFailed(t, heads, "sent alone", indeterminate)
	checkFailed(t, early, "left its group's run", indeterminate)
	checkFailed(t, late, "sent in a group", indeterminate)
	if got := fe.runs() - base; got != DefaultGroupInFlight+1 {
		t.Errorf("%d runs sent, want %d", got, DefaultGroupInFlight+1)
	}
	if got := fe.runCalls() - baseCalls; got != uint64(len(heads)+len(early)+len(late)) {
		t.Errorf("the runs carried %d calls, want %d", got, len(heads)+len(early)+len(late))
	}
	fe.srv.Resume()
	// The store may first have to replace a connection that timed out
	// while Redis was stopped: wait until it answers a probe subject.
	probe := subjectOf(t.Name() + " probe")
	deadline := time.Now().Add(15 * time.Second)
	for o := fe.evaluate(p, probe, 1); o.Kind != limiter.Evaluated; o = fe.evaluate(p, probe, 1) {
		if time.Now().After(deadline) {
			t.Fatalf("the store does not answer after the resume: %v (%v)", o.Kind, o.Err)
		}
	}
	if o := fe.evaluate(p, sub, 1); o.Kind != limiter.Evaluated || !o.Decision.Consumed {
		t.Fatalf("after the resume: %v (%v)", o.Kind, o.Err)
	}
	fe.checkCounts(p, sub, sub2, 1, 0)
}
