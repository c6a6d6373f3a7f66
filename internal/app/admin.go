package app

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
)

// readyTimeout bounds the store check of one /readyz request.
const readyTimeout = time.Second

// adminHandler serves /healthz, /readyz, /healthcheck, /metrics and /config, and with
// --pprof the net/http/pprof handlers under /debug/pprof/. They are
// registered on this mux only (never on http.DefaultServeMux: see
// registerPprof), so that profiles are off unless asked for.
func (s *server) adminHandler() http.Handler {
	mux := http.NewServeMux()
	if s.opts.Pprof {
		registerPprof(mux)
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		// Liveness: 200 whatever the store's state, which the second line
		// reports.
		writeText(w, http.StatusOK, "ok\n"+s.storeState.describe())
	})
	mux.HandleFunc("GET /healthcheck", func(w http.ResponseWriter, r *http.Request) {
		// The reference service's probe: 200 OK while serving, 500 once
		// draining, with --healthcheck-requires-rules before the first rules
		// are received (an xDS force start's empty set is not), and with
		// --readiness store while the store does not answer.
		switch {
		case s.draining.Load():
			writeText(w, http.StatusInternalServerError, "draining")
		case s.opts.HealthcheckRequiresRules && !s.rules.received():
			writeText(w, http.StatusInternalServerError, "no rules loaded")
		case s.opts.Readiness == ReadinessStore && s.storeUnreachable(r.Context()) != "":
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
		if !s.storeState.isUp() {
			msg += "\n" + s.storeState.describe() + " (answering by each policy's failure mode)"
		}
		writeText(w, http.StatusOK, msg)
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{Registry: s.reg}))
	mux.HandleFunc("GET /config", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(s.configView())
	})
	s.handleAdmin(mux, "POST /v1/explain", "explain", s.handleExplain)
	s.handleAdmin(mux, "GET /v1/counters", "counters-read", s.handleCounters)
	s.handleAdmin(mux, "DELETE /v1/counters", "counters-reset", s.handleReset)
	s.handleAdmin(mux, "GET /v1/top", "top", s.handleTop)
	s.handleAdmin(mux, "GET /v1/usage", "usage", s.handleUsage)
	s.handleAdmin(mux, "GET /v1/denials", "denials", s.handleDenials)
	s.handleAdmin(mux, "GET /v1/stats", "stats", s.handleStats)
	s.handleConsole(mux)
	return mux
}

// notReady returns why the process should not receive traffic, or "".
// The store counts only with --readiness store: by default a store outage is
// answered by each policy's failure mode, so the process stays ready.
func (s *server) notReady(ctx context.Context) string {
	if s.draining.Load() {
		return "draining"
	}
	if s.rules.current() == nil {
		return "rules not loaded"
	}
	if s.opts.Readiness == ReadinessStore {
		if why := s.storeUnreachable(ctx); why != "" {
			return why
		}
	}
	return ""
}

// configDoc is the /config document: configured strings only, no secret.
type configDoc struct {
	Config             string                   `json:"config"`
	Store              string                   `json:"store"`
	DefaultHeaders     string                   `json:"default_headers"`
	DefaultFailureMode string                   `json:"default_failure_mode"`
	Readiness          string                   `json:"readiness"`
	ReplicasHint       int                      `json:"replicas_hint"`
	Fingerprint        string                   `json:"fingerprint,omitempty"`
	Files              []string                 `json:"files,omitempty"`
	Domains            []descriptors.DomainInfo `json:"domains"`
	LastReload         reloadDoc                `json:"last_reload"`
	// Source is where the rules come from: a file, or an xDS server with
	// its node and the version in service.
	Source sourceDoc `json:"source"`
}

func (s *server) configView() configDoc {
	snap := s.rules.current()
	doc := configDoc{
		Config:         s.opts.Config,
		Store:          s.opts.Store,
		DefaultHeaders: s.opts.DefaultHeaders,

		DefaultFailureMode: s.opts.DefaultFailureMode,
		Readiness:          s.opts.Readiness,
		ReplicasHint:       s.opts.ReplicasHint,
		Fingerprint:        snap.Fingerprint(),
		Files:              snap.Files(),
		Domains:            snap.Domains(),
		LastReload:         s.rules.lastResult(),
		Source:             s.rules.sourceDoc(),
	}
	if doc.Domains == nil {
		doc.Domains = []descriptors.DomainInfo{}
	}
	return doc
}

func writeText(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(msg + "\n"))
}

// Limits of the admin HTTP server. Its clients are probes, Prometheus and
// operators: each request is a GET answered at once, except a pprof CPU
// profile or trace, which streams for its ?seconds= (30 by default).
const (
	adminReadHeaderTimeout = 5 * time.Second
	adminReadTimeout       = 10 * time.Second
	// adminWriteTimeout leaves room for a 60 s profile.
	adminWriteTimeout = 90 * time.Second
	adminIdleTimeout  = 2 * time.Minute
	adminMaxHeader    = 64 << 10
)

// adminServer is the admin HTTP server: a connection that sends its
// request slowly, never reads its answer or stays idle is closed.
func (s *server) adminServer() *http.Server {
	return &http.Server{
		Handler:           s.adminHandler(),
		ReadHeaderTimeout: adminReadHeaderTimeout,
		ReadTimeout:       adminReadTimeout,
		WriteTimeout:      adminWriteTimeout,
		IdleTimeout:       adminIdleTimeout,
		MaxHeaderBytes:    adminMaxHeader,
	}
}

// storeUnreachable pings the store (at most readyTimeout) and returns why
// it did not answer, or "" (also without a store to ping).
func (s *server) storeUnreachable(ctx context.Context) string {
	if s.ping == nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	if err := s.ping.Ping(ctx); err != nil {
		return "store unreachable: " + err.Error()
	}
	return ""
}
