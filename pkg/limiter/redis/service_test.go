package redis

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/internal/polltest"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// farWindow is an epoch-aligned window whose next boundary is years away, so
// that an exactness test never straddles two windows.
const farWindow = 3650 * 24 * time.Hour

func TestEvaluateBatchInOrder(t *testing.T) {
	e := newEnv(t)
	fw := fixed(t, "batch.fw", 2, farWindow)
	tb := bucket(t, "batch.tb", 1, 1, time.Hour)
	sw := sliding(t, "batch.sw", 3, time.Hour)
	sub := subjectOf("batch")
	batch := []limiter.Request{
		{Policy: fw, Subject: sub, Cost: 1},
		{Policy: tb, Subject: sub, Cost: 1},
		{Policy: sw, Subject: sub, Cost: 3},
		{Policy: fw, Subject: sub, Cost: 5}, // above max cost: invalid, never sent
		{Policy: nil, Subject: sub, Cost: 1},
	}
	out := make([]limiter.Outcome, len(batch))
	e.store.Evaluate(context.Background(), batch, out)
	// The invalid requests are failures of fail-closed limits: the batch
	// does not commit, and the valid ones are reported before their cost.
	want := []struct {
		kind      limiter.OutcomeKind
		allowed   bool
		remaining int64
		certainty limiter.Certainty
	}{
		{limiter.Evaluated, true, 2, limiter.Certain},
		{limiter.Evaluated, true, 1, limiter.Certain},
		{limiter.Evaluated, true, 3, limiter.Approximate},
		{limiter.Unavailable, false, 0, 0},
		{limiter.Unavailable, false, 0, 0},
	}
	for i, w := range want {
		o := out[i]
		if o.Kind != w.kind || o.Decision.Allowed != w.allowed || o.Decision.Remaining != w.remaining || o.Decision.Certainty != w.certainty || o.Decision.Consumed {
			t.Errorf("request %d: %+v, want %+v", i, o, w)
		}
		if o.Kind == limiter.Evaluated && (o.Decision.Source != limiter.SourceRedis || o.Decision.PolicyID != batch[i].Policy.ID()) {
			t.Errorf("request %d: decision %+v", i, o.Decision)
		}
		if o.Kind == limiter.Unavailable && o.Category != limiter.CategoryInvalidRequest {
			t.Errorf("request %d: category %s, want invalid_request", i, o.Category)
		}
	}
	// The valid ones alone commit.
	e.store.Evaluate(context.Background(), batch[:3], out[:3])
	for i, rem := range []int64{1, 0, 0} {
		if d := out[i].Decision; !d.Allowed || !d.Consumed || d.Remaining != rem {
			t.Errorf("committed request %d: %+v, want remaining %d", i, d, rem)
		}
	}
	// An empty batch is a no-op; a short out panics.
	e.store.Evaluate(context.Background(), nil, nil)
	func() {
		defer func() {
			if recover() == nil {
				t.Error("Evaluate with a short out did not panic")
			}
		}()
		e.store.Evaluate(context.Background(), batch, out[:1])
	}()
}

