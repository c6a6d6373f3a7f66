package refmetrics

import (
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"

	"github.com/envoy-rls/envoy-rls/internal/metricstest"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
)

func newSink(t *testing.T, m *Mapper) (*Sink, *prometheus.CounterVec) {
	t.Helper()
	if m == nil {
		var err error
		if m, err = defaultMapper(); err != nil {
			t.Fatal(err)
		}
	}
	dropped := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dropped_total", Help: "d"}, []string{"reason"})
	s, err := New(Config{Mapper: m, Dropped: dropped})
	if err != nil {
		t.Fatal(err)
	}
	return s, dropped
}

// allowed is an allowed hit of a limit of 10 that leaves remaining.
func allowed(key string, remaining int64) rls.LimitObservation {
	return rls.LimitObservation{Rule: &descriptors.Rule{StatKey: key}, Hits: 1, Decided: true, Consumed: true, Limit: 10, Remaining: remaining}
}

// TestSinkSeries: calls through a two-level rule and a four-level rule,
// a denial, a store failure, rule loads; the scrape shows the reference's
// names, labels and counts.
func TestSinkSeries(t *testing.T) {
	s, _ := newSink(t, nil)
	for r := int64(9); r >= 0; r-- {
		s.ObserveLimit(allowed("ai.tenant", r))
	}
	s.ObserveLimit(rls.LimitObservation{Rule: &descriptors.Rule{StatKey: "ai.tenant"}, Hits: 3, Over: true, Decided: true, Limit: 10})
	s.ObserveLimit(allowed("ai.tenant_acme.user.plan_gold", 5))
	s.ObserveLimit(rls.LimitObservation{Rule: &descriptors.Rule{StatKey: "ai.tenant"}, Hits: 0}) // a probe
	s.ObserveCall(rls.CallObservation{Code: codes.OK, Duration: 3 * time.Millisecond})
	s.ObserveCall(rls.CallObservation{Code: codes.OK, Duration: time.Millisecond, StoreFailed: true})
	s.ObserveCall(rls.CallObservation{Code: codes.InvalidArgument, Duration: time.Millisecond})
	s.ConfigLoad(true)
	s.ConfigLoad(false)
	s.ConfigLoad(true)

	got := scrape(t, s.Gatherer())
	for series, want := range map[string]float64{
		`ratelimit_service_config_load_error`:                                                   1,
		`ratelimit_service_config_load_success`:                                                 2,
		`ratelimit_service_rate_limit_near_limit{domain="ai",key1="tenant"}`:                    2,
		`ratelimit_service_rate_limit_over_limit{domain="ai",key1="tenant"}`:                    3,
		`ratelimit_service_rate_limit_total_hits{domain="ai",key1="tenant"}`:                    13,
		`ratelimit_service_rate_limit_total_hits{domain="ai",key1="tenant_acme",key2="user"}`:   1,
		`ratelimit_service_rate_limit_within_limit{domain="ai",key1="tenant"}`:                  10,
		`ratelimit_service_rate_limit_within_limit{domain="ai",key1="tenant_acme",key2="user"}`: 1,
		`ratelimit_service_should_rate_limit_error{err_type="redis_error"}`:                     1,
		`ratelimit_service_should_rate_limit_error{err_type="service_error"}`:                   1,
		`ratelimit_service_total_requests{grpc_method="ShouldRateLimit"}`:                       3,
		`ratelimit_service_response_time_seconds_count{grpc_method="ShouldRateLimit"}`:          3,
	} {
		if got[series] != want {
			t.Errorf("%s = %v, want %v", series, got[series], want)
		}
	}
	// The response time: a histogram of the three calls, in seconds.
	h := metricstest.Sample(t, s.Gatherer(), "ratelimit_service_response_time_seconds").GetHistogram()
	if h.GetSampleCount() != 3 || h.GetSampleSum() < 0.004 || h.GetSampleSum() > 0.006 {
		t.Errorf("response time: %d samples, sum %v s; want 3 and 0.005", h.GetSampleCount(), h.GetSampleSum())
	}
}

