package admin

import (
	"cmp"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/audit"
	"github.com/envoy-rls/envoy-rls/pkg/topk"
)

// DefaultTopN is the number of subjects /v1/top answers without n.
const DefaultTopN = 10

// DefaultDenialsN is the number of denials /v1/denials answers without n.
const DefaultDenialsN = 20

// topEntry is one subject of /v1/top.
type topEntry struct {
	SubjectDigest string `json:"subject_digest"`
	Hits          int64  `json:"hits"`
	Denied        int64  `json:"denied"`
	HitsError     int64  `json:"hits_error"`
	DeniedError   int64  `json:"denied_error"`
	Domain        string `json:"domain"`
	PolicyID      string `json:"policy_id"`
	Key           string `json:"key"`
	// Since is the start of the period the counts cover.
	Since time.Time `json:"since"`
}

// topAnswer is /v1/top's answer.
type topAnswer struct {
	Top           []topEntry `json:"top"`
	By            string     `json:"by"`
	WindowSeconds float64    `json:"window_seconds"`
}

// handleTop answers GET /v1/top?domain=D&key=K&policy=P&n=N&by=hits|denied.
func (s *Server) handleTop(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	n := DefaultTopN
	if v := q.Get("n"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 || n > s.cfg.Top.Counters() {
			writeText(w, http.StatusBadRequest, fmt.Sprintf("400: n must be an integer from 1 to %d", s.cfg.Top.Counters()))
			return
		}
	}
	by := topk.ByHits
	switch v := q.Get("by"); v {
	case "", "hits":
	case "denied":
		by = topk.ByDenied
	default:
		writeText(w, http.StatusBadRequest, "400: by must be hits or denied")
		return
	}
	ans := topAnswer{Top: s.topEntries(topFilter(q.Get), by, n), By: map[topk.By]string{topk.ByHits: "hits", topk.ByDenied: "denied"}[by],
		WindowSeconds: s.cfg.Top.Window().Seconds()}
	writeJSON(w, http.StatusOK, ans)
}

// topFilter reads the policy selection of a query.
func topFilter(get func(string) string) topk.Filter {
	return topk.Filter{Domain: get("domain"), Key: get("key"), Policy: get("policy")}
}

// topEntries returns the n heaviest subjects by by over the policies f
// selects.
func (s *Server) topEntries(f topk.Filter, by topk.By, n int) []topEntry {
	out := []topEntry{}
	for _, p := range s.cfg.Top.Top(f, by, n) {
		for _, e := range p.Entries {
			out = append(out, topEntry{SubjectDigest: hex.EncodeToString(e.Subject[:]), Hits: e.Hits, Denied: e.Denied,
				HitsError: e.HitsError, DeniedError: e.DeniedError, Domain: p.Domain, PolicyID: p.Policy, Key: p.Key, Since: p.From.UTC()})
		}
	}
	slices.SortStableFunc(out, func(a, b topEntry) int {
		if by == topk.ByDenied {
			return cmp.Compare(b.Denied, a.Denied)
		}
		return cmp.Compare(b.Hits, a.Hits)
	})
	return out[:min(n, len(out))]
}

// usageAnswer is /v1/usage's answer, and the usage snapshot.
type usageAnswer struct {
	Time     time.Time    `json:"time"`
	Policies []usageEntry `json:"policies"`
	// Untracked counts decisions of policies beyond the tracker's bound.
	Untracked uint64 `json:"untracked_decisions"`
}

type usageEntry struct {
	Domain           string    `json:"domain"`
	PolicyID         string    `json:"policy_id"`
	Key              string    `json:"key"`
	Since            time.Time `json:"since"`
	Hits             int64     `json:"hits"`
	Decisions        int64     `json:"decisions"`
	Denials          int64     `json:"denials"`
	ShadowDenials    int64     `json:"shadow_denials"`
	DistinctSubjects uint64    `json:"distinct_subjects"`
	// Reserved and Used (topk's) are present for a policy that has
	// reserved.
	Reserved *int64      `json:"reserved,omitempty"`
	Used     *int64      `json:"used,omitempty"`
	Recent   usageRecent `json:"recent"`
}

type usageRecent struct {
	Since         time.Time `json:"since"`
	Hits          int64     `json:"hits"`
	Decisions     int64     `json:"decisions"`
	Denials       int64     `json:"denials"`
	ShadowDenials int64     `json:"shadow_denials"`
}

// handleUsage answers GET /v1/usage?policy=P&domain=D&key=K.
func (s *Server) handleUsage(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.usageSnapshot(topFilter(r.URL.Query().Get)))
}

// usageSnapshot returns the usage of the policies f selects (every policy
// for the zero Filter): what /v1/usage answers, for a periodic writer too.
func (s *Server) usageSnapshot(f topk.Filter) usageAnswer {
	ans := usageAnswer{Time: time.Now().UTC(), Policies: []usageEntry{}, Untracked: s.cfg.Top.Untracked()}
	for _, u := range s.cfg.Top.Usage(f) {
		e := usageEntry{Domain: u.Domain, PolicyID: u.Policy, Key: u.Key, Since: u.Since.UTC(),
			Hits: u.Hits, Decisions: u.Decisions, Denials: u.Denials, ShadowDenials: u.ShadowDenials, DistinctSubjects: u.DistinctSubjects,
			Recent: usageRecent{Since: u.Recent.From.UTC(), Hits: u.Recent.Hits, Decisions: u.Recent.Decisions,
				Denials: u.Recent.Denials, ShadowDenials: u.Recent.ShadowDenials}}
		if u.Reserved != 0 || u.Used != 0 {
			e.Reserved, e.Used = &u.Reserved, &u.Used
		}
		ans.Policies = append(ans.Policies, e)
	}
	return ans
}

// denialsAnswer is /v1/denials' answer.
type denialsAnswer struct {
	// Sink is the audit sink in use (Config.AuditSink), or "off": then
	// Denials is empty.
	Sink    string         `json:"sink"`
	Denials []audit.Record `json:"denials"`
	// Kept is how many denial events this process holds now for this
	// view; Capacity is the most it holds (the oldest are overwritten).
	Kept     int `json:"kept"`
	Capacity int `json:"capacity"`
}

// handleDenials answers GET /v1/denials?n=N: the last denial events kept
// by the audit sink's sampling, newest first. n is checked whether or not
// a sink is on, against the capacity a sink has (audit.DefaultRecentSize
// when none is on), so a request that is wrong is refused alike.
func (s *Server) handleDenials(w http.ResponseWriter, r *http.Request) {
	ans := denialsAnswer{Sink: "off", Denials: []audit.Record{}}
	bound := audit.DefaultRecentSize
	if s.cfg.Audit != nil {
		ans.Sink, ans.Kept, ans.Capacity = s.cfg.AuditSink, s.cfg.Audit.RecentLen(), s.cfg.Audit.RecentSize()
		bound = ans.Capacity
	}
	n := DefaultDenialsN
	if v := r.URL.Query().Get("n"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 || n > bound {
			writeAPIError(w, http.StatusBadRequest, fmt.Sprintf("n must be an integer from 1 to %d", bound))
			return
		}
	}
	if s.cfg.Audit != nil {
		ans.Denials = s.cfg.Audit.Recent(n)
	}
	writeAPIJSON(w, http.StatusOK, ans)
}
