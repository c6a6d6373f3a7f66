package e2e_test

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/envoy-rls/envoy-rls/internal/polltest"
	"github.com/envoy-rls/envoy-rls/internal/rlqstest"
)

// rlqsRules: one tenant's limit of 2000 requests per 10 s window (200/s).
const rlqsRules = `domain: rlqs
descriptors:
  - key: tenant
    rate_limit: {unit: second, unit_multiplier: 10, requests_per_unit: 2000}
`

// Figures of the fleet runs: the limit per window, the window.
const (
	rlqsLimit  = 2000
	rlqsWindow = 10 * time.Second
)

// fleetProxy is one simulated proxy of a fleet run and what it admitted.
type fleetProxy struct {
	p      *rlqstest.Proxy
	demand float64 // requests per second it is asked for at the start
	// rate is the requests per second it is asked for now (float64 bits).
	rate atomic.Uint64
	mu   sync.Mutex
	// admitted counts the requests it admitted per window index
	// (UnixMilli / window), bySecond per Unix second.
	admitted, bySecond map[int64]int
}

// runFleet starts one simulated proxy per demand (requests per second),
// proxy i connected first to targets[i % len(targets)] (then the others),
// reporting every interval; each sends its demand's requests for bucket
// until stop is closed.
func runFleet(t *testing.T, targets []string, demands []float64, interval time.Duration, bucket map[string]string, stop <-chan struct{}) []*fleetProxy {
	t.Helper()
	fleet := make([]*fleetProxy, len(demands))
	var wg sync.WaitGroup
	for i, d := range demands {
		order := make([]string, 0, len(targets))
		for k := range targets {
			order = append(order, targets[(i+k)%len(targets)])
		}
		p := rlqstest.Run(t, rlqstest.Config{Domain: "rlqs", Targets: order, Interval: interval})
		fp := &fleetProxy{p: p, demand: d, admitted: make(map[int64]int), bySecond: make(map[int64]int)}
		fp.rate.Store(math.Float64bits(d))
		fleet[i] = fp
		wg.Add(1)
		go func() {
			defer wg.Done()
			fp.drive(bucket, stop)
		}()
	}
	t.Cleanup(wg.Wait)
	return fleet
}

// drive sends the proxy's demand, evenly spaced, until stop.
func (fp *fleetProxy) drive(bucket map[string]string, stop <-chan struct{}) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	last, owed := time.Now(), 0.0
	for {
		select {
		case <-stop:
			return
		case now := <-tick.C:
			owed += now.Sub(last).Seconds() * math.Float64frombits(fp.rate.Load())
			last = now
			for ; owed >= 1; owed-- {
				if fp.p.Request(bucket) {
					fp.mu.Lock()
					fp.admitted[now.UnixMilli()/rlqsWindow.Milliseconds()]++
					fp.bySecond[now.Unix()]++
					fp.mu.Unlock()
				}
			}
		}
	}
}

// inWindows sums what the proxy admitted in windows [from, to).
func (fp *fleetProxy) inWindows(from, to int64) int {
	fp.mu.Lock()
	defer fp.mu.Unlock()
	n := 0
	for w := from; w < to; w++ {
		n += fp.admitted[w]
	}
	return n
}

// skewed is ten demands, one ten times each of the others, together
// three times the limit's rate.
func skewed() []float64 {
	total := 3 * float64(rlqsLimit) / rlqsWindow.Seconds()
	demands := make([]float64, 10)
	for i := range demands {
		demands[i] = total / 19 // nine of these and one of ten: 19 shares
	}
	demands[0] = 10 * total / 19
	return demands
}

// startAligned waits until just after a window begins and starts the
// fleet of demands against targets; it returns the fleet, the first window
// measured (the next one: the proxies' first requests, admitted before
// any assignment as Envoy's default is, are charged to the current one,
// and the next starts more than two reporting intervals later) and the
// fleet's stop.
func startAligned(t *testing.T, targets []string, demands []float64) ([]*fleetProxy, int64, func()) {
	win := rlqsWindow.Milliseconds()
	time.Sleep(time.Until(time.UnixMilli((time.Now().UnixMilli()/win + 1) * win).Add(50 * time.Millisecond)))
	stop := make(chan struct{})
	first := time.Now().UnixMilli()/win + 1
	fleet := runFleet(t, targets, demands, time.Second, map[string]string{"tenant": "rawval-acme"}, stop)
	var once sync.Once
	return fleet, first, func() { once.Do(func() { close(stop) }) }
}