func TestDeadlines(t *testing.T) {
	e := newEnv(t, redistest.Local())
	p := fixed(t, "deadline", 10, farWindow)
	sub := subjectOf("deadline")

	// Already done: not sent, nothing written.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	out := make([]limiter.Outcome, 2)
	e.store.Evaluate(ctx, []limiter.Request{{Policy: p, Subject: sub, Cost: 1}, {Policy: p, Subject: sub, Cost: 1}}, out)
	for i, o := range out {
		if o.Kind != limiter.Unavailable || o.Category != limiter.CategoryDeadline {
			t.Errorf("request %d with a done context: %v/%s", i, o.Kind, o.Category)
		}
	}
	if e.do("EXISTS", keyOf(p, sub)) != int64(0) {
		t.Fatal("a request with a done context reached Redis")
	}

	// A paused server: the call returns by the deadline, Indeterminate.
	e.mustDecide(p, sub)
	e.srv.Pause()
	defer e.srv.Resume()
	for _, d := range []time.Duration{50 * time.Millisecond, 150 * time.Millisecond} {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		start := time.Now()
		out := make([]limiter.Outcome, 3)
		e.store.Evaluate(ctx, []limiter.Request{{Policy: p, Subject: sub, Cost: 1}, {Policy: p, Subject: subjectOf("x"), Cost: 1}, {Policy: p, Subject: sub, Cost: 2}}, out)
		took := time.Since(start)
		cancel()
		if took > d+100*time.Millisecond { // scheduling slack on a loaded 2-core machine
			t.Errorf("deadline %v: Evaluate took %v", d, took)
		}
		for i, o := range out {
			if o.Kind != limiter.Indeterminate {
				t.Errorf("deadline %v, request %d on a paused server: %v (%v), want indeterminate", d, i, o.Kind, o.Err)
			}
		}
	}
	e.srv.Resume()
	polltest.Eventually(t, 10*time.Second, 20*time.Millisecond, "decisions after resume", func() error {
		if o := e.evaluate(p, sub, 1); o.Kind != limiter.Evaluated {
			return fmt.Errorf("%v: %v", o.Kind, o.Err)
		}
		return nil
	})

	// The store's own Timeout bounds a call without a deadline.
	s2 := newStore(t, Config{Addrs: []string{e.srv.Addr()}, Timeout: 100 * time.Millisecond})
	e.srv.Pause()
	start := time.Now()
	out = make([]limiter.Outcome, 1)
	s2.Evaluate(context.Background(), []limiter.Request{{Policy: p, Subject: sub, Cost: 1}}, out)
	if took := time.Since(start); took > 300*time.Millisecond {
		t.Errorf("Timeout 100ms: Evaluate took %v", took)
	}
	if out[0].Kind != limiter.Indeterminate {
		t.Errorf("Timeout on a paused server: %v, want indeterminate", out[0].Kind)
	}
	e.srv.Resume()

	// After Close: Unavailable, not sent.
	s2.Close()
	s2.Evaluate(context.Background(), []limiter.Request{{Policy: p, Subject: subjectOf("closed"), Cost: 1}}, out)
	if out[0].Kind != limiter.Unavailable {
		t.Errorf("after Close: %v", out[0].Kind)
	}
}

func TestRedisKilledDuringLoad(t *testing.T) {
	e := newEnvWith(t, Config{Timeout: 200 * time.Millisecond}, redistest.Local())
	srv, s := e.srv, e.store
	p := fixed(t, "kill", 1_000_000, farWindow)
	var counts [5]atomic.Int64 // by OutcomeKind
	var slowest atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			sub := subjectOf(fmt.Sprintf("kill-%d", g))
			out := make([]limiter.Outcome, 2)
			for i := 0; i < 1_000_000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
				start := time.Now()
				s.Evaluate(ctx, []limiter.Request{{Policy: p, Subject: sub, Cost: 1}, {Policy: p, Subject: sub, Cost: 1}}, out)
				took := time.Since(start)
				cancel()
				for took.Microseconds() > slowest.Load() {
					if slowest.CompareAndSwap(slowest.Load(), took.Microseconds()) {
						break
					}
				}
				for _, o := range out {
					counts[o.Kind].Add(1)
					if o.Kind == limiter.Incompatible {
						t.Errorf("incompatible outcome under faults: %v", o.Err)
					}
					if o.Kind == limiter.Evaluated && !o.Decision.Allowed {
						t.Errorf("denied far below the limit: %+v", o.Decision)
					}
				}
				if counts[limiter.Evaluated].Load() == 0 {
					// Pacing, not synchronisation: failing calls return
					// at once; keep them from spinning the CPU.
					time.Sleep(time.Millisecond)
				}
			}
		}(g)
	}
	waitKinds := func(kind limiter.OutcomeKind, what string) {
		t.Helper()
		base := counts[kind].Load()
		polltest.Eventually(t, 15*time.Second, 10*time.Millisecond, what, func() error {
			if counts[kind].Load() <= base+10 {
				return errors.New("not yet")
			}
			return nil
		})
	}
	waitKinds(limiter.Evaluated, "decisions before the kill")
	srv.Kill()
	failedBefore := counts[limiter.Unavailable].Load() + counts[limiter.Indeterminate].Load()
	polltest.Eventually(t, 15*time.Second, 10*time.Millisecond, "failures while down", func() error {
		if counts[limiter.Unavailable].Load()+counts[limiter.Indeterminate].Load() <= failedBefore+10 {
			return errors.New("not yet")
		}
		return nil
	})
	srv.Restart()
	waitKinds(limiter.Evaluated, "decisions after the restart")
	close(stop)
	wg.Wait()
	t.Logf("outcomes: evaluated %d, unavailable %d, indeterminate %d; slowest call %dµs",
		counts[limiter.Evaluated].Load(), counts[limiter.Unavailable].Load(), counts[limiter.Indeterminate].Load(), slowest.Load())
	if counts[limiter.Unavailable].Load() == 0 {
		t.Error("no Unavailable outcome while Redis was down (refused connections are known not-sent)")
	}
	if us := slowest.Load(); us > (300*time.Millisecond + 150*time.Millisecond).Microseconds() {
		t.Errorf("a call took %dµs, past its 300ms deadline", us)
	}
}

