// Package admin serves the admin HTTP listener: health (/healthz, /readyz,
// /healthcheck), /metrics, /config, the authenticated /v1 API (explain,
// counters, top, usage, stats, denials), the console (/ui) and, when asked
// for, the runtime profiles (/debug/pprof). It reads the rules, the store
// and the trackers it is given; it knows nothing of flags.
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/pkg/audit"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/rlqs"
	"github.com/envoy-rls/envoy-rls/pkg/topk"
)

// Rules is the rule source as the admin endpoints read it.
type Rules interface {
	// Current is the snapshot in service, nil before the first load.
	Current() *descriptors.Snapshot
	// Received reports whether rules from the source are in service (the
	// empty set an xDS source may start with is not).
	Received() bool
}

// NewRegistry is the registry a serve registers its metrics on and
// /metrics serves, with the Go runtime's and the process's collectors.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Config configures a Server.
type Config struct {
	// Rules are the rules in service. (Required)
	Rules Rules
	// Store answers the state reads and resets of the /v1 API. (Required)
	Store limiter.Store
	// StoreState is the store's health: /healthz, /readyz. (Required)
	StoreState *StoreState
	// Registry is served on /metrics and summed by /v1/stats. (Required)
	Registry *prometheus.Registry
	// ConfigView returns the /config document: with full, every configured
	// value; without, the rules' values as digests. Full is asked for
	// only behind a token (with Auth). (Required)
	ConfigView func(full bool) any
	// StoreReadiness makes /readyz also require a store that answers its
	// ping. (Optional)
	StoreReadiness bool
	// HealthcheckRequiresRules makes /healthcheck fail until rules are
	// received. (Optional)
	HealthcheckRequiresRules bool
	// HealthcheckRequiresStore makes /healthcheck fail while the store
	// does not answer its ping; without it a store outage never fails
	// /healthcheck, whatever StoreReadiness says, since probes written for
	// the reference use it for liveness. (Optional)
	HealthcheckRequiresStore bool
	// Pprof serves the runtime profiles under /debug/pprof/. (Optional)
	Pprof bool
	// Auth checks the tokens of the /v1 API, /config and the profiles;
	// nil: the API and the console are off (404), /config shows digests
	// of the rules' values, the profiles are open. (Optional)
	Auth *Auth
	// Top tracks the top consumers and usage (/v1/top, /v1/usage).
	// (Required)
	Top *topk.Tracker
	// Quota is the RLQS service whose aggregates /v1/rlqs lists; nil:
	// RLQS is off. (Optional)
	Quota *rlqs.Service
	// Audit is the audit sink whose recent denials /v1/denials shows, and
	// AuditSink its kind; nil: /v1/denials says the sink is off. (Optional)
	Audit     *audit.Sink
	AuditSink string
	// Log receives the admin calls and the token file's changes.
	// (Required)
	Log *zap.Logger
	// Now is the clock of the audit records, the refusal log and the
	// per-token rate. (Optional, default time.Now)
	Now func() time.Time
}

// Server is the admin HTTP surface of one serve.
type Server struct {
	cfg      Config
	guards   *guardState
	draining atomic.Bool
}