// untilWindow sleeps until window w (an index, UnixMilli / window) has
// begun, plus after.
func untilWindow(w int64, after time.Duration) {
	time.Sleep(time.Until(time.UnixMilli(w * rlqsWindow.Milliseconds()).Add(after)))
}

// checkWindows checks that each window of [first, first+n) admitted
// within 5 % of the limit, plus extra (what else the window admitted,
// by window; nil: nothing) and, above it, allowance (what the bound
// allows the window beyond that; nil: nothing).
func checkWindows(t *testing.T, fleet []*fleetProxy, first, n int64, extra, allowance func(w int64) int) {
	t.Helper()
	for w := first; w < first+n; w++ {
		sum := 0
		for _, fp := range fleet {
			sum += fp.inWindows(w, w+1)
		}
		more := 0
		if extra != nil {
			more = extra(w)
		}
		over := 0
		if allowance != nil {
			over = allowance(w)
		}
		t.Logf("window %d: %d admitted by the proxies, %d otherwise, of a limit of %d (allowed over: %d)", w-first+1, sum, more, rlqsLimit, over)
		if d := float64(sum+more-rlqsLimit-over) / rlqsLimit; d > 0.05 || float64(sum+more-rlqsLimit)/rlqsLimit < -0.05 {
			t.Errorf("window %d admitted %d, want %d within 5%% (%d over allowed)", w-first+1, sum+more, rlqsLimit, over)
		}
	}
}

// checkFleet runs the skewed fleet against targets and checks, over the
// two whole windows that start two reporting intervals after the start:
// each window admits the limit within 5 %, and each proxy at least 90 %
// of min(its demand, its fair share).
func checkFleet(t *testing.T, targets []string) {
	fleet, first, stop := startAligned(t, targets, skewed())
	const windows = 2
	untilWindow(first+windows, 100*time.Millisecond)
	stop()
	checkWindows(t, fleet, first, windows, nil, nil)
	fair := float64(rlqsLimit) / rlqsWindow.Seconds() / float64(len(fleet)) // every demand is above it
	for i, fp := range fleet {
		rate := float64(fp.inWindows(first, first+windows)) / (windows * rlqsWindow.Seconds())
		want := 0.9 * min(fp.demand, fair)
		t.Logf("proxy %d: demand %.2f/s, admitted %.2f/s", i, fp.demand, rate)
		if rate < want {
			t.Errorf("proxy %d admitted %.2f/s, want at least %.2f (90%% of min(demand %.2f, fair share %.2f))", i, rate, want, fp.demand, fair)
		}
	}
}

