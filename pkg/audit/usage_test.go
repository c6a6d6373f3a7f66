package audit

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/metricstest"
)

// TestUsageRecordsOnAFile: usage records go through the same queue to a
// JSON lines file, as kind "usage" with the totals and no denial field,
// next to denial records of kind "denial".
func TestUsageRecordsOnAFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	s, reg := newSink(t, Config{Writer: NewJSONLines(f, true)})
	at := time.Date(2026, 12, 1, 19, 5, 0, 0, time.UTC)
	s.offerUsage(Event{Time: at, Domain: "edge", PolicyID: "edge/user", Usage: &usage{Key: "user", Since: at.Add(-5 * time.Minute),
		Hits: 12, Decisions: 10, Denials: 3, ShadowDenials: 1, DistinctSubjects: 4}})
	s.Offer(event("edge/user", 1))
	s.offerUsage(Event{Time: at}) // no Usage: ignored
	if err := s.Close(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := decodeLines(t, b)
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2:\n%s", len(lines), b)
	}
	want := map[string]any{"kind": "usage", "time": "2026-12-01T19:05:00.000Z", "domain": "edge", "policy_id": "edge/user",
		"usage": map[string]any{"key": "user", "since": "2026-12-01T19:00:00.000Z", "hits": 12.0, "decisions": 10.0,
			"denials": 3.0, "shadow_denials": 1.0, "distinct_subjects": 4.0}}
	if fmt.Sprint(lines[0]) != fmt.Sprint(want) {
		t.Errorf("usage line\n got %v\nwant %v", lines[0], want)
	}
	if lines[1]["kind"] != "denial" || lines[1]["usage"] != nil {
		t.Errorf("denial line %v", lines[1])
	}
	if n := metricstest.Value(t, reg, "envoy_rls_audit_events_total"); n != 2 {
		t.Errorf("events_total %v, want 2", n)
	}
}

// TestUsageRecordReservations: a reserving policy's usage record carries
// reserved and used next to hits, in JSON and in the stream fields; a
// policy that has not reserved has neither.
func TestUsageRecordReservations(t *testing.T) {
	at := time.Date(2026, 12, 1, 19, 5, 0, 0, time.UTC)
	for _, tc := range []struct {
		name           string
		reserved, used int64
		want           string
	}{
		{"reserving", 1500, 1000, `"distinct_subjects":2,"reserved":1500,"used":1000}`},
		{"nothing settled yet", 500, 0, `"distinct_subjects":2,"reserved":500,"used":0}`},
		{"not reserving", 0, 0, `"distinct_subjects":2}`},
	} {
		e := Event{Time: at, Domain: "ai", PolicyID: "ai/tenant", Usage: &usage{Key: "tenant", Since: at, Hits: 2000, Decisions: 4,
			DistinctSubjects: 2, Reserved: tc.reserved, Used: tc.used}}
		r := e.Record()
		b, err := r.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(string(b), tc.want+"}") || !strings.Contains(string(b), `"hits":2000`) {
			t.Errorf("%s: %s, want usage ending %s", tc.name, b, tc.want)
		}
		got := map[string]string{}
		for _, f := range r.fields() {
			got[f[0]] = f[1]
		}
		if _, has := got["reserved"]; has != (tc.want != `"distinct_subjects":2}`) ||
			has && (got["reserved"] != fmt.Sprint(tc.reserved) || got["used"] != fmt.Sprint(tc.used)) {
			t.Errorf("%s: stream fields %v", tc.name, got)
		}
	}
}

// TestUsageStreamFields: a usage record's stream fields carry the kind
// and the totals, not the denial fields.
func TestUsageStreamFields(t *testing.T) {
	e := Event{Time: time.Unix(0, 0), Domain: "d", PolicyID: "d/k", Usage: &usage{Key: "k", Hits: 7, DistinctSubjects: 2}}
	r := e.Record()
	got := map[string]string{}
	for _, f := range r.fields() {
		got[f[0]] = f[1]
	}
	if got["kind"] != "usage" || got["hits"] != "7" || got["distinct_subjects"] != "2" || got["key"] != "k" {
		t.Errorf("fields %v", got)
	}
	if _, ok := got["subject_digest"]; ok {
		t.Errorf("a usage record has a subject: %v", got)
	}
	d := event("p", 1)
	if r := d.Record(); r.fields()[0] != [2]string{"kind", "denial"} {
		t.Errorf("denial fields start with %v", r.fields()[0])
	}
}

// TestRecentDenials: Recent returns the last denials kept by sampling,
// newest first, bounded by RecentSize, those dropped by a full queue too;
// usage records are not among them.
func TestRecentDenials(t *testing.T) {
	w := &memWriter{entered: make(chan struct{}, 1), gate: make(chan struct{})}
	s, _ := newSink(t, Config{Writer: w, QueueSize: 1, RecentSize: 3, Sample: 0.5, Rand: func() float64 { return 0.1 },
		PolicySample: map[string]float64{"never": 0.05}})
	if got := s.Recent(10); len(got) != 0 {
		t.Fatalf("empty sink: %d records", len(got))
	}
	for i := range 5 {
		s.Offer(event("p", i))
	}
	s.Offer(event("never", 9)) // sampled out
	s.offerUsage(Event{Domain: "edge", PolicyID: "p", Usage: &usage{}})
	got := s.Recent(10)
	if len(got) != 3 || s.RecentSize() != 3 {
		t.Fatalf("%d records (size %d), want 3", len(got), s.RecentSize())
	}
	for i, r := range got {
		if want := fmt.Sprintf("%02xab", 4-i); !strings.HasPrefix(r.SubjectDigest, want) || r.Kind != kindDenial {
			t.Errorf("record %d: %s %s, want subject %s…", i, r.Kind, r.SubjectDigest, want)
		}
	}
	if got := s.Recent(1); len(got) != 1 || !strings.HasPrefix(got[0].SubjectDigest, "04ab") {
		t.Errorf("Recent(1) = %v", got)
	}
	<-w.entered
	close(w.gate)
	if err := s.Close(5 * time.Second); err != nil {
		t.Fatal(err)
	}
}
