package admin

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
)

// Bounds of the explain and counters endpoints.
const (
	// maxExplainBody bounds the body of POST /v1/explain.
	maxExplainBody = 64 << 10
	// stateReadTimeout bounds the store read of one explain or counters
	// call.
	stateReadTimeout = 2 * time.Second
)

// ExplainAnswer is the answer of POST /v1/explain (and of `envoy-rls
// explain`): one entry per descriptor of the request, in order.
type ExplainAnswer struct {
	Domain      string        `json:"domain"`
	Descriptors []Explanation `json:"descriptors"`
}

// Explanation explains one descriptor. It never holds a request value:
// subjects are HMAC digests, the rest is configuration.
type Explanation struct {
	Matched bool `json:"matched"`
	// Reason says why nothing matched.
	Reason    string   `json:"reason,omitempty"`
	PolicyID  string   `json:"policy_id,omitempty"`
	PolicyIDs []string `json:"policy_ids,omitempty"`
	Rule      *ruleRef `json:"rule,omitempty"`
	// SubjectDigest is the first limit's subject (hex HMAC-SHA256); the
	// denial logs show its first 8 hex digits.
	SubjectDigest string             `json:"subject_digest,omitempty"`
	Unlimited     bool               `json:"unlimited,omitempty"`
	Steps         []descriptors.Step `json:"steps"`
	Limits        []LimitDoc         `json:"limits,omitempty"`
}

// ruleRef places a rule in its file.
type ruleRef struct {
	File string `json:"file"`
	Line int    `json:"line"`
	Path string `json:"path"`
}

// LimitDoc is one limit of a matched descriptor and, when the store
// answered, its current state read without consuming.
type LimitDoc struct {
	PolicyID        string `json:"policy_id"`
	Name            string `json:"name,omitempty"`
	Revision        uint32 `json:"revision"`
	Algorithm       string `json:"algorithm"`
	RequestsPerUnit uint32 `json:"requests_per_unit"`
	Unit            string `json:"unit"`
	UnitMultiplier  uint32 `json:"unit_multiplier,omitempty"`
	Window          string `json:"window"`
	Limit           int64  `json:"limit"`
	ShadowMode      bool   `json:"shadow_mode,omitempty"`
	QuotaMode       bool   `json:"quota_mode,omitempty"`
	SubjectDigest   string `json:"subject_digest,omitempty"`
	// Reserve is a budget's reservations (limiter.Reserve): the store's
	// state holds them consumed, so Remaining counts the live ones.
	Reserve *reserveDoc `json:"reserve,omitempty"`
	// The state, read without consuming (absent when no store was asked or
	// it did not answer: then StateError says why). Remaining is what is
	// left before one more hit; Allowed says whether one more hit would be
	// admitted now.
	Remaining    *int64 `json:"remaining,omitempty"`
	ResetMs      *int64 `json:"reset_ms,omitempty"`
	RetryAfterMs *int64 `json:"retry_after_ms,omitempty"`
	Allowed      *bool  `json:"allowed,omitempty"`
	Source       string `json:"source,omitempty"`
	// Blocked (a policy with a penalty box) says whether the subject is
	// blocked regardless of its count; BlockedMs is how long the block
	// still lasts.
	Blocked   *bool  `json:"blocked,omitempty"`
	BlockedMs *int64 `json:"blocked_ms,omitempty"`
	// Reserved and Charged (a limit with a reserve) split what the
	// subject has used of the limit: Reserved is held by live
	// reservations (settled later by their usage), Charged is the rest
	// (settled usage, expired reservations, plain charges).
	Reserved   *int64 `json:"reserved,omitempty"`
	Charged    *int64 `json:"charged,omitempty"`
	StateError string `json:"state_error,omitempty"`

	req limiter.Request
}

// reserveDoc is a rule's reserve: the ttl as a Go duration string; an
// estimate of 0 reserves each request's own hits_addend.
type reserveDoc struct {
	TTL      string `json:"ttl"`
	Estimate int64  `json:"estimate"`
}

// Request is the limit's state read for its subject: a check of cost 1
// that consumes nothing.
func (l LimitDoc) Request() limiter.Request { return l.req }

// Explain matches one descriptor of domain on snap and describes it.
func Explain(snap *descriptors.Snapshot, domain string, entries []descriptors.Entry) Explanation {
	ex := snap.Explain(domain, entries)
	return explanationOf(ex.Steps, ex.Match, ex.Matched, ex.Reason)
}

