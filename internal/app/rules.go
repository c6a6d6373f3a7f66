package app

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/internal/compat"
	"github.com/envoy-rls/envoy-rls/internal/options"
	"github.com/envoy-rls/envoy-rls/internal/xdsrules"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors/rulefile"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors/xds"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
)

// reloadDoc is a load attempt as shown on /config.
type reloadDoc struct {
	Time        time.Time             `json:"time"`
	Trigger     string                `json:"trigger"`
	OK          bool                  `json:"ok"`
	Error       string                `json:"error,omitempty"`
	Problems    []descriptors.Problem `json:"problems,omitempty"`
	Fingerprint string                `json:"fingerprint,omitempty"`
	Domains     int                   `json:"domains"`
	Rules       int                   `json:"rules"`
}

func newReloadDoc(r descriptors.ReloadResult) reloadDoc {
	d := reloadDoc{
		Time: r.Time.UTC(), Trigger: r.Trigger, OK: r.OK, Problems: r.Problems,
		Fingerprint: r.Fingerprint, Domains: r.Domains, Rules: r.Rules,
	}
	var ce *descriptors.ConfigError
	switch {
	case r.Err == nil:
	case errors.As(r.Err, &ce):
		d.Error = "invalid configuration"
	case options.LimitMessage(r.Err) != "":
		d.Error = options.LimitMessage(r.Err)
	default:
		d.Error = r.Err.Error()
	}
	return d
}

// configDoc is the /config document: configured strings only, no secret.
type configDoc struct {
	Config             string                   `json:"config"`
	Store              string                   `json:"store"`
	DefaultHeaders     string                   `json:"default_headers"`
	DefaultFailureMode string                   `json:"default_failure_mode"`
	DefaultCharge      string                   `json:"default_charge"`
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

// configView is the /config document. Without full (no admin token file:
// /config is open), the rules' descriptor values are digests
// (descriptors.Snapshot.DomainsDigested) and the last reload's problems
// keep their positions without their reasons, which may quote a value.
func (s *server) configView(full bool) configDoc {
	snap := s.rules.Current()
	doc := configDoc{
		Config:         s.opts.Config,
		Store:          s.opts.Store,
		DefaultHeaders: s.opts.DefaultHeaders,

		DefaultFailureMode: s.opts.DefaultFailureMode,
		DefaultCharge:      s.opts.DefaultCharge,
		Readiness:          s.opts.Readiness,
		ReplicasHint:       s.opts.store.ReplicasHint,
		Fingerprint:        snap.Fingerprint(),
		Files:              snap.Files(),
		Domains:            snap.Domains(),
		LastReload:         s.rules.lastResult(),
		Source:             s.rules.sourceDoc(),
	}
	if !full {
		doc.Domains = snap.DomainsDigested()
		doc.LastReload.Problems = positionsOnly(doc.LastReload.Problems)
	}
	if doc.Domains == nil {
		doc.Domains = []descriptors.DomainInfo{}
	}
	return doc
}

// positionsOnly is ps with each reason replaced by a pointer to where it is
// shown in full.
func positionsOnly(ps []descriptors.Problem) []descriptors.Problem {
	if len(ps) == 0 {
		return ps
	}
	out := make([]descriptors.Problem, len(ps))
	for i, p := range ps {
		p.Reason = problemHidden
		out[i] = p
	}
	return out
}

// problemHidden replaces a problem's reason on /config without a token.
const problemHidden = "(the reason is in the reload log line and in envoy-rls validate's output)"

// ruleSet is the rule source seen by the server: the rulefile.Watcher
// of --config, or with --config-source xds the rules from the xDS server
// (x, with w nil).
type ruleSet struct {
	ruleSource // the one of w and x in use
	w          *rulefile.Watcher
	x          *xds.Source
}

// ruleSource is what both sources do: the snapshot in service (nil before
// the first load), the last load attempt, and keying the rules in service
// and every later load with a secret.
type ruleSource interface {
	Current() *descriptors.Snapshot
	Last() descriptors.ReloadResult
	SetSecret(secret []byte) error
}

// newRuleSet loads path (the first load must succeed) and reports every
// later reload to onReload.
func newRuleSet(path string, opts descriptors.Options, onReload func(descriptors.ReloadResult)) (*ruleSet, error) {
	w, err := rulefile.NewWatcher(path, opts, onReload)
	if err != nil {
		return nil, err
	}
	return &ruleSet{ruleSource: w, w: w}, nil
}

// Received reports whether rules from the source are in service: a rule
// file loaded, or a valid xDS version (not the empty set of
// --force-start-without-initial-config).
func (rs *ruleSet) Received() bool {
	if rs.x != nil {
		return rs.x.Received()
	}
	return rs.w.Current() != nil
}

// rules is the rls.Config.Rules function.
func (rs *ruleSet) rules() rls.Rules {
	if s := rs.Current(); s != nil {
		return s
	}
	return nil
}

// reload reads the rule files again; rules from an xDS server change only
// when the server sends a version.
func (rs *ruleSet) reload() descriptors.ReloadResult {
	if rs.x != nil {
		return rs.Last()
	}
	return rs.w.Reload()
}

func (rs *ruleSet) lastResult() reloadDoc { return newReloadDoc(rs.Last()) }

// watch reloads when the rule files change, until ctx ends (with an xDS
// source it only waits: the client pushes).
func (rs *ruleSet) watch(ctx context.Context) error {
	if rs.x != nil {
		<-ctx.Done()
		return nil
	}
	return rs.w.Run(ctx)
}

// stop ends the xDS client, if any, and waits for it.
func (rs *ruleSet) stop() {
	if rs != nil && rs.x != nil {
		rs.x.Stop()
	}
}

// sourceDoc is where the rules come from, on /config: a file, or an xDS
// server with its node, the version in service and the connection state.
type sourceDoc struct {
	Type string `json:"type"`
	xds.Status
}

func (rs *ruleSet) sourceDoc() sourceDoc {
	if rs.x != nil {
		return sourceDoc{Type: options.SourceXDS, Status: rs.x.Status()}
	}
	return sourceDoc{Type: options.SourceFile}
}

// reloadMetrics count the rule loads.
type reloadMetrics struct {
	reloads *prometheus.CounterVec
	// last is the Unix time of the last successful rule load (0 before
	// the first).
	last prometheus.Gauge
}

// newReloadMetrics registers the rule loads' metrics on reg, both results
// from the start.
func newReloadMetrics(reg prometheus.Registerer) (*reloadMetrics, error) {
	m := &reloadMetrics{
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "envoy_rls_config_reloads_total",
			Help: "Rule reloads by result (success, failure).",
		}, []string{"result"}),
		last: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "envoy_rls_config_last_reload_success_timestamp_seconds",
			Help: "Unix time of the last successful rule load (the first load included; 0 before it).",
		}),
	}
	for _, c := range []prometheus.Collector{m.reloads, m.last} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering the rule loads' metrics: %w", err)
		}
	}
	m.reloads.WithLabelValues("success")
	m.reloads.WithLabelValues("failure")
	return m, nil
}

