package admin

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/pkg/audit"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
)

// Bounds of the refusal log and of the state reads.
const (
	// refusalLogBurst refusals are logged per refusalLogInterval; the
	// others are counted and their number logged once the interval ends.
	refusalLogBurst    = 10
	refusalLogInterval = 10 * time.Second
	// GuessRate and GuessBurst bound the values (descriptors) one token
	// looks up through explain, the counters read and the descriptor
	// reset: a token bucket per token name, GuessRate a second, holding up
	// to GuessBurst (an explain call of rls.MaxDescriptors fits).
	GuessRate  = 20
	GuessBurst = rls.MaxDescriptors
)

// Log messages of refused calls.
const (
	MsgRefused           = "admin call refused"
	MsgRefusedSuppressed = "admin calls refused and not logged"
)

// Audited actions: their calls go to the audit sink too.
var auditedActions = []string{"explain", "counters-read", "counters-reset"}

// adminCall is what one authenticated call reports for its log line and
// audit record. The handler fills it through callOf.
type adminCall struct {
	token, action, client string
	status                int
	domain                string
	policies              []string
	descriptors, matched  int
	deleted, scanned      int
	skipped               int
	complete              *bool
	// limited: the call was refused for its token's rate (logged as a
	// refusal, not as a call).
	limited bool
}

type callKey struct{}

// callOf returns the call r belongs to; a throw-away one outside a guard.
func callOf(r *http.Request) *adminCall {
	if c, ok := r.Context().Value(callKey{}).(*adminCall); ok {
		return c
	}
	return &adminCall{}
}

// addPolicy records a policy the call concerned, once.
func (c *adminCall) addPolicy(id string) {
	if id != "" && !slices.Contains(c.policies, id) {
		c.policies = append(c.policies, id)
	}
}

// note records the policies of one explained descriptor.
func (c *adminCall) note(ex Explanation) {
	if ex.PolicyID == "" {
		return
	}
	c.matched++
	c.addPolicy(ex.PolicyID)
	for _, l := range ex.Limits {
		c.addPolicy(l.PolicyID)
	}
}

// guardState is a Server's refusal count, refusal log sampling and
// per-token buckets.
type guardState struct {
	refused *prometheus.CounterVec

	mu         sync.Mutex
	logFrom    time.Time // start of the refusal log's interval
	logged     int
	suppressed int
	buckets    map[string]*bucket
}

// bucket is one token's allowance of looked-up values.
type bucket struct {
	level float64
	at    time.Time
}

func newGuardState(reg prometheus.Registerer) (*guardState, error) {
	g := &guardState{
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: rls.MetricsNamespace, Name: "admin_refused_total",
			Help: "Admin calls refused: no_token, wrong_token, no_token_in_force (the token file is refused) and rate_limited (429: the token's lookups beyond its rate).",
		}, []string{"reason"}),
		buckets: map[string]*bucket{},
	}
	for _, r := range []string{refusedNoToken, refusedWrongToken, refusedNoneInForce, refusedRateLimited} {
		g.refused.WithLabelValues(r)
	}
	if err := reg.Register(g.refused); err != nil {
		return nil, fmt.Errorf("registering %s_admin_refused_total: %w", rls.MetricsNamespace, err)
	}
	return g, nil
}

// handleAPI registers h at pattern behind the bearer token check. Without
// Config.Auth the pattern is not registered: the endpoint answers 404.
func (s *Server) handleAPI(mux *http.ServeMux, pattern, action string, h http.HandlerFunc) {
	if s.cfg.Auth == nil {
		return
	}
	mux.HandleFunc(pattern, s.guarded(action, h))
}

// MsgAdminOff is what the paths of the admin API and the console answer
// (404) when no token file is given, so that "off" is not mistaken for a
// wrong path.
const MsgAdminOff = "the admin API (/v1/...) and the console (/ui) are off: start envoy-rls with --admin-token-file FILE (or ENVOY_RLS_ADMIN_TOKEN_FILE), a file of name:token lines readable by its owner only; with the Helm chart, set admin.token.existingSecret or admin.token.value (docs/admin-api.md, The admin API and its tokens)"

// handleAdminOff answers the API's and the console's paths with
// MsgAdminOff when they are off (no Config.Auth).
func (s *Server) handleAdminOff(mux *http.ServeMux) {
	if s.cfg.Auth != nil {
		return
	}
	mux.HandleFunc("/v1/", func(w http.ResponseWriter, _ *http.Request) {
		writeAPIError(w, http.StatusNotFound, MsgAdminOff)
	})
	for _, p := range []string{"/ui", "/ui/"} {
		mux.HandleFunc(p, func(w http.ResponseWriter, _ *http.Request) {
			writeText(w, http.StatusNotFound, "404: "+MsgAdminOff)
		})
	}
}

// guard is h behind the bearer token check when Config.Auth is set, else
// h as it is.
func (s *Server) guard(action string, h http.HandlerFunc) http.HandlerFunc {
	if s.cfg.Auth == nil {
		return h
	}
	return s.guarded(action, h)
}

// guarded checks the call's token, serves it with h and logs it: the
// token's name, the action, the status, the caller's address, the policies
// and counts the handler reported, never the query or body (which may hold
// raw descriptor values). An audited action also goes to the audit sink.
func (s *Server) guarded(action string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name, refused := s.cfg.Auth.who(r)
		if refused != "" {
			s.refuse(r, action, refused)
			w.Header().Set("WWW-Authenticate", `Bearer realm="envoy-rls admin"`)
			msg := map[string]string{
				refusedNoToken: "no bearer token", refusedWrongToken: "wrong token",
				refusedNoneInForce: "no admin token in force: the token file is refused (see /healthz)",
			}[refused]
			writeText(w, http.StatusUnauthorized, "401: "+msg)
			return
		}
		call := &adminCall{token: name, action: action, client: r.RemoteAddr}
		rec := &statusRecorder{ResponseWriter: w, code: http.StatusOK}
		h(rec, r.WithContext(context.WithValue(r.Context(), callKey{}, call)))
		call.status = rec.code
		if !call.limited {
			s.record(call)
		}
	}
}

