package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/internal/admin"
	"github.com/envoy-rls/envoy-rls/internal/buildinfo"
	"github.com/envoy-rls/envoy-rls/internal/compat"
	"github.com/envoy-rls/envoy-rls/internal/grpcserve"
	"github.com/envoy-rls/envoy-rls/internal/options"
	"github.com/envoy-rls/envoy-rls/internal/refmetrics"
	"github.com/envoy-rls/envoy-rls/internal/statsd"
	"github.com/envoy-rls/envoy-rls/internal/store"
	"github.com/envoy-rls/envoy-rls/internal/tracing"
	"github.com/envoy-rls/envoy-rls/internal/xdsrules"
	"github.com/envoy-rls/envoy-rls/pkg/audit"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
	"github.com/envoy-rls/envoy-rls/pkg/topk"
)

// server is one running serve command.
type server struct {
	opts *settings
	log  *zap.Logger
	reg  *prometheus.Registry
	// rpcMetrics are the service's; reloads count the rule loads.
	rpcMetrics *rls.Metrics
	reloads    *reloadMetrics
	// secretMismatch is 1 while the shared secret's key holds another
	// value than this replica's (compat.SecretKeeper).
	secretMismatch prometheus.Gauge
	// storeMetrics are the stores' collectors.
	storeMetrics *store.Metrics
	rules        *ruleSet
	store        limiter.Store
	ping         admin.Pinger     // nil: always reachable
	tracing      *tracing.Tracing // nil: tracing off
	// sharedSecret is the HMAC secret shared through Redis (compat),
	// read before serving; nil when the secret is configured or per
	// process, or not read yet (secretWait).
	sharedSecret []byte
	// secretWait, when the shared secret could not be read before
	// serving, goes on reading it while gate answers every call by its
	// policy's failure mode (awaitSecret); nil otherwise.
	secretWait *compat.SecretFetch
	gate       *compat.SecretGate
	// secretNotYet is why the first attempt did not read it.
	secretNotYet error
	// clock is the memory store's and the responses' clock: nil (the
	// system clock) except in a test build (testclock.go).
	clock limiter.Clock
	// top tracks the top consumers and usage of each policy.
	top *topk.Tracker
	// audit is the audit sink; nil when --audit-sink is not set.
	audit *audit.Sink
	// refMetrics are the reference's Prometheus metrics; nil when
	// --reference-metrics-addr is not set (refmetrics.go).
	refMetrics *refmetrics.Sink
	// gcAutomatic: serve chose the garbage collector's target (neither
	// --gc-percent nor GOGC is set).
	gcAutomatic bool
}

