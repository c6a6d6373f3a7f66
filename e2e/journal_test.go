package e2e_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/envoy-rls/envoy-rls/internal/polltest"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
)

// journalMeter is the limit of journalRules: far above what a test
// charges, so that nothing is clamped at the ceiling.
const journalMeter = 1_000_000

// journalRules: a tenant's meter of post-paid tokens, charging always.
var journalRules = fmt.Sprintf("domain: %s\ndescriptors:\n  - key: meter\n    rate_limit: {unit: hour, requests_per_unit: %d, charge: always}\n", domain, journalMeter)

// journalArgs: a Redis timeout far below the pauses, so that the charges
// sent during one fail (and are answered closed) rather than wait.
var journalArgs = []string{"--redis-timeout", "100ms"}

// recordedOn reads what Redis holds for tenant's meter, through r: a check
// (the descriptor's hits_addend 0) reports the remaining.
func recordedOn(t *testing.T, r *replica, tenant string) int64 {
	t.Helper()
	d := &ratelimitv3.RateLimitDescriptor{HitsAddend: wrapperspb.UInt64(0),
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "meter", Value: tenant}}}
	res := r.send(callTimeout, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})
	if !res.ok() || res.Limit != journalMeter {
		t.Fatalf("reading the meter through %s: %v", r.name, res)
	}
	return journalMeter - int64(res.Remain)
}

// waitJournalsEmpty waits until every replica's journal is empty.
func waitJournalsEmpty(t *testing.T, rs []*replica) time.Duration {
	t.Helper()
	return polltest.Eventually(t, 30*time.Second, 50*time.Millisecond, "empty journals", func() error {
		for _, r := range rs {
			if n := r.metric("envoy_rls_journal_entries"); n != 0 {
				return fmt.Errorf("%s holds %v entries", r.name, n)
			}
		}
		return nil
	})
}

// TestChargesThroughRedisPause: three replicas on one Redis; workers send
// a tenant's charges (1 to 600 tokens each, Envoy's stream-done calls) to
// random replicas while Redis stops (SIGSTOP) for 0.6 s in the middle.
// The charges sent meanwhile are answered by the failure mode (closed),
// and kept by their replica's journal; once Redis answers again the
// journals empty, and Redis holds exactly the tokens charged. The journal
// metrics say what happened: every charge kept was replayed, none dropped.
func TestChargesThroughRedisPause(t *testing.T) {
	redis, cfg := withStandaloneRedis(t, redistest.Local())
	cfg.Args = journalArgs
	rs := startReplicas(t, 3, journalRules, cfg)
	tenant := unique("tenant")

	var charged, calls, answeredClosed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 38))
			for {
				select {
				case <-stop:
					return
				default:
				}
				r := rs[rng.IntN(len(rs))]
				tokens := 1 + rng.IntN(600)
				res := r.call(callTimeout, uint32(tokens), entry{"meter", tenant})
				if res.Err != nil {
					t.Errorf("%s: a charge of %d: %v", r.name, tokens, res.Err)
					return
				}
				charged.Add(int64(tokens))
				calls.Add(1)
				if res.over() {
					answeredClosed.Add(1)
				}
			}
		})
	}
	waitCalls := func(n int64, what string) {
		t.Helper()
		polltest.Eventually(t, 30*time.Second, 5*time.Millisecond, what, func() error {
			if c := calls.Load(); c < n {
				return fmt.Errorf("%d calls", c)
			}
			return nil
		})
	}
	waitCalls(300, "charges before the pause")
	redis.Pause()
	before := calls.Load()
	time.Sleep(600 * time.Millisecond) // the outage
	redis.Resume()
	during := calls.Load() - before
	waitCalls(calls.Load()+300, "charges after the pause")
	close(stop)
	wg.Wait()
	if t.Failed() {
		return
	}
	took := waitJournalsEmpty(t, rs)

	recorded := recordedOn(t, rs[0], tenant)
	var journalled, replayed, dropped float64
	for _, r := range rs {
		journalled += r.metric(`envoy_rls_journal_journalled_total{kind="charge"}`)
		replayed += r.metric(`envoy_rls_journal_replayed_total{kind="charge"}`)
		dropped += r.metricSum("envoy_rls_journal_dropped_total")
	}
	t.Logf("%d charges (%d during the 0.6 s pause, %d answered closed), %d tokens charged, %d recorded; journalled %v, replayed %v, dropped %v; journals empty %v after the checks began",
		calls.Load(), during, answeredClosed.Load(), charged.Load(), recorded, journalled, replayed, dropped, took)
	if answeredClosed.Load() == 0 {
		t.Fatal("no charge failed during the pause: the test proves nothing")
	}
	if recorded != charged.Load() {
		t.Errorf("%d tokens recorded, %d charged", recorded, charged.Load())
	}
	if journalled == 0 || replayed != journalled || dropped != 0 {
		t.Errorf("journalled %v, replayed %v, dropped %v:%s", journalled, replayed, dropped, rs[0].metricLines("envoy_rls_journal_"))
	}
}

