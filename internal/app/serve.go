package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime/debug"
	"sync"
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
	"github.com/envoy-rls/envoy-rls/pkg/audit"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/leases"
	"github.com/envoy-rls/envoy-rls/pkg/rlqs"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
	"github.com/envoy-rls/envoy-rls/pkg/topk"
)

// server is one running serve command, assembled step by step by serve.
type server struct {
	opts   *settings
	getenv func(string) string
	log    *zap.Logger
	hooks  hooks
	reg    *prometheus.Registry
	// bg is the background work (sweeps, probes, reloads, the servers),
	// which ends with the context serve gives it.
	bg sync.WaitGroup
	// stops run when serve returns, the last added first.
	stops []func()

	adminAuth      *admin.Auth
	rpcMetrics     *rls.Metrics
	reloads        *reloadMetrics
	secretMismatch prometheus.Gauge // compat.SecretKeeper's
	storeConfig    store.Config
	// exchange shares the RLQS demands among replicas (nil: the memory
	// store, one replica).
	exchange rlqs.Exchange
	// quota is the RLQS service (nil: --rlqs=false).
	quota *rlqs.Service
	top   *topk.Tracker
	// refMetrics are the reference's Prometheus metrics; audit is the
	// audit sink; nil when off.
	refMetrics *refmetrics.Sink
	audit      *audit.Sink
	tracing    *tracing.Tracing // nil: tracing off
	rules      *ruleSet
	secret     sharedSecret
	// store is the store behind the deny cache, which the admin API reads
	// (failures included); the service's answers its failures (Answering).
	store      limiter.Store
	storeState *admin.StoreState
	grpc       *grpcserve.Server
}

// serve runs the server until ctx is done or a server fails: it loads the
// rules, opens the store, listens, serves gRPC and admin, reloads on SIGHUP
// and file changes, then drains. Background work (sweeps, reloads, the
// servers) ends with ctx; the store closes after all of it has returned.
func serve(ctx context.Context, o *settings, getenv func(string) string, log *zap.Logger, h hooks) error {
	s := &server{opts: o, getenv: getenv, log: log, hooks: h, reg: admin.NewRegistry()}
	defer s.stop()
	if err := s.prepare(); err != nil {
		return err
	}
	if err := s.readSharedSecret(ctx); err != nil {
		return err
	}
	if err := s.loadRules(ctx); err != nil {
		return err
	}
	s.atStop(s.rules.stop)
	tr, stopTracing, err := tracing.Start(ctx, &o.tracing, o.Label, log, h.spanExporter)
	if err != nil {
		return err
	}
	// Runs last: the spans of the drain and of the store's last calls are
	// flushed.
	s.atStop(stopTracing)
	s.tracing = tr

	ctx, cancel := context.WithCancel(ctx)
	var closeStore []func() // after the background work, the last added first
	s.atStop(func() {
		cancel()
		s.bg.Wait()
		runLastFirst(closeStore)
	})
	if err := s.openStore(ctx, &closeStore); err != nil {
		return err
	}
	if err := s.newService(ctx, &closeStore); err != nil {
		return err
	}
	adm, adminSrv, errc, err := s.startServing(ctx)
	if err != nil {
		return err
	}
	return s.wait(ctx, adm, adminSrv, errc)
}

// atStop runs fn when serve returns, before what was added earlier.
func (s *server) atStop(fn func()) { s.stops = append(s.stops, fn) }

// stop runs the functions of atStop, the last added first.
func (s *server) stop() { runLastFirst(s.stops) }

func runLastFirst(fns []func()) {
	for i := len(fns) - 1; i >= 0; i-- {
		fns[i]()
	}
}