// TestSinkBounds: past MaxStatKeys rules the hits go to the overflow stat;
// past MaxSeries a series is not made and the drop is counted.
func TestSinkBounds(t *testing.T) {
	s, dropped := newSink(t, nil)
	for i := range MaxStatKeys + 10 {
		s.ObserveLimit(allowed("d.k"+strconv.Itoa(i), 9))
	}
	if n := counterValue(t, dropped.WithLabelValues(DropSeriesLimit)); n == 0 {
		t.Error("no series_limit drop counted")
	}
	if got := len(s.series); got > MaxSeries {
		t.Errorf("%d series, want at most %d", got, MaxSeries)
	}
	// The overflow stat is a series too: the limit is reached, so it is
	// dropped as well; the rules stay bounded.
	if len(s.rules) > MaxStatKeys {
		t.Errorf("%d rules tracked, want at most %d", len(s.rules), MaxStatKeys)
	}
}

// TestSinkConflicts: a mapping that sends a counter and a timer to one
// name keeps the first and counts the other as a type conflict; a name
// made invalid by a substitution is counted as invalid.
func TestSinkConflicts(t *testing.T) {
	m, err := ParseMapping(strings.NewReader(`mappings:
  - {match: "ratelimit_server.*.*", name: "ratelimit_calls", labels: {what: "$2"}}
  - {match: "ratelimit.service.rate_limit.*.*.*", name: "rl_$2_$3"}
`))
	if err != nil {
		t.Fatal(err)
	}
	s, dropped := newSink(t, m)
	s.ObserveCall(rls.CallObservation{Code: codes.OK})
	s.ObserveLimit(allowed("ai.tenant/x", 9))
	if n := counterValue(t, dropped.WithLabelValues(DropTypeConflict)); n != 1 {
		t.Errorf("type conflicts %v, want 1 (the response time)", n)
	}
	if n := counterValue(t, dropped.WithLabelValues(DropInvalidName)); n != 2 {
		t.Errorf("invalid names %v, want 2 (total_hits and within_limit of tenant/x)", n)
	}
	got := scrape(t, s.Gatherer())
	if got[`ratelimit_calls{what="total_requests"}`] != 1 {
		t.Errorf("series %v, want ratelimit_calls{what=\"total_requests\"} 1", got)
	}
	for series := range got {
		if strings.HasPrefix(series, "rl_") || strings.Contains(series, "response_time") {
			t.Errorf("series %s exported", series)
		}
	}
}

// scrape gathers g into one value per series, keyed name{k="v",...};
// histograms give their _count and _sum.
func scrape(t *testing.T, g prometheus.Gatherer) map[string]float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			lt := labelText(labels)
			switch {
			case m.GetCounter() != nil:
				out[mf.GetName()+lt] = m.GetCounter().GetValue()
			case m.GetHistogram() != nil:
				out[mf.GetName()+"_count"+lt] = float64(m.GetHistogram().GetSampleCount())
				out[mf.GetName()+"_sum"+lt] = m.GetHistogram().GetSampleSum()
			}
		}
	}
	return out
}

// counterValue reads one counter.
func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	for _, v := range scrape(t, reg) {
		return v
	}
	return 0
}

// TestSinkConcurrent: observations from many goroutines over rules seen
// for the first time at once are all counted.
func TestSinkConcurrent(t *testing.T) {
	s, _ := newSink(t, nil)
	const workers, perWorker, keys = 8, 500, 20
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				s.ObserveLimit(allowed("d.k"+strconv.Itoa((w+i)%keys), 9))
				s.ObserveCall(rls.CallObservation{Code: codes.OK})
			}
		})
	}
	wg.Wait()
	got := scrape(t, s.Gatherer())
	total := 0.0
	for k := range keys {
		total += got[`ratelimit_service_rate_limit_total_hits{domain="d",key1="k`+strconv.Itoa(k)+`"}`]
	}
	if total != workers*perWorker || got[`ratelimit_service_total_requests{grpc_method="ShouldRateLimit"}`] != workers*perWorker {
		t.Errorf("total_hits %v, total_requests %v; want %d each", total, got[`ratelimit_service_total_requests{grpc_method="ShouldRateLimit"}`], workers*perWorker)
	}
}