// TestRLQSFleetOneReplica: ten proxies on one replica (memory store)
// share one limit by max-min fairness.
func TestRLQSFleetOneReplica(t *testing.T) {
	auditFile := filepath.Join(t.TempDir(), "audit.jsonl")
	r := startReplicas(t, 1, rlqsRules, replicaConfig{Args: []string{"--admin-token-file", tokenFile(t),
		"--audit-sink", "file", "--audit-file", auditFile}})[0]
	checkFleet(t, []string{r.grpcAddr})
	// What the proxies denied is in the audit stream, by digest.
	polltest.Eventually(t, 10*time.Second, 100*time.Millisecond, "the proxies' denials audited", func() error {
		b, err := os.ReadFile(auditFile)
		switch {
		case err != nil:
			return err
		case !strings.Contains(string(b), `"source":"rlqs"`) || !strings.Contains(string(b), `"policy_id":"rlqs/tenant"`):
			return fmt.Errorf("no RLQS denial in the audit file (%d bytes)", len(b))
		case strings.Contains(string(b), "rawval"):
			return fmt.Errorf("a raw value in the audit file")
		}
		return nil
	})
	if got := r.metric(`envoy_rls_rlqs_streams`); got != 10 {
		t.Errorf("rlqs_streams %v, want 10", got)
	}
	if got := r.metric(`envoy_rls_rlqs_subscribers{domain="rlqs",policy="rlqs/tenant"}`); got != 10 {
		t.Errorf("rlqs_subscribers %v, want 10", got)
	}
	// The admin API lists the aggregate: its digest, never the tenant.
	code, body, err := r.adminDo("GET", "/v1/rlqs", adminToken)
	var ans struct {
		Streams    int `json:"streams"`
		Aggregates []struct {
			PolicyID      string `json:"policy_id"`
			SubjectDigest string `json:"subject_digest"`
			Subscribers   int    `json:"subscribers"`
		} `json:"aggregates"`
	}
	if err != nil || code != 200 || json.Unmarshal([]byte(body), &ans) != nil || ans.Streams != 10 || len(ans.Aggregates) != 1 ||
		ans.Aggregates[0].PolicyID != "rlqs/tenant" || ans.Aggregates[0].Subscribers != 10 || len(ans.Aggregates[0].SubjectDigest) != 64 {
		t.Errorf("GET /v1/rlqs: %d %v %s", code, err, body)
	}
	if strings.Contains(body, "rawval") {
		t.Errorf("GET /v1/rlqs shows a raw value: %s", body)
	}
}

// TestRLQSFleetThreeReplicas: the same ten proxies spread over three
// replicas sharing one Redis divide one limit as one replica does.
func TestRLQSFleetThreeReplicas(t *testing.T) {
	_, cfg := withStandaloneRedis(t)
	rs := startReplicas(t, 3, rlqsRules, cfg)
	checkFleet(t, []string{rs[0].grpcAddr, rs[1].grpcAddr, rs[2].grpcAddr})
	for _, r := range rs {
		if got := r.metric(`envoy_rls_rlqs_streams`); got < 3 || got > 4 {
			t.Errorf("%s: rlqs_streams %v, want 3 or 4 of the 10", r.name, got)
		}
	}
}

// TestRLQSReplicaKilled: three replicas on one Redis; one is killed
// (SIGKILL) in the middle of a window: its proxies reconnect to the
// others at their next report, and every window stays within 5 % of the
// limit.
func TestRLQSReplicaKilled(t *testing.T) {
	_, cfg := withStandaloneRedis(t)
	rs := startReplicas(t, 3, rlqsRules, cfg)
	fleet, first, stop := startAligned(t, []string{rs[0].grpcAddr, rs[1].grpcAddr, rs[2].grpcAddr}, skewed())
	defer stop()
	untilWindow(first, rlqsWindow/2)
	if err := rs[0].cmd.Process.Kill(); err != nil {
		t.Fatalf("killing %s: %v", rs[0].name, err)
	}
	killed := time.Now().Unix()
	untilWindow(first+2, 100*time.Millisecond)
	stop()
	// The bound (docs/rlqs.md): the reports the killed replica had not
	// charged are lost, at most a tick of its proxies' usage; here, the
	// more they admitted in one of the two seconds before the kill.
	var before [2]int
	for i := 0; i < len(fleet); i += 3 { // the proxies that started on rs[0]
		fleet[i].mu.Lock()
		before[0] += fleet[i].bySecond[killed-2]
		before[1] += fleet[i].bySecond[killed-1]
		fleet[i].mu.Unlock()
	}
	lost := max(before[0], before[1])
	checkWindows(t, fleet, first, 2, nil, func(w int64) int {
		if w == first {
			return lost
		}
		return 0
	})
	for i := 0; i < len(fleet); i += 3 { // the proxies that started on rs[0]
		if st := fleet[i].p.Stats(); st.StreamsOpened < 2 {
			t.Errorf("proxy %d of the killed replica: %d streams opened, want a second one elsewhere", i, st.StreamsOpened)
		}
	}
}