// prepare does what needs neither rules nor store: the reference
// settings' warnings, the build, the admin tokens, the metrics, the top
// consumers, the clock, the reference metrics' mapping and the garbage
// collector's target.
func (s *server) prepare() error {
	o := s.opts
	for _, w := range o.CompatWarnings {
		s.log.Warn("reference setting " + w)
	}
	if err := buildinfo.Announce(s.log, s.reg); err != nil {
		return err
	}
	var err error
	if s.adminAuth, err = admin.NewAuth(admin.AuthConfig{Path: o.AdminTokenFile, Log: s.log, Registerer: s.reg}); err != nil {
		// The rule files are read too, so that one start reports both.
		return errors.Join(fmt.Errorf("--admin-token-file: %w", err), checkRuleFiles(o, s.getenv))
	}
	s.storeConfig = store.Config{Kind: o.Store, Log: s.log}
	if s.rpcMetrics, err = rls.NewMetrics(s.reg); err != nil {
		return err
	}
	if s.reloads, err = newReloadMetrics(s.reg); err != nil {
		return err
	}
	if s.secretMismatch, err = compat.NewMismatchGauge(s.reg); err != nil {
		return err
	}
	if s.storeConfig.Metrics, err = store.NewMetrics(s.reg); err != nil {
		return err
	}
	if s.top, err = topk.Start(&o.top, s.reg); err != nil {
		return err
	}
	// The clock of the stores and the responses: nil (the system clock)
	// except in a test build (testclock.go).
	if s.storeConfig.Clock, err = testClock(s.getenv); err != nil {
		return err
	}
	ratio, _ := o.statsd.Ratio() // checked by statsd.Flags.Check
	if s.refMetrics, err = refmetrics.Start(&o.refmetrics, ratio, s.reg, o.Label); err != nil {
		return err
	}
	if p, from := o.store.GCTarget(o.Store, s.getenv); p != 0 {
		// Process-wide; put back on return for in-process callers (tests).
		prev := debug.SetGCPercent(p)
		s.atStop(func() { debug.SetGCPercent(prev) })
		s.storeConfig.GCAutomatic = o.store.GCPercent == 0
		s.log.Info("garbage collector target", zap.Int("gc_percent", p), zap.String("from", from))
	}
	return nil
}

// openStore opens the store, behind the shared secret's gate while it is
// not read, the test wrapper, the leases wrapper and the deny cache, and
// probes its health.
// Its closers join closeStore.
func (s *server) openStore(ctx context.Context, closeStore *[]func()) error {
	o := s.opts
	s.storeConfig.TracerProvider = s.tracing.Provider()
	s.storeConfig.Every = func(d time.Duration, fn func(time.Time)) { s.every(ctx, d, fn) }
	st, closeFn, err := store.Open(ctx, &o.store, s.storeConfig)
	if err != nil {
		return err
	}
	*closeStore = append(*closeStore, closeFn)
	if o.rlqs.On {
		// The replicas' demands, published for three ticks: a replica
		// that stops publishing leaves its share within three ticks.
		if s.exchange, err = s.storeConfig.Exchange(st, 3*o.rlqs.Tick); err != nil {
			return err
		}
	}
	st = s.guardStore(ctx, st)
	if s.hooks.wrapStore != nil {
		st = s.hooks.wrapStore(st)
	}
	ping, _ := st.(admin.Pinger) // nil: always reachable
	// The leases wrapper keeps a batch with leases all or nothing, below the
	// deny cache (which sees whole batches).
	if s.store, err = o.store.WithDenyCache(leases.New(st, st), s.storeConfig); err != nil {
		return err
	}
	if s.storeState, err = admin.NewStoreState(o.Store, ping, s.reg, s.log); err != nil {
		return err
	}
	if ping != nil {
		s.background(func() {
			s.storeState.Probe(ctx)
			tick(ctx, admin.StoreProbeInterval, func(time.Time) { s.storeState.Probe(ctx) })
		})
	}
	return nil
}

