package e2e_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/envoy-rls/envoy-rls/internal/polltest"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
)

// outageLeaseRules: four requests of a tenant in flight, decided by each
// replica's local share while Redis fails; a closed twin; and a local rate
// limit.
const outageLeaseRules = `domain: e2e
descriptors:
  - key: tenant
    rate_limit:
      concurrency: 4
      lease_ttl: 1h
      failure_mode: local
  - key: busy
    rate_limit:
      concurrency: 4
      lease_ttl: 2s
      failure_mode: local
  - key: closed
    rate_limit:
      concurrency: 5
      lease_ttl: 1h
  - key: rate
    rate_limit:
      unit: hour
      requests_per_unit: 4
      failure_mode: local
`

// holder is who holds the leases a marker names: 's' the store, 'l' the
// local fallback of the replica that took them.
func holder(marker string) byte {
	if marker == "" {
		return 0
	}
	return marker[0]
}

// startOutageReplicas starts n replicas of outageLeaseRules on one local
// Redis that the test pauses, each with --replicas-hint hint, and warms
// each one's lease program up (so that the programs Redis runs after a
// pause are the stalled ones, not a NOSCRIPT retry).
func startOutageReplicas(t *testing.T, n, hint int) (*redistest.Server, []*replica) {
	t.Helper()
	redis, cfg := withStandaloneRedis(t, redistest.Local())
	cfg.Args = []string{"--replicas-hint", fmt.Sprint(hint)}
	rs := startReplicas(t, n, outageLeaseRules, cfg)
	for _, r := range rs {
		w := unique("warm-up")
		res := take(r, "tenant", w)
		if !res.ok() || holder(res.marker()) != 's' {
			t.Fatalf("warm-up take on %s: %v %q", r.name, res, res.marker())
		}
		if rel := release(r, "tenant", w, res.marker()); !rel.ok() {
			t.Fatalf("warm-up release on %s: %v", r.name, rel)
		}
	}
	return redis, rs
}

// TestLeaseOutageKeepsOwners runs, on the binary, the sequence in which
// local-fallback leases once freed Redis leases: four takes held in Redis;
// Redis paused and four more admitted by one replica's local share
// (--replicas-hint 1); Redis back and the local leases' releases sent to
// every replica. Those releases give back only the local leases (on the
// replica that holds them) and never a Redis lease: the tenant stays full
// in Redis until its own four end, so in flight never exceeds the limit
// plus the local share, and once the local requests end it is the limit
// again.
func TestLeaseOutageKeepsOwners(t *testing.T) {
	redis, rs := startOutageReplicas(t, 3, 1)
	tenant := unique("t")
	var stored []string
	for i := range 4 {
		res := take(rs[i%3], "tenant", tenant)
		if !res.ok() || holder(res.marker()) != 's' {
			t.Fatalf("take %d: %v %q, want a Redis lease", i+1, res, res.marker())
		}
		stored = append(stored, res.marker())
	}

	redis.Pause()
	var local []string
	for i := range 5 {
		res := rs[0].call(time.Second, 0, entry{"tenant", tenant})
		switch {
		case i < 4 && (!res.ok() || holder(res.marker()) != 'l'):
			redis.Resume()
			t.Fatalf("take %d with Redis paused: %v %q, want a local lease", i+1, res, res.marker())
		case i == 4 && !res.over():
			redis.Resume()
			t.Fatalf("a fifth take of the local share: %v", res)
		}
		local = append(local, res.marker())
	}
	redis.Resume()
	waitLeaseDecided(t, rs[0])

	// The local requests end; Envoy sends each release to any replica.
	for i, m := range local[:4] {
		if res := release(rs[(i+1)%3], "tenant", tenant, m); !res.ok() {
			t.Fatalf("release of local lease %d: %v", i+1, res)
		}
	}
	// Redis still holds the first four: no room.
	for _, r := range rs {
		if res := take(r, "tenant", tenant); !res.over() {
			t.Fatalf("take on %s after the local releases: %v, want OVER_LIMIT (the four Redis leases are still held)", r.name, res)
		}
	}
	// The first four end: exactly four new takes.
	for i, m := range stored {
		if res := release(rs[(i+2)%3], "tenant", tenant, m); !res.ok() {
			t.Fatalf("release of Redis lease %d: %v", i+1, res)
		}
	}
	checkLeasesFree(t, rs, tenant, 4)
}

