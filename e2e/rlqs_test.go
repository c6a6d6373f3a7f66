package e2e_test

import (
	"context"
	"sync"
	"testing"
	"time"

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
	demand float64 // requests per second it is asked for
	mu     sync.Mutex
	// admitted counts the requests it admitted per window index
	// (UnixMilli / window).
	admitted map[int64]int
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
		p, err := rlqstest.New(rlqstest.Config{Domain: "rlqs", Targets: order, Interval: interval})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		p.Start(ctx)
		t.Cleanup(func() {
			cancel()
			p.Stop()
		})
		fp := &fleetProxy{p: p, demand: d, admitted: make(map[int64]int)}
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
	start, sent := time.Now(), 0
	for {
		select {
		case <-stop:
			return
		case now := <-tick.C:
			for due := int(now.Sub(start).Seconds() * fp.demand); sent < due; sent++ {
				if fp.p.Request(bucket) {
					fp.mu.Lock()
					fp.admitted[now.UnixMilli()/rlqsWindow.Milliseconds()]++
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

// checkFleet runs ten proxies against targets, one wanting ten times each
// of the others, together three times the limit, and checks, over the
// whole windows that start two reporting intervals after the start: each
// window admits the limit within 5 %, and each proxy at least 90 % of
// min(its demand, its fair share).
func checkFleet(t *testing.T, targets []string) {
	const n, interval = 10, time.Second
	total := 3 * float64(rlqsLimit) / rlqsWindow.Seconds()
	demands := make([]float64, n)
	for i := range demands {
		demands[i] = total / 19 // nine of these and one of ten: 19 shares
	}
	demands[0] = 10 * total / 19
	// Start just after a window begins: the proxies' first requests,
	// admitted before any assignment (Envoy's default), are charged to
	// that window, and the next ones, which start more than two reporting
	// intervals later, are measured.
	win := rlqsWindow.Milliseconds()
	time.Sleep(time.Until(time.UnixMilli((time.Now().UnixMilli()/win + 1) * win).Add(50 * time.Millisecond)))
	stop := make(chan struct{})
	first := time.Now().UnixMilli()/win + 1
	fleet := runFleet(t, targets, demands, interval, map[string]string{"tenant": "rawval-acme"}, stop)
	const windows = 2
	time.Sleep(time.Until(time.UnixMilli((first + windows) * win).Add(100 * time.Millisecond)))
	close(stop)

	fair := float64(rlqsLimit) / rlqsWindow.Seconds() / n // every demand is above it
	for w := first; w < first+windows; w++ {
		sum := 0
		for _, fp := range fleet {
			sum += fp.inWindows(w, w+1)
		}
		t.Logf("window %d: %d admitted of a limit of %d", w-first+1, sum, rlqsLimit)
		if d := float64(sum-rlqsLimit) / rlqsLimit; d > 0.05 || d < -0.05 {
			t.Errorf("window %d admitted %d, want %d within 5%%", w-first+1, sum, rlqsLimit)
		}
	}
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
	r := startReplicas(t, 1, rlqsRules, replicaConfig{})[0]
	checkFleet(t, []string{r.grpcAddr})
	if got := r.metric(`envoy_rls_rlqs_streams`); got != 10 {
		t.Errorf("rlqs_streams %v, want 10", got)
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
