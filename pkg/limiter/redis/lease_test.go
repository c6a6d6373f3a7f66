package redis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/internal/polltest"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/algorithm"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/leases"
	"github.com/envoy-rls/envoy-rls/pkg/lua"
)

// TestLeases runs a crashed holder on a short TTL, and three stores (three
// replicas) on one Redis: never more than the limit in flight. TestSuite
// runs the lease scripts (the memory store runs the same).
func TestLeases(t *testing.T) {
	e := newEnv(t)
	t.Run("crashed holder", func(t *testing.T) {
		p := limitertest.LeasePolicy(t, limitertest.Prefix()+".crash", 1, 300*time.Millisecond)
		now := func() time.Time { return time.UnixMilli(e.serverNow()) }
		limitertest.LeaseExpiry(t, e.store, p, limitertest.Subject("crash"), now, time.Sleep)
	})
	t.Run("in flight across replicas", func(t *testing.T) {
		stores := []limiter.Store{e.store, newStore(t, Config{Addrs: []string{e.srv.Addr()}}), newStore(t, Config{Addrs: []string{e.srv.Addr()}})}
		p := limitertest.LeasePolicy(t, limitertest.Prefix()+".inflight", 3, time.Hour)
		limitertest.LeaseExactness(t, stores, p, limitertest.Subject("inflight"), 4, 150)
	})
}

// TestLeaseDifferential runs random lease operations through lease-v2.lua
// and, from the set Redis held before each and at the TIME the program
// read, through algorithm.Lease: the same reply, field by field, and the
// same set after. Short TTLs make leases expire during the run; half the
// releases and returns name the leases of an earlier take (some expired
// by then), as a release marker does.
func TestLeaseDifferential(t *testing.T) {
	e := newEnv(t)
	rng := rand.New(rand.NewPCG(30, 4))
	for round := range 4 {
		ttl := []time.Duration{2 * time.Millisecond, 5 * time.Millisecond, time.Hour, time.Second}[round]
		limit := int64(1 + rng.IntN(6))
		p := limitertest.LeasePolicy(t, limitertest.Prefix()+".diff", limit, ttl)
		r := limiter.Request{Policy: p, Subject: limitertest.Subject("diff"), Cost: 1}
		key := string(requestKey(nil, &r))
		var taken []int64
		for i := range 300 {
			r.Lease = limiter.LeaseOp(rng.IntN(3))
			r.Cost = 1 + rng.Int64N(limit)
			r.Role = []limiter.Role{limiter.RoleOrdinary, limiter.RoleProbe, limiter.RoleCheck}[rng.IntN(3)]
			r.LeaseAt = 0
			if r.Lease != limiter.LeaseTake && len(taken) > 0 && rng.IntN(2) == 0 {
				r.LeaseAt = taken[rng.IntN(len(taken))]
			}
			before, _ := e.do("GET", key).(string)
			res := leaseScript.Exec(context.Background(), e.store.client, []string{key}, lua.LeaseArgs(&r, 0))
			msgs, err := res.ToArray()
			if err != nil {
				t.Fatal(err)
			}
			got, err := lua.ParseLeaseReply(p, replyValues(nil, msgs))
			if err != nil {
				t.Fatal(err)
			}
			next, want, _, write := algorithm.Lease(before, got.ServerNowMs, p, r.Lease, r.LeaseAt, r.Cost, r.EffectiveRole().Consumes())
			if got != want {
				t.Fatalf("round %d step %d (%s %d at %d, %s): Lua %+v, Go %+v", round, i, r.Lease, r.Cost, r.LeaseAt, r.Role, got, want)
			}
			if write && r.Lease == limiter.LeaseTake {
				taken = append(taken, got.ResetAtMs)
			}
			after, _ := e.do("GET", key).(string)
			if !write {
				next = before
			}
			if after != next {
				t.Fatalf("round %d step %d (%s %d): Redis holds %x, Go %x", round, i, r.Lease, r.Cost, after, next)
			}
		}
	}
}

