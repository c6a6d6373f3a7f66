package journal

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/redis"
)

// TestPausedRedisCharges: sixteen streams of charges through the journal
// over a real Redis, which stops (SIGSTOP) for half a second in the
// middle. The charges sent meanwhile fail (by their 150 ms deadline) and
// are kept; their programs, queued in Redis's socket, run after SIGCONT
// past their deadline and commit nothing. A program that Redis ran just
// before it stopped, its answer not yet written, did apply its charges:
// its late answer says so, and they are not applied again. Once the
// journal is empty, Redis holds exactly the total charged.
func TestPausedRedisCharges(t *testing.T) {
	srv := redistest.Standalone(t, redistest.Local())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The connection outlives the pause (it closes after 4 timeouts
	// without an answer, at least 1 s), as it does through a short blip.
	st, err := redis.New(ctx, redis.Config{Addrs: []string{srv.Addr()}, Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	obs := newRecording()
	j := newJournal(t, st, Config{Observer: obs})
	runCtx, stopRun := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { defer close(ran); j.Run(runCtx) }()
	defer func() { stopRun(); <-ran }()

	p, sub := meter(t, "journal.paused"), subject("tenant")
	var charged, calls, failed atomic.Int64
	var refused atomic.Value // a failure the journal does not keep
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 38))
			out := make([]limiter.Outcome, 1)
			for {
				select {
				case <-stop:
					return
				default:
				}
				cost := 1 + rng.Int64N(50)
				cctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
				j.Evaluate(cctx, []limiter.Request{{Policy: p, Subject: sub, Cost: cost}}, out)
				cancel()
				charged.Add(cost)
				calls.Add(1)
				switch o := out[0]; {
				case o.Kind == limiter.Evaluated:
				case unapplied(&o):
					failed.Add(1)
				default:
					refused.Store(o)
				}
			}
		})
	}
	waitFor(t, func() bool { return calls.Load() >= 200 }, "charges before the pause")
	srv.Pause()
	pausedAt := calls.Load()
	time.Sleep(500 * time.Millisecond) // the outage itself
	srv.Resume()
	during := calls.Load() - pausedAt
	waitFor(t, func() bool { return calls.Load() >= pausedAt+during+200 }, "charges after the pause")
	close(stop)
	wg.Wait()
	if o := refused.Load(); o != nil {
		t.Fatalf("a charge failed in a way that is not kept: %+v", o)
	}
	waitFor(t, func() bool { return j.Len() == 0 }, "an empty journal")

	out := make([]limiter.Outcome, 1)
	st.Evaluate(context.Background(), []limiter.Request{{Policy: p, Subject: sub, Cost: 1, Role: limiter.RoleCheck}}, out)
	if out[0].Kind != limiter.Evaluated {
		t.Fatalf("reading the total: %v (%v)", out[0].Kind, out[0].Err)
	}
	recorded := p.Limit() - out[0].Decision.Remaining
	t.Logf("%d charges (%d during the pause), %d tokens charged, %d recorded; %d failed, %s",
		calls.Load(), during, charged.Load(), recorded, failed.Load(), obs)
	if failed.Load() == 0 || obs.journalled[kindCharge] == 0 {
		t.Fatal("no charge failed during the pause: the test proves nothing")
	}
	if recorded != charged.Load() {
		t.Fatalf("%d tokens recorded, %d charged", recorded, charged.Load())
	}
}
