package rlqs

import (
	"context"
	"net"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"

	"github.com/envoy-rls/envoy-rls/internal/rlqstest"
)

// fleetRules: a tenant's limit of 6000 a minute (100/s).
const fleetRules = `
domain: app
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 6000}
`

// fleet is simulated proxies against a Service on one fake clock: each
// step of 100 ms the proxies send their demand, every second they report
// (half a second after the service's tick, as unsynchronised clocks
// would) and the service ticks.
type fleet struct {
	t       *testing.T
	h       *harness
	proxies []*rlqstest.Proxy
	demands []float64 // requests per second
	owed    []float64
	bucket  map[string]string
	step    int
	// admitted[i][w] counts proxy i's admissions in window w.
	admitted []map[int64]int
}

func newFleet(t *testing.T, h *harness, demands []float64) *fleet {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	rlqsv3.RegisterRateLimitQuotaServiceServer(gs, h.svc)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	f := &fleet{t: t, h: h, demands: demands, owed: make([]float64, len(demands)), bucket: map[string]string{"tenant": "rawval-acme"}}
	for range demands {
		p := rlqstest.Run(t, rlqstest.Config{Domain: "app", Targets: []string{lis.Addr().String()}, Interval: time.Hour, Clock: h.clock})
		f.proxies = append(f.proxies, p)
		f.admitted = append(f.admitted, make(map[int64]int))
	}
	return f
}

// run advances the fleet by d, in steps of 100 ms.
func (f *fleet) run(d time.Duration, window time.Duration) {
	for range int(d / (100 * time.Millisecond)) {
		f.h.clock.Advance(100 * time.Millisecond)
		now := f.h.clock.Now()
		for i, p := range f.proxies {
			f.owed[i] += f.demands[i] / 10
			for ; f.owed[i] >= 1; f.owed[i]-- {
				if p.Request(f.bucket) {
					f.admitted[i][now.UnixMilli()/window.Milliseconds()]++
				}
			}
		}
		f.step++
		switch f.step % 10 {
		case 5:
			f.report()
		case 0:
			f.h.svc.Tick(context.Background())
			f.delivered()
		}
	}
}

// report has every proxy report, and waits until the service has them.
func (f *fleet) report() {
	f.h.svc.mu.Lock()
	want := f.h.svc.reports
	f.h.svc.mu.Unlock()
	for _, p := range f.proxies {
		want += uint64(p.Stats().Buckets)
		p.Tick()
	}
	f.waitFor("reports", func() bool {
		f.h.svc.mu.Lock()
		defer f.h.svc.mu.Unlock()
		return f.h.svc.reports >= want
	})
}

// delivered waits until every action the service sent has reached its
// proxy.
func (f *fleet) delivered() {
	f.waitFor("actions", func() bool {
		f.h.svc.mu.Lock()
		sent := 0
		for st := range f.h.svc.streams {
			st.mu.Lock()
			sent += st.sent
			if len(st.pending) > 0 {
				sent = -1 << 30
			}
			st.mu.Unlock()
		}
		f.h.svc.mu.Unlock()
		got := 0
		for _, p := range f.proxies {
			s := p.Stats()
			got += s.Assignments + s.Abandons + s.Ignored
		}
		return got == sent
	})
}