// waitLeaseDecided waits until Redis decides r's takes again.
func waitLeaseDecided(t *testing.T, r *replica) {
	t.Helper()
	polltest.Eventually(t, 10*time.Second, 20*time.Millisecond, "Redis decides takes again", func() error {
		w := unique("probe")
		res := take(r, "tenant", w)
		if !res.ok() || holder(res.marker()) != 's' {
			return fmt.Errorf("%v %q", res, res.marker())
		}
		release(r, "tenant", w, res.marker())
		return nil
	})
}

// TestLocalFallbackHungRedisDeadlines: with Redis stopped (SIGSTOP), a
// failure_mode local limit is decided by the replica's local share at each
// usual Envoy deadline: the answer reserve is the local limiter's, not an
// ended context. An answer the machine was too slow to deliver by the
// deadline (a gRPC DeadlineExceeded: not what is tested here) is asked
// again, at most three times; an answer by another mode fails at once.
func TestLocalFallbackHungRedisDeadlines(t *testing.T) {
	redis, rs := startOutageReplicas(t, 1, 1)
	r := rs[0]
	if res := r.call(callTimeout, 0, entry{"rate", unique("warm-up")}); !res.ok() {
		t.Fatalf("warm-up: %v", res)
	}
	redis.Pause()
	defer redis.Resume()
	ask := func(d time.Duration, key string) result {
		var res result
		for range 3 {
			if res = r.call(d, 0, entry{key, unique(key)}); status.Code(res.Err) != codes.DeadlineExceeded {
				break
			}
		}
		return res
	}
	for _, d := range []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond} {
		res := ask(d, "tenant")
		if !res.ok() || holder(res.marker()) != 'l' {
			t.Errorf("take with a %v deadline, Redis stopped: %v %q, want a local lease", d, res, res.marker())
		}
		rate := ask(d, "rate")
		if !rate.ok() || rate.Headers["X-RateLimit-Remaining"] != "3" {
			t.Errorf("rate call with a %v deadline, Redis stopped: %v, want the local share's OK with 3 left", d, rate)
		}
		t.Logf("deadline %v: the local take answered after %v, the local rate call after %v", d, res.Took, rate.Took)
	}
}

// TestLeaseHangTakesNothing: takes of a closed concurrency limit made while
// Redis is stopped are answered OVER_LIMIT without a marker (so Envoy sends
// no release); their programs run after SIGCONT, past the deadline they
// carry, and take nothing: the tenant has its whole limit after the pause.
func TestLeaseHangTakesNothing(t *testing.T) {
	redis, rs := startOutageReplicas(t, 1, 1)
	r := rs[0]
	tenant := unique("t")
	if res := take(r, "closed", unique("warm-up")); !res.ok() {
		t.Fatalf("warm-up: %v", res)
	}
	redis.Pause()
	defer redis.Resume()
	var wg sync.WaitGroup
	var bad atomic.Int64
	for range 20 {
		wg.Go(func() {
			res := r.call(time.Second, 0, entry{"closed", tenant})
			if !res.over() || res.marker() != "" {
				bad.Add(1)
			}
		})
	}
	wg.Wait()
	redis.Resume()
	if n := bad.Load(); n > 0 {
		t.Fatalf("%d of 20 takes during the pause were not OVER_LIMIT without a marker", n)
	}
	for i := range 6 {
		res := take(r, "closed", tenant)
		if res.ok() != (i < 5) {
			t.Fatalf("take %d after the pause: %v, want the whole limit of 5 then OVER_LIMIT", i+1, res)
		}
	}
}