// TestExactAcrossStores: three stores (three service replicas) with 32
// goroutines each on one subject admit exactly the limit.
func TestExactAcrossStores(t *testing.T) {
	srv := redistest.Standalone(t)
	const stores, goroutines, limit, perG = 3, 32, 100, 3
	policies := []*limiter.Policy{
		fixed(t, "exact.fw", limit, farWindow),
		bucket(t, "exact.tb", limit, 1, 24*time.Hour), // one token a day: no refill during the test
	}
	ss := make([]*Store, stores)
	for i := range ss {
		ss[i] = newStore(t, Config{Addrs: []string{srv.Addr()}, Timeout: 5 * time.Second})
	}
	for _, p := range policies {
		sub := subjectOf(fmt.Sprintf("exact-%s-%d", p.ID(), time.Now().UnixNano()))
		var allowed, denied atomic.Int64
		var wg sync.WaitGroup
		for _, s := range ss {
			for g := 0; g < goroutines; g++ {
				wg.Add(1)
				go func(s *Store) {
					defer wg.Done()
					out := make([]limiter.Outcome, 1)
					for i := 0; i < perG; i++ {
						s.Evaluate(context.Background(), []limiter.Request{{Policy: p, Subject: sub, Cost: 1}}, out)
						switch {
						case out[0].Kind != limiter.Evaluated:
							t.Errorf("%s: %v: %v", p.ID(), out[0].Kind, out[0].Err)
						case out[0].Decision.Allowed:
							allowed.Add(1)
						default:
							denied.Add(1)
						}
					}
				}(s)
			}
		}
		wg.Wait()
		if allowed.Load() != limit || denied.Load() != stores*goroutines*perG-limit {
			t.Errorf("%s: %d allowed, %d denied; want exactly %d allowed of %d", p.ID(), allowed.Load(), denied.Load(), limit, stores*goroutines*perG)
		}
	}
	assertPrivateKeys(t, srv.Addr(), []string{"exact-"})
}

// TestExactBatchAcrossStores: three stores x 32 goroutines, every request
// with a tight and a loose limit: exactly the tight limit is admitted and the
// loose limit consumed exactly once per admitted request (no request
// consumed on one limit but not the other).
func TestExactBatchAcrossStores(t *testing.T) {
	srv := redistest.Standalone(t)
	stores := make([]limiter.Store, 3)
	for i := range stores {
		stores[i] = newStore(t, Config{Addrs: []string{srv.Addr()}, Timeout: 5 * time.Second})
	}
	limitertest.Exactness(t, stores, limitertest.Config{Prefix: limitertest.Prefix()}, 32, 3, 100)
}

// docACL returns the ACL SETUSER lines of docs/redis.md's "Least
// privilege" section, split into arguments, PASSWORD replaced by password.
func docACL(t *testing.T, password string) [][]string {
	t.Helper()
	lines, err := redistest.DocACL("../../../docs/redis.md", password)
	if err != nil {
		t.Fatal(err)
	}
	return lines
}

