package admin

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/rlqs"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
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

// rlqsExplainRequest is the body of POST /v1/rlqs/explain: a domain and
// RLQS buckets (Envoy's bucket_id maps).
type rlqsExplainRequest struct {
	Domain  string              `json:"domain"`
	Buckets []map[string]string `json:"buckets"`
}

// handleRLQSExplain serves POST /v1/rlqs/explain: each bucket explained
// as the descriptor of its entries in the order the rule tree names them
// (descriptors.Snapshot.MatchBucket), with the state of its limits.
func (s *Server) handleRLQSExplain(w http.ResponseWriter, r *http.Request) {
	var req rlqsExplainRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxExplainBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeAPIError(w, http.StatusBadRequest, `the body must be {"domain":"…","buckets":[{"key":"value",…},…]}: `+err.Error())
		return
	}
	if err := checkBuckets(&req); err != nil {
		writeAPIError(w, http.StatusBadRequest, err.Error())
		return
	}
	s.explainEach(w, r, req.Domain, len(req.Buckets), func(snap *descriptors.Snapshot, i int) Explanation {
		ex := snap.ExplainBucket(req.Domain, req.Buckets[i])
		return explanationOf(ex.Steps, ex.Match, ex.Matched, ex.Reason)
	})
}

// checkBuckets applies the bounds of the RLQS service to an explain
// request.
func checkBuckets(req *rlqsExplainRequest) error {
	if err := checkExplainBounds(req.Domain, len(req.Buckets), "buckets"); err != nil {
		return err
	}
	for i, b := range req.Buckets {
		if err := checkEntries(len(b)); err != nil {
			return fmt.Errorf("bucket %d: %w", i, err)
		}
		for k, v := range b {
			if k == "" || len(k) > rls.MaxKeyBytes || len(v) > rls.MaxValueBytes {
				return fmt.Errorf("bucket %d: a key must be 1 to %d bytes and a value at most %d", i, rls.MaxKeyBytes, rls.MaxValueBytes)
			}
		}
	}
	return nil
}
