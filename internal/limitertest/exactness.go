package limitertest

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// Exactness runs goroutines goroutines on each store, each sending perG
// requests that carry two limits on shared subjects: a tight one (limit
// tight) and a loose one that never denies. It checks that exactly tight
// requests are admitted and that the loose limit consumed exactly what was
// admitted: no request consumed on one limit but not the other.
func Exactness(t *testing.T, stores []limiter.Store, cfg Config, goroutines, perG int, tight int64) {
	t.Helper()
	const loose = 1_000_000_000
	tp, lp := Policy(t, fw(cfg.Prefix+".tight", tight)), Policy(t, fw(cfg.Prefix+".loose", loose))
	var tag limiter.Tag
	if cfg.Tag != nil {
		tag = cfg.Tag("exactness")
	}
	ts, ls := Subject(cfg.Prefix+"/tight"), Subject(cfg.Prefix+"/loose")
	var admitted, denied, failed atomic.Int64
	var wg sync.WaitGroup
	for _, s := range stores {
		for range goroutines {
			wg.Go(func() {
				out := make([]limiter.Outcome, 2)
				for i := 0; i < perG; i++ {
					// Alternate the order so that both orders race.
					batch := []limiter.Request{{Policy: tp, Subject: ts, Cost: 1, Tag: tag}, {Policy: lp, Subject: ls, Cost: 1, Tag: tag}}
					if i%2 == 1 {
						batch[0], batch[1] = batch[1], batch[0]
					}
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					s.Evaluate(ctx, batch, out)
					cancel()
					if out[0].Kind != limiter.Evaluated || out[1].Kind != limiter.Evaluated {
						failed.Add(1)
						continue
					}
					both := out[0].Decision.Allowed && out[1].Decision.Allowed
					if out[0].Decision.Consumed != both || out[1].Decision.Consumed != both {
						t.Errorf("consumed %v/%v with allowed %v/%v", out[0].Decision.Consumed, out[1].Decision.Consumed, out[0].Decision.Allowed, out[1].Decision.Allowed)
					}
					if both {
						admitted.Add(1)
					} else {
						denied.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.Fatalf("%d batches failed", failed.Load())
	}
	total := int64(len(stores) * goroutines * perG)
	if admitted.Load() != tight || admitted.Load()+denied.Load() != total {
		t.Fatalf("admitted %d, denied %d of %d; want exactly %d admitted", admitted.Load(), denied.Load(), total, tight)
	}
	// Read the loose limit without consuming.
	out := make([]limiter.Outcome, 1)
	stores[0].Evaluate(context.Background(), []limiter.Request{{Policy: lp, Subject: ls, Cost: 1, Role: limiter.RoleCheck, Tag: tag}}, out)
	if out[0].Kind != limiter.Evaluated {
		t.Fatalf("reading the loose limit: %v: %v", out[0].Kind, out[0].Err)
	}
	if used := loose - out[0].Decision.Remaining; used != admitted.Load() {
		t.Fatalf("loose limit consumed %d, admitted %d: a request consumed on one limit but not the other", used, admitted.Load())
	}
	t.Logf("%d stores x %d goroutines x %d: %d admitted, loose consumed %d", len(stores), goroutines, perG, admitted.Load(), admitted.Load())
}

// Hammer runs callers goroutines on s, each making perCaller Evaluate
// calls of batch(g, i) (g the caller, i the call), all released at once,
// and returns how many calls committed (every request allowed) and how
// many were denied; onAdmit(g, i), when it is not nil, is called for each
// call that committed. Any other outcome fails t.
func Hammer(t *testing.T, s limiter.Store, callers, perCaller int, batch func(g, i int) []limiter.Request, onAdmit func(g, i int)) (admitted, refused int64) {
	t.Helper()
	var ok, no atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for g := range callers {
		wg.Go(func() {
			<-start
			for i := range perCaller {
				b := batch(g, i)
				out := make([]limiter.Outcome, len(b))
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				s.Evaluate(ctx, b, out)
				cancel()
				all := true
				for k := range out {
					if out[k].Kind != limiter.Evaluated {
						t.Errorf("caller %d call %d: %v: %v", g, i, out[k].Kind, out[k].Err)
						return
					}
					all = all && out[k].Decision.Allowed
				}
				if all {
					if onAdmit != nil {
						onAdmit(g, i)
					}
					ok.Add(1)
				} else {
					no.Add(1)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	return ok.Load(), no.Load()
}

// LeaseExactness runs workers goroutines on each store (replicas sharing
// one state), each taking a lease of p, holding it while it counts itself
// in flight, and releasing it, perW times (Hammer). It checks that no more
// than p.Limit() were ever in flight at once and that every lease was
// given back.
func LeaseExactness(t *testing.T, stores []limiter.Store, p *limiter.Policy, subject limiter.SubjectDigest, workers, perW int) {
	t.Helper()
	var inFlight, most, admitted atomic.Int64
	var wg sync.WaitGroup
	for _, s := range stores {
		wg.Go(func() {
			out := make([]limiter.Outcome, workers)
			ok, _ := Hammer(t, s, workers, perW, func(int, int) []limiter.Request {
				return []limiter.Request{{Policy: p, Subject: subject, Cost: 1}}
			}, func(g, _ int) {
				n := inFlight.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				// Hold the lease for one more round trip to the store.
				s.Evaluate(context.Background(), []limiter.Request{{Policy: p, Subject: subject, Cost: 1, Role: limiter.RoleProbe}}, out[g:g+1])
				inFlight.Add(-1)
				s.Evaluate(context.Background(), []limiter.Request{{Policy: p, Subject: subject, Cost: 1,
					Lease: limiter.LeaseRelease, Role: limiter.RoleCheck}}, out[g:g+1])
			})
			admitted.Add(ok)
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	if m := most.Load(); m > p.Limit() || m < 1 {
		t.Fatalf("%d in flight at once, limit %d", m, p.Limit())
	}
	t.Logf("%d admitted, at most %d in flight (limit %d)", admitted.Load(), most.Load(), p.Limit())
	out := make([]limiter.Outcome, 1)
	stores[0].Evaluate(context.Background(), []limiter.Request{{Policy: p, Subject: subject, Cost: p.Limit(), Role: limiter.RoleProbe}}, out)
	if d := out[0].Decision; out[0].Kind != limiter.Evaluated || !d.Allowed || d.Remaining != p.Limit() {
		t.Fatalf("after every release: %s %+v, want the whole limit free", out[0].Kind, d)
	}
}