func (f *fleet) waitFor(what string, cond func() bool) {
	f.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			f.t.Fatalf("step %d: %s not delivered within 5s", f.step, what)
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// inWindows sums proxy i's admissions in windows [from, to).
func (f *fleet) inWindows(i int, from, to int64) int {
	n := 0
	for w := from; w < to; w++ {
		n += f.admitted[i][w]
	}
	return n
}

// TestFleetShareSkewedDemand: ten proxies, one wanting ten times each of
// the others, together three times a limit of 6000 a minute: after two
// reporting intervals every minute admits the limit within 5 %, and every
// proxy at least 90 % of min(its demand, its fair share).
func TestFleetShareSkewedDemand(t *testing.T) {
	h := newHarness(t, fleetRules, Config{})
	const n, limit = 10, 6000
	demands := make([]float64, n)
	for i := range demands {
		demands[i] = 3 * 100.0 / 19
	}
	demands[0] = 10 * 3 * 100.0 / 19
	f := newFleet(t, h, demands)
	f.run(2*time.Second, time.Minute)
	first := h.clock.Now().Add(time.Minute-time.Nanosecond).UnixMilli() / time.Minute.Milliseconds()
	f.run(time.UnixMilli(first*time.Minute.Milliseconds()).Sub(h.clock.Now()), time.Minute)
	const windows = 3
	f.run(windows*time.Minute, time.Minute)
	fair := float64(limit) / 60 / n
	for w := first; w < first+windows; w++ {
		sum := 0
		for i := range f.proxies {
			sum += f.inWindows(i, w, w+1)
		}
		t.Logf("minute %d: %d admitted", w-first+1, sum)
		if d := float64(sum-limit) / limit; d > 0.05 || d < -0.05 {
			t.Errorf("minute %d admitted %d, want %d within 5%%", w-first+1, sum, limit)
		}
	}
	for i := range f.proxies {
		rate := float64(f.inWindows(i, first, first+windows)) / (windows * 60)
		t.Logf("proxy %d: demand %.2f/s, admitted %.2f/s", i, demands[i], rate)
		if want := 0.9 * min(demands[i], fair); rate < want {
			t.Errorf("proxy %d admitted %.2f/s, want at least %.2f", i, rate, want)
		}
	}
}

// TestFleetDemandShift: a proxy wanting the whole limit stops and another
// starts: within three reporting intervals the newcomer is assigned at
// least 90 % of its max-min share (the limit less what the small proxies
// want), and the one that stopped no more than the others.
func TestFleetDemandShift(t *testing.T) {
	h := newHarness(t, fleetRules, Config{})
	demands := make([]float64, 10)
	for i := range demands {
		demands[i] = 2
	}
	demands[0] = 100
	f := newFleet(t, h, demands)
	f.run(10*time.Second, time.Minute)
	if r := f.rate(0); r < 0.9*(100-9*2) {
		t.Fatalf("before the shift: proxy 0 assigned %.2f/s, want at least 90%% of %.2f", r, 100-9*2.0)
	}
	f.demands[0], f.demands[1] = 0, 100
	f.run(3*time.Second, time.Minute)
	want := 0.9 * (100 - 8*2)
	if r := f.rate(1); r < want {
		t.Errorf("3 intervals after the shift: proxy 1 assigned %.2f/s, want at least %.2f", r, want)
	}
	if r0, r2 := f.rate(0), f.rate(2); r0 > r2+0.1 {
		t.Errorf("3 intervals after the shift: proxy 0 (stopped) assigned %.2f/s, more than a small proxy's %.2f", r0, r2)
	}
}

// rate is the rate (requests a second) of proxy i's assignment.
func (f *fleet) rate(i int) float64 {
	a, ok := f.proxies[i].Assignment(f.bucket)
	if !ok {
		f.t.Fatalf("proxy %d has no assignment", i)
	}
	return float64(strategyRate(a.Strategy)) / 1000
}

// TestFleetWindowCatchUp: a window whose proxies wanted little until its
// last seconds, then ten times the limit: the budget left is spread over
// the time left, and the window still admits the limit within 2 %: the
// usage the proxies admitted since their last report counts as used, and
// what they admitted at the window's high rate before the next one began
// is not charged to the next one.
func TestFleetWindowCatchUp(t *testing.T) {
	h := newHarness(t, fleetRules, Config{})
	const n, limit = 10, 6000
	demands := make([]float64, n)
	for i := range demands {
		demands[i] = 30
	}
	f := newFleet(t, h, demands)
	f.run(2*time.Second, time.Minute)
	first := h.clock.Now().Add(time.Minute-time.Nanosecond).UnixMilli() / time.Minute.Milliseconds()
	f.run(time.UnixMilli(first*time.Minute.Milliseconds()).Sub(h.clock.Now()), time.Minute)
	for w := range int64(2) {
		f.run(10*time.Second, time.Minute)
		for i := range f.demands {
			f.demands[i] = 1
		}
		f.run(45*time.Second, time.Minute)
		for i := range f.demands {
			f.demands[i] = 100
		}
		f.run(5*time.Second, time.Minute)
		sum := 0
		for i := range f.proxies {
			sum += f.inWindows(i, first+w, first+w+1)
		}
		t.Logf("minute %d: %d admitted", w+1, sum)
		if d := float64(sum-limit) / limit; d > 0.02 || d < -0.02 {
			t.Errorf("minute %d admitted %d, want %d within 2%%", w+1, sum, limit)
		}
	}
}