// count counts one rule load attempt, made at now.
func (m *reloadMetrics) count(ok bool, now time.Time) {
	if ok {
		m.reloads.WithLabelValues("success").Inc()
		m.last.Set(float64(now.UnixMilli()) / 1e3)
		return
	}
	m.reloads.WithLabelValues("failure").Inc()
}

// onReload counts and logs one load attempt.
func (s *server) onReload(r descriptors.ReloadResult) {
	s.reloads.count(r.OK, time.Now())
	if s.refMetrics != nil {
		s.refMetrics.ConfigLoad(r.OK)
	}
	if r.OK {
		s.log.Info("rules loaded", zap.String("config", s.ruleOrigin()), zap.String("trigger", r.Trigger),
			zap.String("fingerprint", r.Fingerprint), zap.Int("domains", r.Domains), zap.Int("rules", r.Rules))
		return
	}
	problems := make([]string, 0, min(len(r.Problems), 50))
	for i, p := range r.Problems {
		if i == 50 {
			break
		}
		problems = append(problems, p.String())
	}
	errField := zap.Error(r.Err)
	if msg := options.LimitMessage(r.Err); msg != "" {
		errField = zap.String("error", msg)
	}
	s.log.Error("rules not reloaded; keeping the previous rules", zap.String("config", s.ruleOrigin()),
		zap.String("trigger", r.Trigger), errField, zap.Strings("problems", problems))
}

// ruleOrigin names where the rules come from, for logs: the --config path,
// or xds:// and the xDS server.
func (s *server) ruleOrigin() string {
	if s.opts.ConfigSource == options.SourceXDS {
		return "xds://" + s.opts.xds.Server
	}
	return s.opts.Config
}

