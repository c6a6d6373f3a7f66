package metricstest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestValue: Value reads the counter whose labels hold every pair asked,
// and a gauge; with no labels asked, the family's first sample.
func TestValue(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "c_total", Help: "c"}, []string{"a", "b"})
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "g", Help: "g"})
	reg.MustRegister(c, g)
	c.WithLabelValues("x", "1").Add(2)
	c.WithLabelValues("x", "2").Add(5)
	g.Set(7)
	for _, tc := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"c_total", []string{"a", "x", "b", "2"}, 5},
		{"c_total", []string{"b", "1"}, 2},
		{"c_total", nil, 2},
		{"g", nil, 7},
	} {
		if got := Value(t, reg, tc.name, tc.labels...); got != tc.want {
			t.Errorf("%s%v = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}
	if m := Sample(t, reg, "c_total", "a", "x", "b", "2"); m.GetCounter().GetValue() != 5 {
		t.Errorf("Sample: %v", m)
	}
}