// serve runs the server until ctx is done or a server fails: it loads the
// rules, opens the store, listens, serves gRPC and admin, reloads on SIGHUP
// and file changes, then drains. Background work (sweeps, reloads, the
// servers) ends with ctx; the store closes after all of it has returned.
func serve(ctx context.Context, o *settings, getenv func(string) string, log *zap.Logger, h hooks) error {
	s := &server{opts: o, log: log, reg: admin.NewRegistry()}
	for _, w := range o.CompatWarnings {
		log.Warn("reference setting " + w)
	}
	if err := buildinfo.Announce(log, s.reg); err != nil {
		return err
	}
	adminAuth, err := admin.NewAuth(admin.AuthConfig{Path: o.AdminTokenFile, Log: log, Registerer: s.reg})
	if err != nil {
		// The rule files are read too, so that one start reports both.
		return errors.Join(fmt.Errorf("--admin-token-file: %w", err), checkRuleFiles(o, getenv))
	}
	if s.rpcMetrics, err = rls.NewMetrics(s.reg); err != nil {
		return err
	}
	if s.reloads, err = newReloadMetrics(s.reg); err != nil {
		return err
	}
	if s.secretMismatch, err = compat.NewMismatchGauge(s.reg); err != nil {
		return err
	}
	if s.storeMetrics, err = store.NewMetrics(s.reg); err != nil {
		return err
	}
	if s.top, err = topk.Start(&o.top, s.reg); err != nil {
		return err
	}
	if s.clock, err = testClock(getenv); err != nil {
		return err
	}
	ratio, _ := o.statsd.Ratio() // checked by statsd.Flags.Check
	if s.refMetrics, err = refmetrics.Start(&o.refmetrics, ratio, s.reg, o.Label); err != nil {
		return err
	}
	if p, from := o.store.GCTarget(o.Store, getenv); p != 0 {
		// Process-wide; put back on return for in-process callers (tests).
		defer debug.SetGCPercent(debug.SetGCPercent(p))
		s.gcAutomatic = o.store.GCPercent == 0
		log.Info("garbage collector target", zap.Int("gc_percent", p), zap.String("from", from))
	}
	secretRecheck := compat.SharedSecretRecheck
	if h.secretRecheck > 0 {
		secretRecheck = h.secretRecheck
	}
	if compat.UsesSharedSecret(o.Options, getenv) {
		// One attempt before serving: a key that must not be adopted stops
		// the start at once. Redis not answering does not: the replica
		// serves by failure mode meanwhile (awaitSecret).
		fetch, err := compat.NewSecretFetch(o.Options, o.store.RedisConfig, secretRecheck, log)
		if err != nil {
			return err
		}
		if s.sharedSecret, s.secretNotYet, err = fetch.First(ctx); err != nil {
			return err
		}
		if s.sharedSecret != nil {
			log.Warn(compat.MsgSharedSecret, zap.String("key", o.HMACSecretRedisKey))
		} else {
			s.secretWait = fetch
		}
	}
	if err := s.loadRules(ctx, getenv, h); err != nil {
		return err
	}
	defer s.rules.stop()

	tr, stopTracing, err := tracing.Start(ctx, &o.tracing, o.Label, log, h.spanExporter)
	if err != nil {
		return err
	}
	// Runs last: the spans of the drain and of the store's last calls are
	// flushed.
	defer stopTracing()
	s.tracing = tr

	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	closeStore := func() {}
	defer func() {
		cancel()
		wg.Wait()
		closeStore()
	}()

	storeConfig := store.Config{Kind: o.Store, Clock: s.clock, Metrics: s.storeMetrics, TracerProvider: s.tracing.Provider(), Log: log, GCAutomatic: s.gcAutomatic}
	st, closeFn, err := store.Open(ctx, &o.store, storeConfig)
	if err != nil {
		return err
	}
	closeStore = closeFn
	if s.sharedSecret != nil {
		s.keepSecret(ctx, &wg, s.sharedSecret, secretRecheck)
	}
	if s.secretWait != nil {
		s.gate = compat.NewSecretGate(st, s.secretNotYet)
		st = s.gate
	}
	if h.wrapStore != nil {
		st = h.wrapStore(st)
	}
	if p, ok := st.(admin.Pinger); ok {
		s.ping = p
	}
	if s.store, err = o.store.WithDenyCache(st, storeConfig); err != nil {
		return err
	}
	storeState, err := admin.NewStoreState(o.Store, s.ping, s.reg, log)
	if err != nil {
		return err
	}
	if s.ping != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			storeState.Probe(ctx)
			every(ctx, admin.StoreProbeInterval, func(time.Time) { storeState.Probe(ctx) })
		}()
	}
	headers, _ := descriptors.ParseHeaderMode(o.DefaultHeaders) // checked by options.Serve
	// Stopped after the drain: the last calls are sent.
	observer, stopStatsd, err := statsd.Start(&o.statsd, log)
	if err != nil {
		return err
	}
	defer stopStatsd()
	// Stopped after the drain too: the last calls' denials are written.
	var stopAudit func()
	s.audit, stopAudit, err = audit.Start(&o.audit, audit.StartConfig{
		Registerer: s.reg, Log: log, Label: o.Label, Stdout: h.stdout, Redis: o.store.RedisConfig, Top: s.top,
	})
	if err != nil {
		return err
	}

	defer stopAudit()
	tlsConfig, err := o.GRPCTLSConfig()
	if err != nil {
		return err
	}
	gsrv, err := grpcserve.New(grpcserve.Config{
		Limits:     o.GRPC,
		TLS:        tlsConfig,
		Cuts:       s.rpcMetrics,
		Options:    s.tracing.ServerOptions(),
		Registerer: s.reg,
		Log:        log,
	})
	if err != nil {
		return err
	}
	// The service's store answers failures by each policy's failure mode,
	// and keeps the charges the store could not record; the admin API
	// reads s.store itself, failures included.
	answering, stopAnswering, err := o.store.Answering(ctx, s.store, s.rules.Current().Policies(), storeConfig)
	if err != nil {
		return err
	}
	closeOpen := closeStore
	closeStore = func() { stopAnswering(); closeOpen() }
	svc, err := rls.New(rls.Config{
		Rules:          s.rules.rules,
		Store:          answering,
		Metrics:        s.rpcMetrics,
		Logger:         log,
		DefaultHeaders: headers,
		HeaderNames:    o.HeaderNames(),
		TracerProvider: s.tracing.Provider(),
		Admission:      gsrv.Admission(),
		Observer:       observersOf(observer, s.refObserver(), topObserver{s.top}),
		Clock:          s.clock,
		Auditor:        auditorOf(s.audit),
		RequestIDKey:   o.audit.RequestIDKey,
		// The entries the metadata repeats go back to the proxy that sent
		// them, bounded (rls.MetadataEntriesBytes).
		DynamicMetadata: o.ResponseDynamicMetadata,
		// Checked by options.Serve.
		MaxOverridePolicies: o.OverrideMaxPolicies,
	})
	if err != nil {
		return err
	}
	gsrv.Register(svc)

	grpcLis, adminLis, err := s.listen()
	if err != nil {
		return err
	}
	refAddr, stopRef, err := s.refMetrics.Serve(&o.refmetrics, o.Label, log)
	if err != nil {
		_ = grpcLis.Close()
		_ = adminLis.Close()
		return err
	}
	defer stopRef()
	s.every(ctx, &wg, gsrv.SweepInterval(), gsrv.Sweep)
	adm, err := admin.New(admin.Config{
		Rules:                    s.rules,
		Store:                    s.store,
		StoreState:               storeState,
		Registry:                 s.reg,
		ConfigView:               func(full bool) any { return s.configView(full) },
		StoreReadiness:           o.Readiness == options.ReadinessStore,
		HealthcheckRequiresRules: o.HealthcheckRequiresRules,
		HealthcheckRequiresStore: o.HealthcheckRequiresStore,
		Pprof:                    o.Pprof,
		Auth:                     adminAuth,
		Top:                      s.top,
		Audit:                    s.audit,
		AuditSink:                o.audit.Sink,
		Log:                      log,
	})
	if err != nil {
		_ = grpcLis.Close()
		_ = adminLis.Close()
		return err
	}
	s.every(ctx, &wg, admin.TickInterval, adm.Tick)
	adminSrv := adm.HTTPServer()
	errc := startServers(&wg, gsrv, grpcLis, adminSrv, adminLis)
	defer s.startReloads(ctx, &wg, h)()
	secretErr := make(chan error, 1)
	if s.secretWait != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.awaitSecret(ctx, &wg, secretRecheck, storeState); err != nil && ctx.Err() == nil {
				secretErr <- err
			}
		}()
	}

	s.logServing(grpcLis.Addr().String(), adminLis.Addr().String(), refAddr)
	if h.listening != nil {
		h.listening(grpcLis.Addr().String(), adminLis.Addr().String())
	}

	var runErr, refused error
	select {
	case <-ctx.Done():
		log.Info("stop requested: draining", zap.Duration("drain_timeout", o.DrainTimeout))
	case runErr = <-errc:
		log.Error("a server failed: stopping", zap.Error(runErr))
	case refused = <-secretErr:
		log.Error("the shared HMAC secret in Redis cannot be used: stopping as a start refused for it would")
	}
	s.drain(gsrv, adm, adminSrv)
	switch {
	case runErr != nil:
		return fmt.Errorf("%w: %v", ErrFailed, runErr)
	case refused != nil:
		// The start-up error, for main to print as at a refused start.
		return refused
	}
	return nil
}

