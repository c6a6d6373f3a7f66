package e2e_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
)

// leaseRules: three requests of a tenant in flight (leases that outlive
// any test), and one request of a "crashy" client whose lease lives a
// second.
const leaseRules = `domain: e2e
descriptors:
  - key: tenant
    rate_limit:
      concurrency: 3
      lease_ttl: 1h
  - key: crashy
    rate_limit:
      concurrency: 1
      lease_ttl: 1s
`

// leaseTTL is the crashy rule's lease_ttl.
const leaseTTL = time.Second

// take and release are the two calls Envoy makes for one request of a
// subject: the request-phase descriptor, and at stream end the same
// descriptor with the release marker that the take's answer carried in its
// dynamic metadata (marker; docs/config.md, "Concurrency"). A marker of
// "release" is the value that gives back the store's soonest lease.
func take(r *replica, key, value string) result {
	return r.call(callTimeout, 0, entry{key, value})
}

func release(r *replica, key, value, marker string) result {
	return r.call(callTimeout, 0, entry{key, value}, entry{"lease", marker})
}

// marker is the release marker of a take's answer ("" when it took no
// lease).
func (r result) marker() string {
	m, _ := r.Metadata["lease"].(string)
	return m
}

// TestConcurrencyAcrossReplicas: three replicas of the binary on one
// Redis, twelve clients taking a lease of one tenant, holding it for a
// round trip while they count themselves in flight, and releasing it. No
// more than the limit is ever in flight, and when they are done every
// lease is back.
func TestConcurrencyAcrossReplicas(t *testing.T) {
	_, cfg := withStandaloneRedis(t)
	rs := startReplicas(t, 3, leaseRules, cfg)
	tenant := unique("t")
	var inFlight, most, admitted atomic.Int64
	total := &tally{}
	load(12, 40, nil, func(g, _ int) {
		r := rs[g%len(rs)]
		res := take(r, "tenant", tenant)
		total.add(res)
		if res.Err != nil || !res.ok() {
			return
		}
		admitted.Add(1)
		n := inFlight.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		// Hold the lease for a round trip (another tenant's release of
		// this lease's marker: a no-op).
		release(r, "tenant", "idle-"+tenant, res.marker())
		inFlight.Add(-1)
		if rel := release(rs[(g+1)%len(rs)], "tenant", tenant, res.marker()); !rel.ok() {
			total.note("%s: release answered %v", r.name, rel)
		}
	})
	t.Logf("%v; %d admitted, at most %d in flight", total, admitted.Load(), most.Load())
	if total.errs != nil || len(total.samples) > 0 {
		t.Fatalf("unexpected answers: %v", total)
	}
	if m := most.Load(); m < 1 || m > 3 {
		t.Fatalf("%d in flight at once, limit 3", m)
	}
	checkLeasesFree(t, rs, tenant, 3)
}

// checkLeasesFree: exactly limit takes of the subject are admitted, on
// the replicas in turn, and the next is denied; then they are released.
func checkLeasesFree(t *testing.T, rs []*replica, value string, limit int) {
	t.Helper()
	var markers []string
	for i := range limit + 1 {
		r := rs[i%len(rs)]
		res := take(r, "tenant", value)
		if res.ok() != (i < limit) || res.Err != nil {
			t.Fatalf("take %d on %s: %v, want ok=%t", i+1, r.name, res, i < limit)
		}
		markers = append(markers, res.marker())
	}
	for i := range limit {
		if res := release(rs[(i+1)%len(rs)], "tenant", value, markers[i]); !res.ok() {
			t.Fatalf("release %d: %v", i+1, res)
		}
	}
}

// TestLeaseReleases runs the same script on the memory store and on Redis
// (two replicas): releases with no lease held are answered OK and never
// make room beyond the limit, a full tenant is denied until a release, and
// a crashed holder's lease returns after its lease_ttl, not before.
func TestLeaseReleases(t *testing.T) {
	onEachStore(t, func(t *testing.T, cfg replicaConfig, redis *redistest.Server) {
		n := 1
		if redis != nil {
			n = 2
		}
		rs := startReplicas(t, n, leaseRules, cfg)
		tenant := unique("t")
		for i := range 5 {
			if res := release(rs[i%n], "tenant", tenant, "release"); !res.ok() {
				t.Fatalf("release %d with nothing held: %v", i+1, res)
			}
		}
		// Never negative: still exactly 3.
		checkLeasesFree(t, rs, tenant, 3)
		// The answer to a take that took a lease says so in its dynamic
		// metadata (Envoy's stream-done release reads it); a denied one
		// does not.
		marks := leaseMarks(t, rs[0], unique("m"), 4)
		if got := []bool{marks[0] != "", marks[1] != "", marks[2] != "", marks[3] != ""}; !slices.Equal(got, []bool{true, true, true, false}) ||
			marks[0] == marks[1] || marks[1] == marks[2] {
			t.Fatalf("lease marks of 4 takes: %q, want three markers of their own and none", marks)
		}
		var held []string
		for i := range 3 {
			res := take(rs[i%n], "tenant", tenant)
			if !res.ok() {
				t.Fatalf("take %d: %v", i+1, res)
			}
			held = append(held, res.marker())
		}
		if res := take(rs[0], "tenant", tenant); !res.over() {
			t.Fatalf("a fourth in flight: %v", res)
		}
		if res := release(rs[n-1], "tenant", tenant, held[1]); !res.ok() {
			t.Fatalf("release: %v", res)
		}
		if res := take(rs[0], "tenant", tenant); !res.ok() {
			t.Fatalf("take after a release: %v", res)
		}

		// A holder that never releases (its proxy died).
		crashy := unique("c")
		start := time.Now()
		if res := take(rs[0], "crashy", crashy); !res.ok() {
			t.Fatalf("crashy take: %v", res)
		}
		if res := take(rs[n-1], "crashy", crashy); !res.over() && time.Since(start) < leaseTTL {
			t.Fatalf("a second crashy take while the lease lives: %v", res)
		}
		deadline := start.Add(leaseTTL + 10*time.Second)
		for {
			time.Sleep(leaseTTL / 5)
			res := take(rs[n-1], "crashy", crashy)
			if res.ok() {
				if elapsed := time.Since(start); elapsed < leaseTTL {
					t.Fatalf("the lease returned after %s, before its lease_ttl %s", elapsed, leaseTTL)
				}
				break
			}
			if !res.over() || time.Now().After(deadline) {
				t.Fatalf("the crashed holder's lease did not return: %v", res)
			}
		}
	})
}

// leaseMarks sends n takes of a tenant to r and returns, for each, the
// value of the "lease" field of the answer's dynamic metadata.
func leaseMarks(t *testing.T, r *replica, tenant string, n int) []string {
	t.Helper()
	var marks []string
	for range n {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		resp, err := r.rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: tenant}}}}})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		marks = append(marks, resp.GetDynamicMetadata().GetFields()["lease"].GetStringValue())
	}
	return marks
}