// TestRLQSGracefulStop: a replica stopped by SIGTERM sends every bucket
// its assignment with a time to live of 0 (the proxy falls back at once
// rather than keep a quota nobody revises) and exits within its drain
// timeout, its streams ended.
func TestRLQSGracefulStop(t *testing.T) {
	r := startReplicas(t, 1, rlqsRules, replicaConfig{})[0]
	p := rlqstest.Run(t, rlqstest.Config{Domain: "rlqs", Targets: []string{r.grpcAddr}, Interval: time.Second})
	bucket := map[string]string{"tenant": "rawval-stop"}
	p.Request(bucket)
	polltest.Eventually(t, 10*time.Second, 20*time.Millisecond, "an assignment", func() error {
		if a, ok := p.Assignment(bucket); !ok || a.Strategy.GetTokenBucket() == nil || a.TTL < time.Second {
			return fmt.Errorf("assignment %+v", a)
		}
		return nil
	})
	r.terminate(t)
	if code, err := r.wait(stopTimeout); err != nil || code != 0 {
		t.Fatalf("after SIGTERM: exit %d, %v; want 0 within %v", code, err, stopTimeout)
	}
	if a, _ := p.Assignment(bucket); a.TTL != 0 || p.Stats().ShortTTL < 1 {
		t.Fatalf("after the stop: last assignment %+v, %d with a TTL under 1s; want one with TTL 0", a, p.Stats().ShortTTL)
	}
}

// TestRLQSWithRLS: RLS calls and RLQS reports on one rule share one
// budget: proxies wanting twice the limit beside an RLS client calling
// 50 times a second admit together the limit within 5 % per window.
func TestRLQSWithRLS(t *testing.T) {
	r := startReplicas(t, 1, rlqsRules, replicaConfig{})[0]
	demands := skewed()
	for i := range demands {
		demands[i] *= 2.0 / 3
	}
	fleet, first, stop := startAligned(t, []string{r.grpcAddr}, demands)
	defer stop()
	var mu sync.Mutex
	rlsOK := map[int64]int{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		req := &rlsv3.RateLimitRequest{Domain: "rlqs", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: "rawval-acme"}}}}}
		for now := range tick.C {
			if now.After(time.UnixMilli((first + 2) * rlqsWindow.Milliseconds())) {
				return
			}
			if res := r.send(time.Second, req); res.Err == nil && res.Code == rlsv3.RateLimitResponse_OK {
				mu.Lock()
				rlsOK[now.UnixMilli()/rlqsWindow.Milliseconds()]++
				mu.Unlock()
			}
		}
	}()
	<-done
	untilWindow(first+2, 100*time.Millisecond)
	stop()
	checkWindows(t, fleet, first, 2, func(w int64) int {
		mu.Lock()
		defer mu.Unlock()
		return rlsOK[w]
	}, nil)
	mu.Lock()
	defer mu.Unlock()
	if rlsOK[first] == 0 {
		t.Errorf("RLS admitted nothing in window 1: the budget was not shared")
	}
}