// TestLeaseRandomOutages: twelve clients take a lease of one tenant on a
// random replica of three (--replicas-hint 3: a local share of 1 each),
// hold it 10–60 ms and release it on a random replica, while Redis is
// paused 0.2–1 s at random. The lease TTL is 2 s, so that a local lease
// whose release reached another replica (which cannot give it back) frees
// within the run. Counted by the holder each take's marker names: the
// requests holding Redis leases never exceed the limit, those holding a
// replica's local leases never exceed its share, so in flight never
// exceeds the limit plus the shares; after the last pause, with every
// request ended and the releases Redis missed applied from the replicas'
// journals, Redis admits exactly the limit.
func TestLeaseRandomOutages(t *testing.T) {
	redis, rs := startOutageReplicas(t, 3, 3)
	tenant := unique("t")
	const limit, share = 4, 1
	var mu sync.Mutex
	inRedis, most, mostRedis, locals := 0, 0, 0, 0
	inLocal := make([]int, len(rs))
	var problems []string
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 12 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 38))
			for {
				select {
				case <-stop:
					return
				default:
				}
				i := rng.IntN(len(rs))
				res := rs[i].call(100*time.Millisecond, 0, entry{"busy", tenant})
				m := res.marker()
				if !res.ok() || m == "" {
					time.Sleep(5 * time.Millisecond) // a refused request's client backs off
					continue
				}
				mu.Lock()
				if holder(m) == 's' {
					inRedis++
				} else {
					inLocal[i]++
					locals++
				}
				n := inRedis
				for k, l := range inLocal {
					n += l
					if l > share {
						problems = append(problems, fmt.Sprintf("%d local leases of %s in flight, share %d", l, rs[k].name, share))
					}
				}
				if inRedis > limit {
					problems = append(problems, fmt.Sprintf("%d Redis leases in flight, limit %d", inRedis, limit))
				}
				most, mostRedis = max(most, n), max(mostRedis, inRedis)
				mu.Unlock()

				time.Sleep(time.Duration(10+rng.IntN(50)) * time.Millisecond) // the request runs
				mu.Lock()
				if holder(m) == 's' {
					inRedis--
				} else {
					inLocal[i]--
				}
				mu.Unlock()
				rs[rng.IntN(len(rs))].call(100*time.Millisecond, 0, entry{"busy", tenant}, entry{"lease", m})
			}
		})
	}
	rng := rand.New(rand.NewPCG(38, 7))
	pauses := 0
	for end := time.Now().Add(6 * time.Second); time.Now().Before(end); pauses++ {
		time.Sleep(time.Duration(200+rng.IntN(600)) * time.Millisecond)
		redis.Pause()
		time.Sleep(time.Duration(200+rng.IntN(800)) * time.Millisecond)
		redis.Resume()
	}
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	mu.Lock()
	t.Logf("%d pauses; %d local leases taken; at most %d in flight (%d holding Redis leases); bound %d + %d × %d", pauses, locals, most, mostRedis, limit, len(rs), share)
	if len(problems) > 0 {
		t.Fatalf("%d violations, first: %s", len(problems), problems[0])
	}
	mu.Unlock()
	if most > limit+len(rs)*share {
		t.Fatalf("%d in flight, above the bound %d", most, limit+len(rs)*share)
	}
	// Every request has ended, and every replica's journal has applied the
	// releases Redis missed: Redis admits exactly the limit.
	polltest.Eventually(t, 20*time.Second, 50*time.Millisecond, "the journals applied", func() error {
		for _, r := range rs {
			if n := r.metric("envoy_rls_journal_entries"); n != 0 {
				return fmt.Errorf("%s holds %v entries", r.name, n)
			}
		}
		return nil
	})
	admitted := 0
	for i := range limit + 1 {
		if res := take(rs[i%3], "busy", tenant); res.ok() && holder(res.marker()) == 's' {
			admitted++
		}
	}
	t.Logf("after the outages Redis admits %d of %d", admitted, limit)
	if admitted != limit {
		t.Fatalf("%d takes admitted by Redis after the outages, want exactly the limit %d", admitted, limit)
	}
}