// awaitSecret reads the shared HMAC secret that could not be read before
// serving, then keys the rules with it and opens the gate: the calls that
// were answered by their policies' failure mode are decided by Redis from
// then on. It returns the error of a key that must not be adopted, or
// ctx's when stopped first.
//
// A call that matched its rules just before they were keyed with the
// secret and reaches the store just after the gate opened is counted under
// the placeholder key once (a fresh state, which expires); every later
// call uses the shared secret's keys.
func (s *server) awaitSecret(ctx context.Context, wg *sync.WaitGroup, recheck time.Duration, st *admin.StoreState) error {
	secret, err := s.secretWait.Wait(ctx, s.gate.Waiting)
	if err != nil {
		return err
	}
	if err := s.rules.setSecret(secret); err != nil {
		return err
	}
	s.gate.Open()
	s.log.Warn(compat.MsgSharedSecret, zap.String("key", s.opts.HMACSecretRedisKey))
	s.log.Info(compat.MsgSecretRead, zap.String("key", s.opts.HMACSecretRedisKey))
	st.Probe(ctx)
	s.keepSecret(ctx, wg, secret, recheck)
	return nil
}

// keepSecret checks the shared secret's key every recheck
// (compat.SecretKeeper) until ctx ends.
func (s *server) keepSecret(ctx context.Context, wg *sync.WaitGroup, secret []byte, recheck time.Duration) {
	cfg, _ := s.opts.store.RedisConfig() // checked by compat.NewSecretFetch
	keeper := compat.NewSecretKeeper(cfg, s.opts.HMACSecretRedisKey, secret, recheck, s.secretMismatch, s.log)
	s.every(ctx, wg, recheck, func(time.Time) { keeper.Check(ctx) })
}