// TestACLUser: the store works as the user docs/redis.md documents, and
// Redis denies it nothing (its ACL LOG stays empty): decisions, a subject
// and a policy reset, demands exchanged.
func TestACLUser(t *testing.T) {
	e := newEnv(t, redistest.Local())
	acl := docACL(t, "s3cret-pw")
	e.do(acl[0]...)
	s := newStore(t, Config{Addrs: []string{e.srv.Addr()}, Username: "envoy-rls", Password: "s3cret-pw"})
	// Without the optional line, loading the Redis function is denied
	// (the store runs its program by EVALSHA): the log starts after it.
	e.do("ACL", "LOG", "RESET")
	if err := s.Ping(context.Background()); err != nil {
		t.Fatalf("Ping as the ACL user: %v", err)
	}
	p := bucket(t, "acl", 2, 1, time.Hour)
	out := make([]limiter.Outcome, 3)
	sub := subjectOf("acl")
	s.Evaluate(context.Background(), []limiter.Request{{Policy: p, Subject: sub, Cost: 1}, {Policy: p, Subject: sub, Cost: 1}, {Policy: p, Subject: sub, Cost: 1}}, out)
	allowed := 0
	for _, o := range out {
		if o.Kind != limiter.Evaluated {
			t.Fatalf("as the ACL user: %v: %v", o.Kind, o.Err)
		}
		if o.Decision.Allowed {
			allowed++
		}
	}
	if allowed != 2 {
		t.Fatalf("%d allowed, want 2", allowed)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// A batch commits all or nothing: the one above, with a denial, wrote
	// nothing.
	s.Evaluate(ctx, []limiter.Request{{Policy: p, Subject: sub, Cost: 1}}, out[:1])
	if n, err := s.Reset(ctx, []limiter.Request{{Policy: p, Subject: sub}}); n != 1 || err != nil {
		t.Fatalf("Reset as the ACL user: %d, %v", n, err)
	}
	s.Evaluate(ctx, []limiter.Request{{Policy: p, Subject: sub, Cost: 1}}, out[:1])
	if res, err := s.ResetPolicy(ctx, p.ID(), p.Revision(), limiter.ResetBounds{MaxScanned: 100}); err != nil || res.Deleted != 1 || !res.Complete {
		t.Fatalf("ResetPolicy as the ACL user: %+v, %v", res, err)
	}
	agg := []DemandSwap{{Policy: p, Subject: sub}}
	mustSwap(t, s, "A", time.Second, agg, []int64{1})
	e.do("HSET", string(DemandKey(nil, p, sub, limiter.Tag{})), "B", "expired")
	wantOthers(t, "demands as the ACL user", mustSwap(t, s, "A", time.Second, agg, []int64{1}), nil)
	if l := e.do("ACL", "LOG").([]any); len(l) != 0 {
		t.Fatalf("ACL LOG: %v, want no denial", l)
	}
	// Without the script commands: refused by Redis, known not run.
	e.do("ACL", "SETUSER", "envoy-rls", "-evalsha", "-eval", "-fcall")
	s.Evaluate(context.Background(), []limiter.Request{{Policy: p, Subject: sub, Cost: 1}}, out[:1])
	if out[0].Kind != limiter.Unavailable || !strings.Contains(out[0].Err.Error(), "NOPERM") {
		t.Fatalf("without EVALSHA: %v (%v), want unavailable NOPERM", out[0].Kind, out[0].Err)
	}
	// A wrong password fails New.
	wrong := Config{Addrs: []string{e.srv.Addr()}, Username: "envoy-rls", Password: "wrong"}
	if err := newFails(t, wrong, "New with a wrong password succeeded"); strings.Contains(err.Error(), "wrong") && strings.Contains(err.Error(), "Password") {
		t.Fatalf("error leaks the password: %v", err)
	}
}

func TestTLS(t *testing.T) {
	redistest.RequireTLS(t)
	files := redistest.GenerateTLS(t)
	srv := redistest.Standalone(t, redistest.WithTLS(files, files.ClientConfig(t)))
	s := newStore(t, Config{Addrs: []string{srv.Addr()}, Mode: ModeStandalone, TLS: files.ClientConfig(t)})
	p := fixed(t, "tls", 1, farWindow)
	out := make([]limiter.Outcome, 2)
	sub := subjectOf("tls")
	s.Evaluate(context.Background(), []limiter.Request{{Policy: p, Subject: sub, Cost: 1}, {Policy: p, Subject: sub, Cost: 1}}, out)
	if out[0].Kind != limiter.Evaluated || out[1].Kind != limiter.Evaluated || out[0].Decision.Allowed == out[1].Decision.Allowed {
		t.Fatalf("over TLS: %+v", out)
	}
	// Without the CA the server certificate is not trusted: New fails.
	noCA := Config{Addrs: []string{srv.Addr()}, Mode: ModeStandalone, TLS: &tls.Config{MinVersion: tls.VersionTLS12}, DialTimeout: time.Second}
	newFails(t, noCA, "New trusted an unknown CA")
}

func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster topology: skipped with -short")
	}
	t.Parallel()
	c := redistest.StartCluster(t)
	s := newStore(t, Config{Addrs: c.Addrs(), Mode: ModeCluster, Timeout: 300 * time.Millisecond, DialTimeout: 300 * time.Millisecond})
	p := fixed(t, "cluster", 1_000_000, farWindow)
	// Many subjects spread over every master's slots.
	batch := make([]limiter.Request, 64)
	for i := range batch {
		batch[i] = limiter.Request{Policy: p, Subject: subjectOf(fmt.Sprintf("cluster-%d", i)), Cost: 1}
	}
	out := make([]limiter.Outcome, len(batch))
	s.Evaluate(context.Background(), batch, out)
	for i, o := range out {
		if o.Kind != limiter.Evaluated || !o.Decision.Allowed {
			t.Fatalf("request %d: %v: %v", i, o.Kind, o.Err)
		}
	}
	sub := subjectOf("cluster-0")
	master := c.MasterFor(keyOf(p, sub))
	master.Kill()
	awaitFailover(t, s, p, sub, 30*time.Second, "cluster failover")
	s.Evaluate(context.Background(), batch, out)
	for i, o := range out {
		if o.Kind != limiter.Evaluated {
			t.Fatalf("after failover, request %d: %v: %v", i, o.Kind, o.Err)
		}
	}
	// Wrong mode: a cluster seed given as standalone still works (one node
	// answers MOVED for most keys, which rueidis's single client does not
	// follow), so only the reverse is refused.
	single := redistest.Standalone(t, redistest.Local())
	newFails(t, Config{Addrs: []string{single.Addr()}, Mode: ModeCluster}, "cluster mode against a standalone server succeeded")
}

func TestSentinelFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("sentinel topology: skipped with -short")
	}
	t.Parallel()
	set := redistest.StartSentinel(t)
	s := newStore(t, Config{Addrs: set.SentinelAddrs(), Mode: ModeSentinel, SentinelMaster: redistest.SentinelMasterName,
		Timeout: 300 * time.Millisecond, DialTimeout: 300 * time.Millisecond})
	p := fixed(t, "sentinel", 1_000_000, farWindow)
	sub := subjectOf("sentinel")
	if o := evaluateOne(s, p, sub, time.Second); o.Kind != limiter.Evaluated {
		t.Fatalf("before failover: %v: %v", o.Kind, o.Err)
	}
	set.Master.Kill()
	awaitFailover(t, s, p, sub, 45*time.Second, "sentinel failover")
	// The promoted replica serves as master; the other sentinels learn of
	// the new configuration within a few hello periods.
	if v := set.Replica.MustDo("ROLE").([]any); v[0] != "master" {
		t.Fatalf("decisions resumed but the replica's ROLE is %v", v[0])
	}
	polltest.Eventually(t, 15*time.Second, 100*time.Millisecond, "sentinels agree on the new master", func() error {
		if addr, err := set.MasterAddr(); err != nil || addr != set.Replica.Addr() {
			return fmt.Errorf("sentinels report master %q (%v), want the promoted replica %s", addr, err, set.Replica.Addr())
		}
		return nil
	})
}

func evaluateOne(s *Store, p *limiter.Policy, sub limiter.SubjectDigest, d time.Duration) limiter.Outcome {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	out := make([]limiter.Outcome, 1)
	s.Evaluate(ctx, []limiter.Request{{Policy: p, Subject: sub, Cost: 1}}, out)
	return out[0]
}

// awaitFailover evaluates sub until the store decides again after a master
// was killed (within timeout), failing at once on an Incompatible outcome
// (a failover must never look like foreign state), and logs how long it
// took and the outcomes seen on the way.
func awaitFailover(t *testing.T, s *Store, p *limiter.Policy, sub limiter.SubjectDigest, timeout time.Duration, what string) {
	t.Helper()
	start := time.Now()
	var kinds [5]int
	polltest.Eventually(t, timeout, 50*time.Millisecond, "decisions after the "+what, func() error {
		o := evaluateOne(s, p, sub, 200*time.Millisecond)
		kinds[o.Kind]++
		if o.Kind == limiter.Incompatible {
			t.Fatalf("incompatible during %s: %v", what, o.Err)
		}
		if o.Kind != limiter.Evaluated {
			return fmt.Errorf("%v: %v", o.Kind, o.Err)
		}
		return nil
	})
	t.Logf("%s: decisions resumed after %v (outcomes by kind %v)", what, time.Since(start).Round(time.Millisecond), kinds)
}