// newService builds the gRPC server and the RateLimitService on it: the
// statsd and audit sinks, the store that answers failures (whose closer
// joins closeStore) and the observers.
func (s *server) newService(ctx context.Context, closeStore *[]func()) error {
	o := s.opts
	// Stopped after the drain: the last calls are sent.
	observer, stopStatsd, err := statsd.Start(&o.statsd, s.log)
	if err != nil {
		return err
	}
	s.atStop(stopStatsd)
	// Stopped after the drain too: the last calls' denials are written.
	var stopAudit func()
	s.audit, stopAudit, err = audit.Start(&o.audit, audit.StartConfig{
		Registerer: s.reg, Log: s.log, Label: o.Label, Stdout: s.hooks.stdout, Redis: o.store.RedisConfig, Top: s.top,
	})
	if err != nil {
		return err
	}
	s.atStop(stopAudit)
	tlsConfig, err := o.GRPCTLSConfig()
	if err != nil {
		return err
	}
	s.grpc, err = grpcserve.New(grpcserve.Config{Limits: o.GRPC, TLS: tlsConfig, Cuts: s.rpcMetrics,
		Options: s.tracing.ServerOptions(), Registerer: s.reg, Log: s.log})
	if err != nil {
		return err
	}
	answering, stopAnswering, err := o.store.Answering(ctx, s.store, s.rules.Current().Policies(), s.storeConfig)
	if err != nil {
		return err
	}
	*closeStore = append(*closeStore, stopAnswering)
	headers, _ := descriptors.ParseHeaderMode(o.DefaultHeaders) // checked by options.Serve
	svc, err := rls.New(rls.Config{
		Rules: s.rules.rules, Store: answering, Metrics: s.rpcMetrics, Logger: s.log,
		DefaultHeaders: headers, HeaderNames: o.HeaderNames(), TracerProvider: s.tracing.Provider(),
		Admission: s.grpc.Admission(), Clock: s.storeConfig.Clock,
		Observer: observersOf(observer, s.refObserver(), topObserver{s.top}),
		Auditor:  auditorOf(s.audit), RequestIDKey: o.audit.RequestIDKey,
		// The entries the metadata repeats go back to the proxy that sent
		// them, bounded (rls.MetadataEntriesBytes).
		DynamicMetadata:     o.ResponseDynamicMetadata,
		MaxOverridePolicies: o.OverrideMaxPolicies,
	})
	if err != nil {
		return err
	}
	s.grpc.Register(svc)
	return s.startQuota(ctx, answering)
}

// startQuota serves RLQS (--rlqs) on the gRPC server, from the rules and
// the answering store the RateLimitService uses: one budget for both.
func (s *server) startQuota(ctx context.Context, answering limiter.Store) error {
	f := &s.opts.rlqs
	if !f.On {
		return nil
	}
	cfg := f.Config()
	cfg.Rules, cfg.Store, cfg.Clock, cfg.Log = s.rules.Current, answering, s.storeConfig.Clock, s.log
	cfg.Exchange = s.exchange
	cfg.Denied = quotaDenialsOf(s.audit, s.storeConfig.Clock)
	var err error
	if cfg.Metrics, err = rlqs.NewMetrics(s.reg); err != nil {
		return err
	}
	q, err := rlqs.New(cfg)
	if err != nil {
		return err
	}
	s.grpc.RegisterQuota(q)
	s.quota = q
	s.background(func() { q.Run(ctx) })
	return nil
}