// TestJournalFileAcrossRestart: a replica with --journal-file takes
// charges while Redis is stopped, and is stopped (SIGTERM) before Redis
// answers again: its last replay fails, so it writes what it holds to the
// file. Started again once Redis is back, it reads the file, applies every
// charge once and removes the file; a third start applies nothing more.
func TestJournalFileAcrossRestart(t *testing.T) {
	redis, cfg := withStandaloneRedis(t, redistest.Local())
	file := filepath.Join(t.TempDir(), "journal")
	cfg.Rules, cfg.Secret = rulesDir(t, journalRules), secretFile(t)
	cfg.Args = append(append([]string{}, journalArgs...), "--journal-file", file)
	first := startReplica(t, "first", cfg)
	tenant := unique("tenant")

	const charges = 20
	charged := int64(0)
	for i := range charges {
		tokens := 100 + i
		if res := first.call(callTimeout, uint32(tokens), entry{"meter", tenant}); !res.ok() {
			t.Fatalf("charge %d before the pause: %v", i, res)
		}
		charged += int64(tokens)
	}
	redis.Pause()
	for i := range charges {
		tokens := 200 + i
		if res := first.call(callTimeout, uint32(tokens), entry{"meter", tenant}); !res.over() {
			t.Fatalf("charge %d during the pause: %v, want OVER_LIMIT (failure mode closed)", i, res)
		}
		charged += int64(tokens)
	}
	if n := first.metric("envoy_rls_journal_entries"); n != charges {
		t.Fatalf("%v entries held during the pause, want %d", n, charges)
	}
	if err := first.stop(); err != nil {
		t.Fatalf("stopping the first replica: %v", err)
	}
	if _, err := os.Stat(file); err != nil {
		t.Fatalf("no journal file after the stop: %v\n%s", err, first.log.tail(4000))
	}
	if !first.log.contains(`written to the journal file`) || !first.log.contains(fmt.Sprintf(`"entries":%d`, charges)) {
		t.Errorf("the stop does not log the entries written:\n%s", first.log.tail(4000))
	}
	redis.Resume()

	second := startReplica(t, "second", cfg)
	waitJournalsEmpty(t, []*replica{second})
	if !second.log.contains("journal restored") {
		t.Errorf("the start does not log the restore:\n%s", second.log.tail(4000))
	}
	if recorded := recordedOn(t, second, tenant); recorded != charged {
		t.Fatalf("%d tokens recorded after the restart, %d charged", recorded, charged)
	}
	if got := second.metric(`envoy_rls_journal_replayed_total{kind="charge"}`); got != charges {
		t.Errorf("the second replica replayed %v charges, want %d", got, charges)
	}
	if _, err := os.Stat(file); err == nil {
		t.Error("the journal file is still there after its entries were restored")
	}
	if err := second.stop(); err != nil {
		t.Fatalf("stopping the second replica: %v", err)
	}

	third := startReplica(t, "third", cfg)
	if recorded := recordedOn(t, third, tenant); recorded != charged {
		t.Fatalf("%d tokens recorded after a third start, %d charged", recorded, charged)
	}
	if strings.Contains(third.log.tail(1<<20), "journal restored") {
		t.Error("the third start restored entries")
	}
}