// New checks cfg and returns the Server.
func New(cfg Config) (*Server, error) {
	switch {
	case cfg.Rules == nil, cfg.Store == nil, cfg.StoreState == nil, cfg.Registry == nil, cfg.ConfigView == nil, cfg.Top == nil, cfg.Log == nil:
		return nil, errors.New("admin: Config.Rules, Store, StoreState, Registry, ConfigView, Top and Log are required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Server{cfg: cfg}
	if cfg.Auth != nil {
		g, err := newGuardState(cfg.Registry)
		if err != nil {
			return nil, err
		}
		s.guards = g
	}
	return s, nil
}

func (s *Server) now() time.Time { return s.cfg.Now() }

// SetDraining makes /readyz and /healthcheck answer draining from now on.
func (s *Server) SetDraining() { s.draining.Store(true) }

// readyTimeout bounds the store check of one /readyz request.
const readyTimeout = time.Second

// Handler serves /healthz, /readyz, /healthcheck, /metrics, /config, the
// /v1 API and the console, and with Config.Pprof the profiles under
// /debug/pprof/. They are registered on this mux only (never on
// http.DefaultServeMux: see registerPprof), so that profiles are off unless
// asked for. With Config.Auth, /config and the profiles need a token like
// the API.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	if s.cfg.Pprof {
		registerPprof(mux, s.guard)
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		// Liveness: 200 whatever the store's state, which the second line
		// reports, and the admin tokens' state, the third.
		msg := "ok\n" + s.cfg.StoreState.Describe()
		if s.cfg.Auth != nil {
			msg += "\n" + s.cfg.Auth.Describe()
		}
		writeText(w, http.StatusOK, msg)
	})
	mux.HandleFunc("GET /healthcheck", func(w http.ResponseWriter, r *http.Request) {
		// The reference service's probe: 200 OK while serving, 500 once
		// draining, with HealthcheckRequiresRules before the first rules
		// are received (an xDS force start's empty set is not), and with
		// HealthcheckRequiresStore while the store does not answer. It is
		// a liveness signal otherwise: reference deployments point their
		// liveness probe here, and a store outage is answered by each
		// policy's failure mode, which a restart would not improve.
		switch {
		case s.draining.Load():
			writeText(w, http.StatusInternalServerError, "draining")
		case s.cfg.HealthcheckRequiresRules && !s.cfg.Rules.Received():
			writeText(w, http.StatusInternalServerError, "no rules loaded")
		case s.cfg.HealthcheckRequiresStore && s.cfg.StoreState.Unreachable(r.Context()) != "":
			writeText(w, http.StatusInternalServerError, "store unreachable")
		default:
			writeText(w, http.StatusOK, "OK")
		}
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if reason := s.notReady(r.Context()); reason != "" {
			writeText(w, http.StatusServiceUnavailable, "not ready: "+reason)
			return
		}
		msg := "ready"
		if !s.cfg.StoreState.IsUp() {
			msg += "\n" + s.cfg.StoreState.Describe() + " (answering by each policy's failure mode)"
		}
		writeText(w, http.StatusOK, msg)
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.cfg.Registry, promhttp.HandlerOpts{Registry: s.cfg.Registry}))
	mux.HandleFunc("GET /config", s.guard("config", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, s.cfg.ConfigView(s.cfg.Auth != nil))
	}))
	s.handleAPI(mux, "POST /v1/explain", "explain", s.handleExplain)
	s.handleAPI(mux, "GET /v1/counters", "counters-read", s.handleCounters)
	s.handleAPI(mux, "DELETE /v1/counters", "counters-reset", s.handleReset)
	s.handleAPI(mux, "GET /v1/top", "top", s.handleTop)
	s.handleAPI(mux, "GET /v1/usage", "usage", s.handleUsage)
	s.handleAPI(mux, "GET /v1/denials", "denials", s.handleDenials)
	s.handleAPI(mux, "GET /v1/stats", "stats", s.handleStats)
	s.handleAPI(mux, "GET /v1/rlqs", "rlqs", s.handleRLQS)
	s.handleAPI(mux, "POST /v1/rlqs/explain", "explain", s.handleRLQSExplain)
	s.handleConsole(mux)
	s.handleAdminOff(mux)
	return mux
}

// notReady returns why the process should not receive traffic, or "".
// The store counts only with StoreReadiness: by default a store outage is
// answered by each policy's failure mode, so the process stays ready.
func (s *Server) notReady(ctx context.Context) string {
	if s.draining.Load() {
		return "draining"
	}
	if s.cfg.Rules.Current() == nil {
		return "rules not loaded"
	}
	if s.cfg.StoreReadiness {
		if why := s.cfg.StoreState.Unreachable(ctx); why != "" {
			return why
		}
	}
	return ""
}

func writeText(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(msg + "\n"))
}

// writeJSON writes v, indented.
func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// writeAPIJSON writes v, indented, never cached.
func writeAPIJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, code, v)
}

// writeAPIError writes {"error": msg}.
func writeAPIError(w http.ResponseWriter, code int, msg string) {
	writeAPIJSON(w, code, map[string]string{"error": msg})
}

// Limits of the admin HTTP server. Its clients are probes, Prometheus and
// operators: each request is a GET answered at once, except a pprof CPU
// profile or trace, which streams for its ?seconds= (30 by default).
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 10 * time.Second
	// writeTimeout leaves room for the longest profile (maxCPUProfile).
	writeTimeout = 90 * time.Second
	idleTimeout  = 2 * time.Minute
	maxHeader    = 64 << 10
)

// HTTPServer is the admin HTTP server: a connection that sends its request
// slowly, never reads its answer or stays idle is closed.
func (s *Server) HTTPServer() *http.Server {
	return &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeader,
	}
}
