package app

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/observe"
	"github.com/envoy-rls/envoy-rls/pkg/audit"
)

// DefaultDenialsN is the number of denials /v1/denials answers without n.
const DefaultDenialsN = 20

// startUsageRecords writes a usage record per tracked policy to sink every
// --audit-usage-interval (nothing when 0); it returns the function that
// stops the writer, waits for it and queues a last record per policy (the
// totals up to the shutdown), to call before the sink closes.
func (s *server) startUsageRecords(sink *audit.Sink) func() {
	d := s.opts.AuditUsageInterval
	if d <= 0 || s.top == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		every(ctx, d, func(now time.Time) { observe.OfferUsage(sink, s.top, now) })
	}()
	return func() {
		cancel()
		<-done
		observe.OfferUsage(sink, s.top, time.Now())
	}
}

// denialsAnswer is /v1/denials' answer.
type denialsAnswer struct {
	// Sink is the --audit-sink in use, or "off": then Denials is empty.
	Sink    string         `json:"sink"`
	Denials []audit.Record `json:"denials"`
	// Kept is the most denials this process keeps for this view.
	Kept int `json:"kept"`
}

// handleDenials answers GET /v1/denials?n=N: the last denial events kept
// by the audit sink's sampling, newest first.
func (s *server) handleDenials(w http.ResponseWriter, r *http.Request) {
	ans := denialsAnswer{Sink: "off", Denials: []audit.Record{}}
	if s.audit == nil {
		writeAPIJSON(w, http.StatusOK, ans)
		return
	}
	ans.Sink, ans.Kept = s.opts.AuditSink, s.audit.RecentSize()
	n := DefaultDenialsN
	if v := r.URL.Query().Get("n"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 || n > ans.Kept {
			writeAPIError(w, http.StatusBadRequest, fmt.Sprintf("n must be an integer from 1 to %d", ans.Kept))
			return
		}
	}
	ans.Denials = s.audit.Recent(n)
	writeAPIJSON(w, http.StatusOK, ans)
}
