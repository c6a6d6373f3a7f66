package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// Bounds of DELETE /v1/counters?policy=…: the states looked at and the
// time spent, by default and at most.
const (
	defaultResetScan    = 100_000
	maxResetScan        = 10_000_000
	defaultResetTimeout = 5 * time.Second
	maxResetTimeout     = 60 * time.Second
	// resetTimeout bounds the reset of one subject.
	resetTimeout = 2 * time.Second
)

// countersAnswer is the answer of GET and DELETE /v1/counters?descriptor=….
type countersAnswer struct {
	Domain string `json:"domain"`
	Explanation
	// StatesDeleted (DELETE) is how many stored states the reset removed;
	// a limit whose subject had consumed nothing has none.
	StatesDeleted *int `json:"states_deleted,omitempty"`
}

// policyResetAnswer is the answer of DELETE /v1/counters?policy=….
type policyResetAnswer struct {
	PolicyID string `json:"policy_id"`
	Revision uint32 `json:"revision"`
	Scanned  int    `json:"scanned"`
	Deleted  int    `json:"deleted"`
	// Skipped is how many keys named like states were not states of this
	// service (left alone).
	Skipped int `json:"skipped"`
	// Complete: every state was looked at; else ask again.
	Complete bool `json:"complete"`
}

// ParseDescriptor reads the entries of a query: descriptor=k1=v1,k2=v2, or
// (for values holding a comma) entry=k1=v1&entry=k2=v2.
func ParseDescriptor(q url.Values) ([]descriptors.Entry, error) {
	parts := q["entry"]
	if d := q.Get("descriptor"); d != "" {
		if len(parts) > 0 {
			return nil, errors.New("give descriptor= or entry=, not both")
		}
		parts = strings.Split(d, ",")
	}
	if err := checkEntries(len(parts)); err != nil {
		return nil, fmt.Errorf("descriptor: %w (descriptor=k1=v1,k2=v2)", err)
	}
	out := make([]descriptors.Entry, len(parts))
	for i, p := range parts {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("descriptor entry %d: want key=value", i+1)
		}
		out[i] = descriptors.Entry{Key: k, Value: v}
	}
	return out, nil
}

// handleCounters serves GET /v1/counters: the limits a descriptor matches
// and their state, read without consuming.
func (s *Server) handleCounters(w http.ResponseWriter, r *http.Request) {
	ans, ok := s.countersFor(w, r)
	if !ok {
		return
	}
	readStates(r.Context(), s.cfg.Store, time.Now(), []Explanation{ans.Explanation})
	writeAPIJSON(w, http.StatusOK, ans)
}

// countersFor matches the query's descriptor; it answers the error itself.
func (s *Server) countersFor(w http.ResponseWriter, r *http.Request) (countersAnswer, bool) {
	q := r.URL.Query()
	domain := q.Get("domain")
	if domain == "" {
		writeAPIError(w, http.StatusBadRequest, "domain= is required")
		return countersAnswer{}, false
	}
	entries, err := ParseDescriptor(q)
	if err != nil {
		writeAPIError(w, http.StatusBadRequest, err.Error())
		return countersAnswer{}, false
	}
	// One descriptor: one value looked up.
	if !s.charge(w, r, 1) {
		return countersAnswer{}, false
	}
	ex := Explain(s.cfg.Rules.Current(), domain, entries)
	call := callOf(r)
	call.domain, call.descriptors = domain, 1
	call.note(ex)
	return countersAnswer{Domain: domain, Explanation: ex}, true
}

// handleReset serves DELETE /v1/counters: with descriptor=, every limit of
// that descriptor for its subject; with policy=, every subject of a policy
// at a revision.
func (s *Server) handleReset(w http.ResponseWriter, r *http.Request) {
	rs, ok := s.cfg.Store.(limiter.Resetter)
	if !ok {
		writeAPIError(w, http.StatusNotImplemented, "this store cannot reset states")
		return
	}
	if r.URL.Query().Get("policy") != "" {
		s.resetPolicy(w, r, rs)
		return
	}
	ans, ok := s.countersFor(w, r)
	if !ok {
		return
	}
	if !ans.Matched || len(ans.Limits) == 0 {
		writeAPIJSON(w, http.StatusOK, ans)
		return
	}
	states := make([]limiter.Request, len(ans.Limits))
	for i := range ans.Limits {
		states[i] = ans.Limits[i].req
	}
	ctx, cancel := context.WithTimeout(r.Context(), resetTimeout)
	defer cancel()
	n, err := rs.Reset(ctx, states)
	if err != nil {
		writeAPIError(w, http.StatusServiceUnavailable, "reset: "+err.Error())
		return
	}
	ans.StatesDeleted = &n
	callOf(r).deleted = n
	readStates(r.Context(), s.cfg.Store, time.Now(), []Explanation{ans.Explanation})
	writeAPIJSON(w, http.StatusOK, ans)
}

// resetPolicy serves DELETE /v1/counters?policy=ID[&revision=N][&max_states=N][&timeout=D].
func (s *Server) resetPolicy(w http.ResponseWriter, r *http.Request, rs limiter.Resetter) {
	q := r.URL.Query()
	id := q.Get("policy")
	rev, known := s.policyRevision(id)
	if v := q.Get("revision"); v != "" {
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			writeAPIError(w, http.StatusBadRequest, "revision= must be an unsigned 32-bit integer")
			return
		}
		rev, known = uint32(n), true
	}
	if !known {
		writeAPIError(w, http.StatusNotFound, fmt.Sprintf("no rule in service has policy %q: give revision= to reset the states of a removed policy", id))
		return
	}
	scan, err := boundedInt(q.Get("max_states"), defaultResetScan, maxResetScan)
	if err != nil {
		writeAPIError(w, http.StatusBadRequest, "max_states= "+err.Error())
		return
	}
	timeout := defaultResetTimeout
	if v := q.Get("timeout"); v != "" {
		if timeout, err = time.ParseDuration(v); err != nil || timeout <= 0 || timeout > maxResetTimeout {
			writeAPIError(w, http.StatusBadRequest, fmt.Sprintf("timeout= must be a duration in (0, %s]", maxResetTimeout))
			return
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	res, err := rs.ResetPolicy(ctx, id, rev, limiter.ResetBounds{MaxScanned: scan})
	if err != nil {
		writeAPIError(w, http.StatusServiceUnavailable, "reset: "+err.Error())
		return
	}
	call := callOf(r)
	call.addPolicy(id)
	call.scanned, call.deleted, call.skipped, call.complete = res.Scanned, res.Deleted, res.Skipped, &res.Complete
	if res.Skipped > 0 {
		s.cfg.Log.Warn("policy reset: keys named like states that are not states of envoy-rls were left alone",
			zap.String("policy_id", id), zap.Uint32("revision", rev), zap.Int("skipped", res.Skipped))
	}
	writeAPIJSON(w, http.StatusOK, policyResetAnswer{PolicyID: id, Revision: rev, Scanned: res.Scanned, Deleted: res.Deleted,
		Skipped: res.Skipped, Complete: res.Complete})
}

// policyRevision returns the revision of policy id in the rules in service.
func (s *Server) policyRevision(id string) (uint32, bool) {
	for _, d := range s.cfg.Rules.Current().Domains() {
		for _, ri := range d.Rules {
			if ri.PolicyID == id {
				return ri.Revision, true
			}
		}
	}
	return 0, false
}

// boundedInt parses v in [1, hi], def when empty.
func boundedInt(v string, def, hi int) (int, error) {
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > hi {
		return 0, fmt.Errorf("must be an integer from 1 to %d", hi)
	}
	return n, nil
}