// TestLeaseIncompatible: a key that does not hold a lease set is
// Incompatible, never an allow, and is left alone.
func TestLeaseIncompatible(t *testing.T) {
	e := newEnv(t)
	p := limitertest.LeasePolicy(t, limitertest.Prefix()+".bad", 2, time.Minute)
	r := limiter.Request{Policy: p, Subject: limitertest.Subject("bad"), Cost: 1}
	key := string(requestKey(nil, &r))
	for _, seed := range [][]string{{"SET", key, "not a lease set"}, {"HSET", key, "a", "1"}} {
		e.do("DEL", key)
		e.do(seed...)
		out := make([]limiter.Outcome, 1)
		e.store.Evaluate(context.Background(), []limiter.Request{r}, out)
		if out[0].Kind != limiter.Incompatible {
			t.Errorf("%v: %s %+v", seed, out[0].Kind, out[0].Decision)
		}
	}
	if got := e.do("HGET", key, "a"); got != "1" {
		t.Errorf("the key was changed: %v", got)
	}
}

// TestLeaseACLUser: takes, releases and returns work as the ACL user
// docs/redis.md documents (with the optional FCALL line), and Redis denies
// it nothing.
func TestLeaseACLUser(t *testing.T) {
	e := newEnv(t, redistest.Local())
	acl := docACL(t, "s3cret-pw")
	e.do(acl[0]...)
	e.do(docFcallLine(t, acl)...)
	e.do("ACL", "LOG", "RESET")
	rs := newStore(t, Config{Addrs: []string{e.srv.Addr()}, Username: "envoy-rls", Password: "s3cret-pw"})
	s := leases.New(rs, rs)
	p := limitertest.LeasePolicy(t, limitertest.Prefix()+".acl", 1, time.Minute)
	rate := fixed(t, limitertest.Prefix()+".acl-rate", 1, farWindow)
	sub := limitertest.Subject("acl")
	out := make([]limiter.Outcome, 2)
	for i, batch := range [][]limiter.Request{
		{{Policy: p, Subject: sub, Cost: 1}, {Policy: rate, Subject: sub, Cost: 1}},
		// The rate limit denies: the take is returned.
		{{Policy: p, Subject: sub, Cost: 1}, {Policy: rate, Subject: sub, Cost: 1}},
		{{Policy: p, Subject: sub, Cost: 1, Lease: limiter.LeaseRelease, Role: limiter.RoleCheck}},
	} {
		s.Evaluate(context.Background(), batch, out[:len(batch)])
		for _, o := range out[:len(batch)] {
			if o.Kind != limiter.Evaluated {
				t.Fatalf("batch %d as the ACL user: %s %v", i, o.Kind, o.Err)
			}
		}
	}
	if l := e.do("ACL", "LOG").([]any); len(l) != 0 {
		t.Fatalf("ACL LOG: %v, want no denial", l)
	}
}

// TestLeasesCluster: the lease scripts and three stores in flight on a
// local six-node Redis Cluster. A lease set is one key, so each operation
// is one atomic program on one slot; a call's lease and rate limits may
// sit in different slots.
func TestLeasesCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster topology: skipped with -short")
	}
	c := redistest.StartCluster(t)
	cfg := Config{Addrs: c.Addrs(), Mode: ModeCluster, Timeout: 5 * time.Second}
	s := newStore(t, cfg)
	limitertest.RunLeases(t, s, limitertest.Config{Prefix: limitertest.Prefix()})
	p := limitertest.LeasePolicy(t, limitertest.Prefix()+".inflight", 3, time.Hour)
	limitertest.LeaseExactness(t, []limiter.Store{s, newStore(t, cfg), newStore(t, cfg)}, p, limitertest.Subject("inflight"), 4, 100)
}