// explanationOf describes a descriptor's (or an RLQS bucket's) walk of the
// rules: its steps, its match when matched, else why not.
func explanationOf(steps []descriptors.Step, match descriptors.Match, matched bool, reason string) Explanation {
	d := Explanation{Matched: matched, Reason: reason, Steps: steps}
	if d.Steps == nil {
		d.Steps = []descriptors.Step{}
	}
	if !matched {
		return d
	}
	r := match.Rule
	d.Rule = refOf(r)
	if r.Unlimited || r.Policy == nil {
		d.Unlimited = true
		return d
	}
	d.PolicyID = r.Policy.ID()
	d.SubjectDigest = hex.EncodeToString(match.Subject[:])
	limits, subjects := []*descriptors.Rule{r}, []limiter.SubjectDigest{match.Subject}
	if len(r.Limits) > 0 && len(match.Subjects) == len(r.Limits) {
		limits, subjects = r.Limits, match.Subjects
	}
	for i, l := range limits {
		if l.Policy == nil {
			continue
		}
		if len(limits) > 1 {
			d.PolicyIDs = append(d.PolicyIDs, l.Policy.ID())
		}
		d.Limits = append(d.Limits, limitDocOf(l, subjects[i], match.Tag))
	}
	return d
}

func refOf(r *descriptors.Rule) *ruleRef {
	ref := &ruleRef{File: r.Source, Path: r.Path}
	if i := strings.LastIndexByte(r.Source, ':'); i > 0 {
		if n, err := strconv.Atoi(r.Source[i+1:]); err == nil {
			ref.File, ref.Line = r.Source[:i], n
		}
	}
	return ref
}

func limitDocOf(r *descriptors.Rule, subject limiter.SubjectDigest, tag limiter.Tag) LimitDoc {
	p := r.Policy
	var res *reserveDoc
	if rv := p.Reserve(); rv.On() {
		res = &reserveDoc{TTL: rv.TTL.String(), Estimate: rv.Estimate}
	}
	return LimitDoc{
		PolicyID: p.ID(), Name: r.Name, Revision: p.Revision(), Algorithm: p.Algorithm().String(),
		RequestsPerUnit: r.RequestsPerUnit, Unit: r.Unit.String(), UnitMultiplier: r.UnitMultiplier,
		Window: r.Window().String(), Limit: p.Limit(), ShadowMode: r.ShadowMode, QuotaMode: r.QuotaMode,
		SubjectDigest: hex.EncodeToString(subject[:]), Reserve: res,
		req: limiter.Request{Policy: p, Subject: subject, Cost: 1, Role: limiter.RoleCheck, Tag: tag},
	}
}

// readStates asks store for the state of every limit of descs in one batch
// of limiter.RoleCheck requests: reported, never consumed.
func readStates(ctx context.Context, store limiter.Store, now time.Time, descs []Explanation) {
	var batch []limiter.Request
	for i := range descs {
		for j := range descs[i].Limits {
			batch = append(batch, descs[i].Limits[j].req)
		}
	}
	if len(batch) == 0 || store == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, stateReadTimeout)
	defer cancel()
	out := make([]limiter.Outcome, len(batch))
	store.Evaluate(ctx, batch, out)
	k := 0
	for i := range descs {
		for j := range descs[i].Limits {
			setState(&descs[i].Limits[j], out[k], now)
			k++
		}
	}
}

func setState(l *LimitDoc, o limiter.Outcome, now time.Time) {
	if o.Kind != limiter.Evaluated {
		l.StateError = o.Kind.String()
		if o.Category != "" {
			l.StateError += ": " + o.Category
		}
		return
	}
	d := o.Decision
	rem, reset, retry, allowed := d.Remaining, max(d.ResetAt.Sub(now).Milliseconds(), 0), d.RetryAfter.Milliseconds(), d.Allowed
	l.Remaining, l.ResetMs, l.RetryAfterMs, l.Allowed, l.Source = &rem, &reset, &retry, &allowed, d.Source.String()
	if p := l.req.Policy; p != nil && p.Reserve().On() {
		charged := max(0, d.Limit-d.Remaining-d.Reserved)
		l.Reserved, l.Charged = &d.Reserved, &charged
	}
	if p := l.req.Policy; p != nil && p.Penalty().Duration > 0 || d.Blocked {
		blocked := d.Blocked
		l.Blocked = &blocked
		if blocked {
			// How long the block itself lasts; the retry may be later,
			// when the limit admits again only after the block.
			left := d.BlockedFor.Milliseconds()
			l.BlockedMs = &left
		}
	}
}

