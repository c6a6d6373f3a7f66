package admin

import (
	"net/http"
	"strconv"

	"github.com/envoy-rls/envoy-rls/pkg/rlqs"
)

// Bounds of GET /v1/rlqs.
const (
	defaultRLQSAggregates = 100
	maxRLQSAggregates     = 1000
)

// rlqsAnswer is GET /v1/rlqs's answer: the RLQS streams open on this
// replica and the aggregates it divides, the most subscribed first.
type rlqsAnswer struct {
	Enabled    bool                 `json:"enabled"`
	Streams    int                  `json:"streams"`
	Aggregates []rlqs.AggregateInfo `json:"aggregates"`
}

// handleRLQS serves GET /v1/rlqs[?limit=N].
func (s *Server) handleRLQS(w http.ResponseWriter, r *http.Request) {
	n := defaultRLQSAggregates
	if v := r.URL.Query().Get("limit"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 || n > maxRLQSAggregates {
			writeAPIError(w, http.StatusBadRequest, "limit must be an integer between 1 and "+strconv.Itoa(maxRLQSAggregates))
			return
		}
	}
	ans := rlqsAnswer{Aggregates: []rlqs.AggregateInfo{}}
	if s.cfg.Quota != nil {
		ans.Enabled = true
		if aggs, streams := s.cfg.Quota.Aggregates(n); aggs != nil {
			ans.Aggregates, ans.Streams = aggs, streams
		} else {
			ans.Streams = streams
		}
	}
	writeJSON(w, http.StatusOK, ans)
}