// record logs an authenticated call and, for an audited action, offers it
// to the audit sink.
func (s *Server) record(c *adminCall) {
	fields := []zap.Field{zap.String("token", c.token), zap.String("action", c.action), zap.Int("status", c.status), zap.String("client", c.client)}
	audited := slices.Contains(auditedActions, c.action)
	if audited {
		fields = append(fields, zap.String("domain", c.domain), zap.Strings("policies", c.policies),
			zap.Int("descriptors", c.descriptors), zap.Int("matched", c.matched), zap.Int("deleted", c.deleted))
		if c.complete != nil {
			fields = append(fields, zap.Int("scanned", c.scanned), zap.Int("skipped", c.skipped), zap.Bool("complete", *c.complete))
		}
	}
	s.cfg.Log.Info("admin call", fields...)
	if !audited || s.cfg.Audit == nil {
		return
	}
	e := audit.Event{Time: s.now(), Domain: c.domain, Admin: &audit.Admin{
		Action: c.action, Token: c.token, Client: c.client, Status: c.status, Descriptors: c.descriptors,
		Matched: c.matched, Deleted: c.deleted, Scanned: c.scanned, Skipped: c.skipped, Complete: c.complete,
	}}
	if len(c.policies) == 1 {
		e.PolicyID = c.policies[0]
	} else {
		e.Admin.Policies = c.policies
	}
	s.cfg.Audit.OfferAdmin(e)
}

// refuse counts a refused call and logs it, sampled: refusalLogBurst lines
// per refusalLogInterval, then the number not logged once the interval
// ends (Tick).
func (s *Server) refuse(r *http.Request, action, reason string) {
	g := s.guards
	g.refused.WithLabelValues(reason).Inc()
	g.mu.Lock()
	dropped := g.roll(s.now())
	logIt := g.logged < refusalLogBurst
	if logIt {
		g.logged++
	} else {
		g.suppressed++
	}
	g.mu.Unlock()
	s.logSuppressed(dropped)
	if logIt {
		s.cfg.Log.Warn(MsgRefused, zap.String("action", action), zap.String("reason", reason), zap.String("client", r.RemoteAddr))
	}
}

// roll starts a new refusal log interval once the last one has ended and
// returns how many refusals that one did not log. g.mu is held.
func (g *guardState) roll(now time.Time) int {
	if now.Sub(g.logFrom) < refusalLogInterval {
		return 0
	}
	n := g.suppressed
	g.logFrom, g.logged, g.suppressed = now, 0, 0
	return n
}

func (s *Server) logSuppressed(n int) {
	if n > 0 {
		s.cfg.Log.Warn(MsgRefusedSuppressed, zap.Int("refused", n), zap.Duration("within", refusalLogInterval))
	}
}

// Tick is the admin surface's periodic work, every TickInterval: the token
// file is read again and the refusals an ended interval did not log are
// counted in one line.
func (s *Server) Tick(now time.Time) {
	if s.cfg.Auth == nil {
		return
	}
	s.cfg.Auth.Refresh(now)
	s.guards.mu.Lock()
	n := 0
	if s.guards.suppressed > 0 {
		n = s.guards.roll(now)
	}
	s.guards.mu.Unlock()
	s.logSuppressed(n)
}

// charge takes n looked-up values from the bucket of r's token. Beyond the
// token's rate it answers 429 with Retry-After itself, counts and logs the
// refusal, and returns false.
func (s *Server) charge(w http.ResponseWriter, r *http.Request, n int) bool {
	c := callOf(r)
	if s.cfg.Auth == nil || c.token == "" {
		return true
	}
	wait, ok := s.guards.take(c.token, n, s.now())
	if ok {
		return true
	}
	c.limited = true
	s.refuse(r, c.action, refusedRateLimited)
	w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
	writeAPIError(w, http.StatusTooManyRequests, fmt.Sprintf("this token looked up more than %d values a second (burst %d): ask again in %s", GuessRate, GuessBurst, wait.Round(time.Millisecond)))
	return false
}

// take takes n from name's bucket at now, or returns how long until n are
// there. Buckets that are full again are forgotten when the map grows.
func (g *guardState) take(name string, n int, now time.Time) (time.Duration, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	b := g.buckets[name]
	if b == nil {
		if len(g.buckets) >= 2*maxAdminTokens {
			for k, o := range g.buckets {
				if o.level+now.Sub(o.at).Seconds()*GuessRate >= GuessBurst {
					delete(g.buckets, k)
				}
			}
		}
		b = &bucket{level: GuessBurst, at: now}
		g.buckets[name] = b
	}
	if el := now.Sub(b.at).Seconds(); el > 0 {
		b.level = min(GuessBurst, b.level+el*GuessRate)
		b.at = now
	}
	need := float64(min(n, GuessBurst))
	if b.level >= need {
		b.level -= need
		return 0, true
	}
	return time.Duration((need - b.level) / GuessRate * float64(time.Second)), false
}

// statusRecorder keeps the status code a handler wrote, for the admin log.
type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (w *statusRecorder) WriteHeader(code int) {
	w.code = code
	w.ResponseWriter.WriteHeader(code)
}

// Flush lets a streamed answer (a CPU profile) through the recorder.
func (w *statusRecorder) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