// handleExplain serves POST /v1/explain.
func (s *Server) handleExplain(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxExplainBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeAPIError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the body is larger than %d bytes", maxExplainBody))
			return
		}
		writeAPIError(w, http.StatusBadRequest, "reading the body: "+err.Error())
		return
	}
	var req rlsv3.RateLimitRequest
	if err := (protojson.UnmarshalOptions{}).Unmarshal(body, &req); err != nil {
		writeAPIError(w, http.StatusBadRequest, `the body must be a RateLimitRequest in protobuf JSON, e.g. {"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"…"}]}]}: `+parseProblem(err))
		return
	}
	if err := checkExplainRequest(&req); err != nil {
		writeAPIError(w, http.StatusBadRequest, err.Error())
		return
	}
	s.explainEach(w, r, req.Domain, len(req.Descriptors), func(snap *descriptors.Snapshot, i int) Explanation {
		d := req.Descriptors[i]
		entries := make([]descriptors.Entry, len(d.Entries))
		for j, e := range d.Entries {
			entries[j] = descriptors.Entry{Key: e.Key, Value: e.Value}
		}
		return Explain(snap, req.Domain, entries)
	})
}

// explainEach answers an explain request of n items of domain, each
// explained by explain on the current rules, with the state of its
// limits. Each item is one value looked up: one guess at a digest.
func (s *Server) explainEach(w http.ResponseWriter, r *http.Request, domain string, n int, explain func(snap *descriptors.Snapshot, i int) Explanation) {
	if !s.charge(w, r, n) {
		return
	}
	snap := s.cfg.Rules.Current()
	ans := ExplainAnswer{Domain: domain, Descriptors: make([]Explanation, 0, n)}
	call := callOf(r)
	call.domain, call.descriptors = domain, n
	for i := range n {
		ex := explain(snap, i)
		call.note(ex)
		ans.Descriptors = append(ans.Descriptors, ex)
	}
	readStates(r.Context(), s.cfg.Store, time.Now(), ans.Descriptors)
	writeAPIJSON(w, http.StatusOK, ans)
}

// checkExplainRequest applies the bounds of a ShouldRateLimit request.
func checkExplainRequest(req *rlsv3.RateLimitRequest) error {
	if err := checkExplainBounds(req.Domain, len(req.Descriptors), "descriptors"); err != nil {
		return err
	}
	for i, d := range req.Descriptors {
		if err := checkEntries(len(d.GetEntries())); err != nil {
			return fmt.Errorf("descriptor %d: %w", i, err)
		}
		for j, e := range d.Entries {
			if e.Key == "" || len(e.Key) > rls.MaxKeyBytes || len(e.Value) > rls.MaxValueBytes {
				return fmt.Errorf("descriptor %d entry %d: the key must be 1 to %d bytes and the value at most %d", i, j, rls.MaxKeyBytes, rls.MaxValueBytes)
			}
		}
	}
	return nil
}

// checkExplainBounds applies the bounds of a ShouldRateLimit request to
// an explain request's domain and its n items (named what).
func checkExplainBounds(domain string, n int, what string) error {
	switch {
	case domain == "":
		return errors.New("domain is empty")
	case len(domain) > rls.MaxDomainBytes:
		return fmt.Errorf("domain is above %d bytes", rls.MaxDomainBytes)
	case n == 0:
		return fmt.Errorf("%s is empty: at least one is required", what)
	case n > rls.MaxDescriptors:
		return fmt.Errorf("%d %s, above the bound of %d", n, what, rls.MaxDescriptors)
	}
	return nil
}

func checkEntries(n int) error {
	switch {
	case n == 0:
		return errors.New("no entries: at least one is required")
	case n > rls.MaxEntries:
		return fmt.Errorf("%d entries, above the bound of %d", n, rls.MaxEntries)
	}
	return nil
}

// parseProblem is the parser's message up to its first quoted token, which
// may be a request value: the kind of problem and its line and column.
func parseProblem(err error) string {
	msg := err.Error()
	if i := strings.IndexAny(msg, "\"`"); i > 0 {
		msg = strings.TrimRight(msg[:i], " :")
	}
	return strings.ReplaceAll(msg, "\u00a0", " ")
}
