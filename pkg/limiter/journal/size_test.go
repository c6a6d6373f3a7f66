package journal

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// A full journal keeps at most MaxBytesPerEntry of heap per entry, filled
// through Evaluate with the store failing every charge; the heap is read
// after a collection. The file Stop writes for it is reported too.
func TestFullJournalHeap(t *testing.T) {
	n := DefaultMaxEntries
	if testing.Short() {
		n = 20_000
	}
	f := newFaulty(t, limitertest.NewClock(t0))
	f.set(outUnavailable)
	p := meter(t, "tenant.tokens")
	file := filepath.Join(t.TempDir(), "journal")
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	j := newJournal(t, f, Config{MaxEntries: n, File: file})
	batch := []limiter.Request{{Policy: p, Cost: 100}}
	out := make([]limiter.Outcome, 1)
	for i := range n {
		batch[0].Subject[0], batch[0].Subject[1], batch[0].Subject[2] = byte(i), byte(i>>8), byte(i>>16)
		j.Evaluate(context.Background(), batch, out)
	}
	f.mu.Lock()
	f.sent = nil // the fake's record of requests is not the journal's
	f.mu.Unlock()
	runtime.GC()
	runtime.ReadMemStats(&after)
	if j.Len() != n {
		t.Fatalf("held %d, want %d", j.Len(), n)
	}
	perEntry := float64(after.HeapInuse-before.HeapInuse) / float64(n)
	if _, _, err := j.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d entries: %.1f bytes/entry of heap; file %d bytes (%.1f/entry, policy ID of %d bytes)",
		n, perEntry, st.Size(), float64(st.Size())/float64(n), len(p.ID()))
	if perEntry > MaxBytesPerEntry {
		t.Errorf("%.1f bytes/entry, above MaxBytesPerEntry %d", perEntry, MaxBytesPerEntry)
	}
	runtime.KeepAlive(j)
}

// TestMetrics: the Prometheus observer's series, every one from the start,
// labelled by kind and reason only.
func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	f := newFaulty(t, limitertest.NewClock(t0))
	j := newJournal(t, f, Config{Observer: m, MaxEntries: 2})
	p := meter(t, "m")
	f.set(outUnavailable)
	for range 3 {
		eval(j, limiter.Request{Policy: p, Subject: subject("s"), Cost: 1})
	}
	f.set(limiter.Outcome{})
	j.replayOnce(context.Background())
	got := limitertest.Exposition(t, reg)
	for _, want := range []string{
		`envoy_rls_journal_entries 0`,
		`envoy_rls_journal_journalled_total{kind="charge"} 2`,
		`envoy_rls_journal_journalled_total{kind="release"} 0`,
		`envoy_rls_journal_journalled_total{kind="settle"} 0`,
		`envoy_rls_journal_dropped_total{kind="settle",reason="full"} 0`,
		`envoy_rls_journal_replayed_total{kind="charge"} 2`,
		`envoy_rls_journal_dropped_total{kind="charge",reason="full"} 1`,
		`envoy_rls_journal_dropped_total{kind="release",reason="policy_gone"} 0`,
	} {
		if !strings.Contains(got, want+"\n") {
			t.Errorf("no %q in\n%s", want, got)
		}
	}
}

// BenchmarkEvaluate: what the journal adds to a call the store answers (a
// charge and a rate limit in one batch), against the store alone.
func BenchmarkEvaluate(b *testing.B) {
	f := newFaulty(b, limitertest.NewClock(t0))
	j := newJournal(b, f.inner, Config{})
	batch := []limiter.Request{{Policy: meter(b, "m"), Subject: subject("s"), Cost: 1}, {Policy: rate(b, "r"), Subject: subject("s"), Cost: 1}}
	for _, s := range []struct {
		name  string
		store limiter.Store
	}{{"store", f.inner}, {"journal", j}} {
		b.Run(s.name, func(b *testing.B) {
			out := make([]limiter.Outcome, len(batch))
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				s.store.Evaluate(ctx, batch, out)
			}
		})
	}
}
