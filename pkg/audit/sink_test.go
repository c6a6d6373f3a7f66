package audit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/envoy-rls/envoy-rls/internal/metricstest"
)

// memWriter keeps what it is given; when gate is not nil, each Write first
// signals entered and then waits for gate.
type memWriter struct {
	mu      sync.Mutex
	records []Record
	fail    error
	entered chan struct{}
	gate    chan struct{}
	closed  bool
}

func (m *memWriter) Write(ctx context.Context, rs []Record) (int, error) {
	if m.gate != nil {
		m.entered <- struct{}{}
		<-m.gate
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return 0, m.fail
	}
	m.records = append(m.records, rs...)
	return len(rs), nil
}

func (m *memWriter) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	return nil
}

func (m *memWriter) got() []Record {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Record(nil), m.records...)
}

func newSink(t *testing.T, cfg Config) (*Sink, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Metrics = m
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s, reg
}

func event(policy string, n int) Event {
	return Event{
		Time:     time.Date(2026, 12, 1, 19, 0, 0, 123_000_000, time.UTC),
		Domain:   "edge",
		PolicyID: policy,
		Subject:  [32]byte{byte(n), 0xab},
		Cost:     1, Limit: 10, RetryAfter: 1500 * time.Millisecond,
		Outcome: OutcomeOverLimit,
	}
}

func TestSinkWritesEveryEventAndClosesTheWriter(t *testing.T) {
	w := &memWriter{}
	s, reg := newSink(t, Config{Writer: w, BatchSize: 3})
	for i := range 10 {
		s.Offer(event("p", i))
	}
	if err := s.Close(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	got := w.got()
	if len(got) != 10 || !w.closed {
		t.Fatalf("%d records, closed=%v; want 10, true", len(got), w.closed)
	}
	for i, r := range got { // queue order is kept
		if want := fmt.Sprintf("%02xab", i); !strings.HasPrefix(r.SubjectDigest, want) {
			t.Errorf("record %d: subject %s, want it to start with %s", i, r.SubjectDigest, want)
		}
	}
	if n := metricstest.Value(t, reg, "envoy_rls_audit_events_total"); n != 10 {
		t.Errorf("events_total %v, want 10", n)
	}
	// Closed: further events are dropped and counted.
	s.Offer(event("p", 0))
	if n := metricstest.Value(t, reg, "envoy_rls_audit_dropped_total", "reason", dropShutdown); n != 1 {
		t.Errorf("dropped{shutdown} %v, want 1", n)
	}
}

// TestSampling: the global rate applies unless the policy has its own.
func TestSampling(t *testing.T) {
	draws := []float64{0.05, 0.3, 0.7, 0.95}
	var mu sync.Mutex
	i := 0
	rnd := func() float64 {
		mu.Lock()
		defer mu.Unlock()
		v := draws[i%len(draws)]
		i++
		return v
	}
	w := &memWriter{}
	s, reg := newSink(t, Config{Writer: w, Sample: 0.5, PolicySample: map[string]float64{"all": 1, "rare": 0.1}, Rand: rnd})
	for _, p := range []string{"half", "all", "rare"} {
		for range 4 {
			s.Offer(event(p, 0))
		}
	}
	if err := s.Close(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	per := map[string]int{}
	for _, r := range w.got() {
		per[r.PolicyID]++
	}
	// Rate 0.5 keeps the draws 0.05 and 0.3; rate 1 keeps all without
	// drawing; rate 0.1 keeps 0.05 only.
	if per["half"] != 2 || per["all"] != 4 || per["rare"] != 1 {
		t.Errorf("kept %v, want half:2 all:4 rare:1", per)
	}
	if n := metricstest.Value(t, reg, "envoy_rls_audit_sampled_out_total"); n != 5 {
		t.Errorf("sampled_out %v, want 5", n)
	}
}

// TestQueueFullNeverBlocks: with the writer stuck, Offer still returns at
// once and counts what the full queue cannot take.
func TestQueueFullNeverBlocks(t *testing.T) {
	w := &memWriter{entered: make(chan struct{}, 1), gate: make(chan struct{})}
	s, reg := newSink(t, Config{Writer: w, QueueSize: 2, BatchSize: 1})
	s.Offer(event("p", 0))
	<-w.entered // the writer holds event 0 and is stuck
	for i := 1; i <= 7; i++ {
		s.Offer(event("p", i)) // returns: 2 queued, 5 dropped
	}
	if n := metricstest.Value(t, reg, "envoy_rls_audit_dropped_total", "reason", dropQueueFull); n != 5 {
		t.Errorf("dropped{queue_full} %v, want 5", n)
	}
	go func() {
		for range w.entered {
		}
	}()
	close(w.gate)
	if err := s.Close(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	close(w.entered)
	if got := len(w.got()); got != 3 {
		t.Errorf("%d written, want 3", got)
	}
}

// TestShutdownDropsWhatTheDrainCannotWrite: what is still queued when the
// drain time is over is counted as dropped, and every event is either
// written or counted.
func TestShutdownDropsWhatTheDrainCannotWrite(t *testing.T) {
	w := &memWriter{entered: make(chan struct{}, 1), gate: make(chan struct{})}
	s, reg := newSink(t, Config{Writer: w, QueueSize: 10, BatchSize: 1})
	s.Offer(event("p", 0))
	<-w.entered
	for i := 1; i <= 5; i++ {
		s.Offer(event("p", i))
	}
	done := make(chan error, 1)
	go func() { done <- s.Close(0) }()
	go func() {
		for range w.entered {
		}
	}()
	close(w.gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	close(w.entered)
	written := metricstest.Value(t, reg, "envoy_rls_audit_events_total")
	dropped := metricstest.Value(t, reg, "envoy_rls_audit_dropped_total", "reason", dropShutdown)
	if written+dropped != 6 || written < 1 {
		t.Errorf("written %v + dropped{shutdown} %v, want 6 with at least 1 written", written, dropped)
	}
}

func TestWriteFailuresAreCounted(t *testing.T) {
	w := &memWriter{fail: errors.New("disk full")}
	s, reg := newSink(t, Config{Writer: w})
	for i := range 4 {
		s.Offer(event("p", i))
	}
	if err := s.Close(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if n := metricstest.Value(t, reg, "envoy_rls_audit_dropped_total", "reason", dropWriteFailed); n != 4 {
		t.Errorf("dropped{write_failed} %v, want 4", n)
	}
	if n := metricstest.Value(t, reg, "envoy_rls_audit_events_total"); n != 0 {
		t.Errorf("written %v, want 0", n)
	}
}

func TestConfigRefusals(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no writer", Config{Metrics: m}, "Writer is required"},
		{"no metrics", Config{Writer: &memWriter{}}, "Metrics is required"},
		{"queue", Config{Writer: &memWriter{}, Metrics: m, QueueSize: maxQueueSize + 1}, "queue size"},
		{"sample", Config{Writer: &memWriter{}, Metrics: m, Sample: 1.5}, "sample"},
		{"policy sample", Config{Writer: &memWriter{}, Metrics: m, PolicySample: map[string]float64{"p": -1}}, `policy "p"`},
	} {
		if _, err := New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
}