// TestRLQSRedisPaused: while Redis is stopped (SIGSTOP) a rule with
// failure_mode closed assigns nothing (DENY_ALL), and one with
// failure_mode open lets every request through (ALLOW_ALL); once Redis
// answers again, both are assigned quotas, and the usage the proxies
// reported meanwhile has been charged (journalled, then replayed).
func TestRLQSRedisPaused(t *testing.T) {
	redis, cfg := withStandaloneRedis(t)
	r := startReplicas(t, 1, `domain: rlqs
descriptors:
  - key: closed
    rate_limit: {unit: hour, requests_per_unit: 100000, failure_mode: closed}
  - key: open
    rate_limit: {unit: hour, requests_per_unit: 100000, failure_mode: open}
`, cfg)[0]
	p := rlqstest.Run(t, rlqstest.Config{Domain: "rlqs", Targets: []string{r.grpcAddr}, Interval: time.Second})
	closed, open := map[string]string{"closed": "rawval-c"}, map[string]string{"open": "rawval-o"}
	want := func(what string, b map[string]string, ok func(a rlqstest.Assignment) bool) {
		t.Helper()
		polltest.Eventually(t, 15*time.Second, 20*time.Millisecond, what, func() error {
			p.Request(b) // keeps the bucket in use
			if a, found := p.Assignment(b); !found || !ok(a) {
				return fmt.Errorf("assignment %+v", a)
			}
			return nil
		})
	}
	quota := func(a rlqstest.Assignment) bool { return a.Strategy.GetTokenBucket() != nil }
	want("a quota before the pause", closed, quota)
	want("a quota before the pause", open, quota)
	redis.Pause()
	want("DENY_ALL while Redis is stopped (closed)", closed, func(a rlqstest.Assignment) bool {
		return a.Strategy.GetBlanketRule() == typev3.RateLimitStrategy_DENY_ALL
	})
	want("ALLOW_ALL while Redis is stopped (open)", open, func(a rlqstest.Assignment) bool {
		return a.Strategy.GetBlanketRule() == typev3.RateLimitStrategy_ALLOW_ALL
	})
	redis.Resume()
	want("a quota again after the pause", closed, quota)
	want("a quota again after the pause", open, quota)
	// Every request the proxy admitted on the open rule, during the pause
	// too, is charged once the journal has replayed.
	req := &rlsv3.RateLimitRequest{Domain: "rlqs", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "open", Value: "rawval-o"}}}}}
	polltest.Eventually(t, 15*time.Second, 100*time.Millisecond, "the paused usage charged", func() error {
		allowed, _ := p.Counts(open)
		res := r.send(time.Second, req)
		if res.Err != nil {
			return res.Err
		}
		// The RLS call takes 1; the proxy's last interval may not be
		// reported yet.
		if used := 100000 - int64(res.Remain) - 1; used < int64(allowed)-50 || used > int64(allowed) {
			return fmt.Errorf("the state counts %d used, the proxy admitted %d", used, allowed)
		}
		return nil
	})
}

// TestRLQSDemandShift: a proxy wanting half the limit stops and another
// starts wanting as much: within three reporting intervals (and the tick
// after) the newcomer is assigned at least 90 % of its max-min share, and
// the one that stopped holds no more than a proxy wanting little.
func TestRLQSDemandShift(t *testing.T) {
	r := startReplicas(t, 1, rlqsRules, replicaConfig{})[0]
	demands := make([]float64, 10)
	for i := range demands {
		demands[i] = 2
	}
	demands[0] = 100
	fleet, _, stop := startAligned(t, []string{r.grpcAddr}, demands)
	defer stop()
	bucket := map[string]string{"tenant": "rawval-acme"}
	// Settled, every demand is met and the rest of the limit's 200/s
	// (82/s) is spread over the ten: the heavy one's share is 108.2/s.
	share := func(i int) float64 {
		a, ok := fleet[i].p.Assignment(bucket)
		tb := a.Strategy.GetTokenBucket()
		if !ok || tb == nil || tb.GetFillInterval().GetSeconds() == 0 {
			return 0
		}
		return float64(tb.GetTokensPerFill().GetValue()) / float64(tb.GetFillInterval().GetSeconds())
	}
	const want = 0.9 * 108.2
	polltest.Eventually(t, 15*time.Second, 50*time.Millisecond, "the heavy proxy's share", func() error {
		if got := share(0); got < want {
			return fmt.Errorf("proxy 0 assigned %.1f/s, want at least %.1f", got, want)
		}
		return nil
	})
	fleet[0].rate.Store(math.Float64bits(0))
	fleet[1].rate.Store(math.Float64bits(100))
	shifted := time.Now()
	polltest.Eventually(t, 15*time.Second, 20*time.Millisecond, "the shares moved", func() error {
		if got := share(1); got < want {
			return fmt.Errorf("proxy 1 assigned %.1f/s, want at least %.1f", got, want)
		}
		// The stopped proxy keeps what every proxy gets of the rest.
		if got, small := share(0), share(2); got > small*1.1+1 {
			return fmt.Errorf("the stopped proxy still holds %.1f/s, a small one %.1f/s", got, small)
		}
		return nil
	})
	if took := time.Since(shifted); took > 4*time.Second {
		t.Errorf("the shares moved %v after the shift, want within 3 reporting intervals and a tick", took)
	}
}