// loadRules reads the HMAC secret and the rules; the first load counts as a
// successful reload.
func (s *server) loadRules(ctx context.Context, getenv func(string) string, h hooks) error {
	secret, from, err := options.ReadSecret(s.opts.Options, getenv)
	if err != nil {
		return err
	}
	switch {
	case s.sharedSecret != nil:
		secret, from = s.sharedSecret, "redis"
	case s.secretWait != nil:
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
		s.rules = &ruleSet{x: x}
		return nil
	}
	s.rules, err = newRuleSet(s.opts.Config, dopts, s.onReload)
	if err != nil {
		return rulesError(options.Label("config", s.opts.Given), err)
	}
	warnRandom()
	s.onReload(s.rules.w.Last())
	if h.watcher != nil {
		h.watcher(s.rules.w)
	}
	return nil
}

// startServers serves gRPC and admin on their listeners until they are
// stopped; the channel receives the failure of either.
func startServers(wg *sync.WaitGroup, gs *grpcserve.Server, grpcLis net.Listener, admin *http.Server, adminLis net.Listener) <-chan error {
	errc := make(chan error, 2)
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := gs.Serve(grpcLis); err != nil {
			errc <- fmt.Errorf("gRPC server: %w", err)
		}
	}()
	go func() {
		defer wg.Done()
		if err := admin.Serve(adminLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("admin server: %w", err)
		}
	}()
	return errc
}

// startReloads reloads the rules on SIGHUP (or the test hook) and on file
// changes until ctx is done. It returns the function that stops listening
// for SIGHUP.
func (s *server) startReloads(ctx context.Context, wg *sync.WaitGroup, h hooks) (stop func()) {
	stop = func() {}
	hup := h.reloadSignals
	if hup == nil {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGHUP)
		stop = func() { signal.Stop(sig) }
		hup = sig
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				s.log.Info("SIGHUP: reloading rules")
				s.rules.reload()
			}
		}
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := s.rules.watch(ctx); err != nil && ctx.Err() == nil {
			s.log.Error("rule file watcher stopped; SIGHUP still reloads", zap.Error(err))
		}
	}()
	return stop
}

// drain takes the process out of rotation and stops within the drain time:
// readiness and gRPC health go false, the gRPC server stops accepting and
// finishes in-flight calls (cut off at --drain-timeout), then the admin
// server closes.
func (s *server) drain(gsrv *grpcserve.Server, adm *admin.Server, admin *http.Server) {
	adm.SetDraining()
	gsrv.Drain(s.opts.DrainTimeout)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := admin.Shutdown(ctx); err != nil {
		_ = admin.Close()
	}
}

// every calls fn with the tick's time every d until ctx is done, in the
// background work that serve waits for (wg).
func (s *server) every(ctx context.Context, wg *sync.WaitGroup, d time.Duration, fn func(now time.Time)) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		every(ctx, d, fn)
	}()
}

// every calls fn with the tick's time every d until ctx is done.
func every(ctx context.Context, d time.Duration, fn func(now time.Time)) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			fn(now)
		}
	}
}

// refObserver is the reference metrics' sink as an rls.Observer: nil when
// it is off.
func (s *server) refObserver() rls.Observer {
	if s.refMetrics == nil {
		return nil
	}
	return s.refMetrics
}