// checkRuleFiles reads the HMAC secret and the rule files of a file source
// as serve would, without watching or serving them, so that a start that
// fails for another reason reports their problems too. Rules from xDS or a
// secret shared through Redis need the network: nil, they are not checked.
func checkRuleFiles(o *settings, getenv func(string) string) error {
	if o.ConfigSource == options.SourceXDS || compat.UsesSharedSecret(o.Options, getenv) {
		return nil
	}
	secret, _, err := options.ReadSecret(o.Options, getenv)
	if err != nil {
		return err
	}
	if _, err = descriptors.Load(o.Config, descriptorOptions(o, secret)); err != nil {
		return rulesError(options.Label("config", o.Given), err)
	}
	return nil
}

// descriptorOptions is how the rules of o are compiled with secret.
func descriptorOptions(o *settings, secret []byte) descriptors.Options {
	fm, _ := limiter.ParseFailureMode(o.DefaultFailureMode) // checked by options.Serve
	charge, _ := limiter.ParseCharge(o.DefaultCharge)       // checked by options.Serve
	return descriptors.Options{Secret: secret, DefaultFailureMode: fm, Limits: o.ConfigLimits.Limits(), ShadowAll: o.ShadowAll,
		DefaultCharge: charge}
}

// chargeMeaning says in the start log what the default charge does.
func chargeMeaning(c limiter.Charge) string {
	if c == limiter.ChargeAlways {
		return "the rules that set no charge record a denied request's hits (up to twice the limit), as envoyproxy/ratelimit does unless STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true"
	}
	return "the rules that set no charge record nothing for a denied request"
}

// loadRules reads the HMAC secret and the rules; the first load counts as a
// successful reload.
func (s *server) loadRules(ctx context.Context) error {
	secret, from, err := options.ReadSecret(s.opts.Options, s.getenv)
	if err != nil {
		return err
	}
	switch {
	case s.secret.read != nil:
		secret, from = s.secret.read, "redis"
	case s.secret.wait != nil:
		// A per-process placeholder: nothing keyed with it reaches the
		// store (the gate is closed) until awaitSecret keys the rules with
		// the shared secret.
		from = "redis, not read yet"
	}
	dopts := descriptorOptions(s.opts, secret)
	s.log.Info("counting of denied requests", zap.String("default_charge", dopts.DefaultCharge.String()),
		zap.String("meaning", chargeMeaning(dopts.DefaultCharge)))
	warnRandom := func() {
		if from == "random" {
			s.log.Warn("no HMAC secret given (--hmac-secret-file or " + options.SecretEnv + "): using a random per-process secret; fine for the memory store, but subjects change on restart")
		}
	}
	if s.opts.ConfigSource == options.SourceXDS {
		warnRandom()
		x, err := xdsrules.Start(ctx, &s.opts.xds, xdsrules.StartConfig{
			Rules: dopts, OnReload: s.onReload, Registerer: s.reg, Log: s.log, Label: s.opts.Label, Config: s.opts.Config,
		})
		if err != nil {
			return err
		}
		s.rules = &ruleSet{ruleSource: x, x: x}
		return nil
	}
	s.rules, err = newRuleSet(s.opts.Config, dopts, s.onReload)
	if err != nil {
		return rulesError(s.opts.Label("config"), err)
	}
	warnRandom()
	s.onReload(s.rules.w.Last())
	if s.hooks.watcher != nil {
		s.hooks.watcher(s.rules.w)
	}
	return nil
}

// startReloads reloads the rules on SIGHUP (or the test hook) and on file
// changes until ctx is done. It returns the function that stops listening
// for SIGHUP.
func (s *server) startReloads(ctx context.Context) (stop func()) {
	stop = func() {}
	hup := s.hooks.reloadSignals
	if hup == nil {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGHUP)
		stop = func() { signal.Stop(sig) }
		hup = sig
	}
	s.background(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				s.log.Info("SIGHUP: reloading rules")
				s.rules.reload()
			}
		}
	})
	s.background(func() {
		if err := s.rules.watch(ctx); err != nil && ctx.Err() == nil {
			s.log.Error("rule file watcher stopped; SIGHUP still reloads", zap.Error(err))
		}
	})
	return stop
}
