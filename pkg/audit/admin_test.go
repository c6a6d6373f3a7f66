package audit

import (
	"encoding/json"
	"testing"
	"time"
)

// TestAdminRecord: an admin record is written with its own fields as a
// JSON line and as stream fields, with no denial field; OfferAdmin ignores
// an event without Admin.
func TestAdminRecord(t *testing.T) {
	done := true
	e := Event{Time: time.Unix(0, 0), Domain: "edge", Admin: &Admin{Action: "counters-reset", Token: "ops", Client: "192.0.2.1:5000",
		Status: 200, Policies: []string{"edge/a", "edge/b"}, Descriptors: 1, Matched: 1, Deleted: 2, Scanned: 9, Skipped: 1, Complete: &done}}
	r := e.Record()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back["kind"] != "admin" || back["action"] != "counters-reset" || back["token"] != "ops" || back["client"] != "192.0.2.1:5000" ||
		back["deleted"] != 2.0 || back["skipped"] != 1.0 || back["complete"] != true || back["time"] != "1970-01-01T00:00:00.000Z" {
		t.Fatalf("JSON %s", b)
	}
	if _, ok := back["subject_digest"]; ok {
		t.Fatalf("an admin record with a subject: %s", b)
	}
	got := map[string]string{}
	for _, f := range r.fields() {
		got[f[0]] = f[1]
	}
	if got["kind"] != "admin" || got["policies"] != "edge/a,edge/b" || got["status"] != "200" || got["scanned"] != "9" || got["skipped"] != "1" ||
		got["complete"] != "true" {
		t.Fatalf("fields %v", got)
	}
	w := &memWriter{}
	s, _ := newSink(t, Config{Writer: w, Sample: 0.5, Rand: func() float64 { return 0.9 }})
	s.OfferAdmin(Event{Domain: "edge"})
	s.OfferAdmin(e) // never sampled out
	if err := s.Close(time.Second); err != nil {
		t.Fatal(err)
	}
	if recs := w.got(); len(recs) != 1 || recs[0].Kind != KindAdmin || len(s.Recent(10)) != 0 {
		t.Fatalf("written %+v", recs)
	}
}