// startServing listens, serves gRPC, admin and the reference metrics in
// the background, starts the reloads and the shared secret's wait, and
// logs that it serves. errc receives the failure of a server, or the
// refusal of the shared secret read meanwhile.
func (s *server) startServing(ctx context.Context) (*admin.Server, *http.Server, <-chan error, error) {
	o := s.opts
	grpcLis, adminLis, err := s.listen()
	if err != nil {
		return nil, nil, nil, err
	}
	refAddr, stopRef, err := s.refMetrics.Serve(&o.refmetrics, o.Label, s.log)
	if err != nil {
		_ = grpcLis.Close()
		_ = adminLis.Close()
		return nil, nil, nil, err
	}
	s.atStop(stopRef)
	s.every(ctx, s.grpc.SweepInterval(), s.grpc.Sweep)
	adm, err := admin.New(admin.Config{
		Rules: s.rules, Store: s.store, StoreState: s.storeState, Registry: s.reg,
		ConfigView:               func(full bool) any { return s.configView(full) },
		StoreReadiness:           o.Readiness == options.ReadinessStore,
		HealthcheckRequiresRules: o.HealthcheckRequiresRules,
		HealthcheckRequiresStore: o.HealthcheckRequiresStore,
		Pprof:                    o.Pprof, Auth: s.adminAuth, Top: s.top, Audit: s.audit, AuditSink: o.audit.Sink, Log: s.log,
		Quota: s.quota,
	})
	if err != nil {
		_ = grpcLis.Close()
		_ = adminLis.Close()
		return nil, nil, nil, err
	}
	s.every(ctx, admin.TickInterval, adm.Tick)
	adminSrv := adm.HTTPServer()
	errc := make(chan error, 3)
	s.serveOn(grpcLis, "gRPC server", errc, func(l net.Listener) error { return s.grpc.Serve(l) })
	s.serveOn(adminLis, "admin server", errc, adminSrv.Serve)
	s.atStop(s.startReloads(ctx))
	s.awaitSecret(ctx, errc)
	s.logServing(grpcLis.Addr().String(), adminLis.Addr().String(), refAddr)
	if s.hooks.listening != nil {
		s.hooks.listening(grpcLis.Addr().String(), adminLis.Addr().String())
	}
	return adm, adminSrv, errc, nil
}

// serveOn serves on lis in the background until the server is stopped;
// errc receives its failure, named.
func (s *server) serveOn(lis net.Listener, name string, errc chan<- error, serve func(net.Listener) error) {
	s.background(func() {
		if err := serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("%s: %w", name, err)
		}
	})
}

// wait serves until ctx ends or errc receives, then drains.
func (s *server) wait(ctx context.Context, adm *admin.Server, adminSrv *http.Server, errc <-chan error) error {
	var runErr error
	var refused secretRefusal
	select {
	case <-ctx.Done():
		s.log.Info("stop requested: draining", zap.Duration("drain_timeout", s.opts.DrainTimeout))
	case runErr = <-errc:
		if errors.As(runErr, &refused) {
			s.log.Error("the shared HMAC secret in Redis cannot be used: stopping as a start refused for it would")
		} else {
			s.log.Error("a server failed: stopping", zap.Error(runErr))
		}
	}
	s.drain(adm, adminSrv)
	switch {
	case refused.error != nil:
		// The start-up error, for main to print as at a refused start.
		return refused.error
	case runErr != nil:
		return fmt.Errorf("%w: %v", ErrFailed, runErr)
	}
	return nil
}

// drain takes the process out of rotation and stops within the drain time:
// readiness and gRPC health go false, the gRPC server stops accepting and
// finishes in-flight calls (cut off at --drain-timeout), then the admin
// server closes.
func (s *server) drain(adm *admin.Server, adminSrv *http.Server) {
	adm.SetDraining()
	s.grpc.Drain(s.opts.DrainTimeout)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := adminSrv.Shutdown(ctx); err != nil {
		_ = adminSrv.Close()
	}
}

// background runs fn in the background work that serve waits for.
func (s *server) background(fn func()) {
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		fn()
	}()
}

// every calls fn with the tick's time every d until ctx is done, in the
// background work.
func (s *server) every(ctx context.Context, d time.Duration, fn func(now time.Time)) {
	s.background(func() { tick(ctx, d, fn) })
}

// tick calls fn with the tick's time every d until ctx is done.
func tick(ctx context.Context, d time.Duration, fn func(now time.Time)) {
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