// TestLeaseHangTakesNothing: while Redis is stopped (SIGSTOP), takes with
// short deadlines fail by their deadline; their lease programs wait in
// Redis's socket and run after SIGCONT, past the deadline they carry, so
// none of them holds a lease: after the resume the limit is whole. Before
// the lease program had a deadline, the subject stayed full for the lease
// TTL after such a pause.
func TestLeaseHangTakesNothing(t *testing.T) {
	// A Timeout long enough that the connection is not closed during the
	// pause: the stalled programs stay queued on it and do run on resume.
	e := newEnvWith(t, Config{Timeout: 10 * time.Second}, redistest.Local())
	p := limitertest.LeasePolicy(t, limitertest.Prefix()+".hang", 5, time.Hour)
	sub := limitertest.Subject("hang")
	// The program is loaded, as on a replica that has served takes: the
	// stalled runs are EVALSHAs that Redis runs on resume.
	warm := make([]limiter.Outcome, 1)
	e.store.Evaluate(context.Background(), []limiter.Request{{Policy: p, Subject: limitertest.Subject("warm-up"), Cost: 1}}, warm)
	if warm[0].Kind != limiter.Evaluated {
		t.Fatalf("warm-up take: %v %v", warm[0].Kind, warm[0].Err)
	}

	const takes = 20
	e.srv.Pause()
	defer e.srv.Resume()
	var wg sync.WaitGroup
	outs := make([]limiter.Outcome, takes)
	for i := range takes {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			e.store.Evaluate(ctx, []limiter.Request{{Policy: p, Subject: sub, Cost: 1}}, outs[i:i+1])
		})
	}
	wg.Wait()
	for i, o := range outs {
		if o.Kind == limiter.Evaluated {
			t.Fatalf("take %d: evaluated on a stopped server", i)
		}
	}
	e.srv.Resume()

	// The same connection carries this take after the stalled ones, so
	// Redis has run them all when it answers.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out := make([]limiter.Outcome, 1)
	e.store.Evaluate(ctx, []limiter.Request{{Policy: p, Subject: sub, Cost: 1}}, out)
	if o := out[0]; o.Kind != limiter.Evaluated || !o.Decision.Consumed || o.Decision.Remaining != 4 {
		t.Fatalf("take after the resume: %v %+v (%v), want a lease with 4 left: the stalled takes hold leases", o.Kind, o.Decision, o.Err)
	}
}

// TestLeaseLateAnswerGivesBack: a take whose caller left before Redis
// answered, but which Redis ran in time (here: the store believes Redis an
// hour ahead, so the program's deadline has not passed when Redis, stopped
// while the take was sent, runs it on resume), took a lease that no release
// will name: the run gives it back when its late answer comes.
func TestLeaseLateAnswerGivesBack(t *testing.T) {
	e := newEnvWith(t, Config{Timeout: 10 * time.Second}, redistest.Local())
	p := limitertest.LeasePolicy(t, limitertest.Prefix()+".late", 3, time.Hour)
	sub := limitertest.Subject("late")
	check := func() limiter.Outcome {
		out := make([]limiter.Outcome, 1)
		e.store.Evaluate(context.Background(), []limiter.Request{{Policy: p, Subject: sub, Cost: 1, Role: limiter.RoleCheck}}, out)
		return out[0]
	}
	if o := check(); o.Kind != limiter.Evaluated || o.Decision.Remaining != 3 {
		t.Fatalf("warm-up check: %v %+v", o.Kind, o.Decision)
	}
	now := e.store.local.ms(time.Now())
	e.store.offsets[0] = clockOffset{}
	e.store.offsets[0].sample(now, now+time.Hour.Milliseconds())

	e.srv.Pause()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	out := make([]limiter.Outcome, 1)
	e.store.Evaluate(ctx, []limiter.Request{{Policy: p, Subject: sub, Cost: 1}}, out)
	cancel()
	e.srv.Resume()
	if out[0].Kind != limiter.Indeterminate {
		t.Fatalf("take on a stopped server: %v, want indeterminate", out[0].Kind)
	}
	polltest.Eventually(t, 10*time.Second, 10*time.Millisecond, "the late take's lease given back", func() error {
		if o := check(); o.Kind != limiter.Evaluated || o.Decision.Remaining != 3 {
			return fmt.Errorf("%v %+v", o.Kind, o.Decision)
		}
		return nil
	})
}
