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
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/envoy-rls/envoy-rls/pkg/audit"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/denycache"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/failover"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
	"github.com/envoy-rls/envoy-rls/pkg/topk"
)

// server is one running serve command.
type server struct {
	opts     Options
	log      *zap.Logger
	reg      *prometheus.Registry
	metrics  *metrics
	rules    *ruleSet
	store    limiter.Store
	ping     pinger   // nil: always reachable
	tracing  *tracing // nil: tracing off
	health   *health.Server
	draining atomic.Bool

	// storeState is the store's last known state (/healthz, store_up).
	storeState *storeState
	// sharedSecret is the HMAC secret shared through Redis (compat.go),
	// nil when the secret is configured or per process.
	sharedSecret []byte
	// clock is the memory store's and the responses' clock: nil (the
	// system clock) except in a test build (testclock.go).
	clock limiter.Clock
	// adminAuth checks the admin API's tokens; nil: the API is off (404).
	adminAuth *adminAuth
	// top tracks the top consumers and usage of each policy.
	top *topk.Tracker
	// audit is the audit sink; nil when --audit-sink is not set.
	audit *audit.Sink
}

// serve runs the server until ctx is done or a server fails: it loads the
// rules, opens the store, listens, serves gRPC and admin, reloads on SIGHUP
// and file changes, then drains. Background work (sweeps, reloads, the
// servers) ends with ctx; the store closes after all of it has returned.
func serve(ctx context.Context, o Options, getenv func(string) string, log *zap.Logger, h hooks) error {
	s := &server{opts: o, log: log, reg: prometheus.NewRegistry()}
	if err := s.startCompat(); err != nil {
		return err
	}
	s.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if err := announceBuild(log, s.reg); err != nil {
		return err
	}
	var err error
	if s.adminAuth, err = newAdminAuth(o.AdminTokenFile, time.Now, log); err != nil {
		return fmt.Errorf("--admin-token-file: %w", err)
	}
	if s.metrics, err = newMetrics(s.reg); err != nil {
		return err
	}
	if err := s.startTop(); err != nil {
		return err
	}
	if s.clock, err = testClock(getenv); err != nil {
		return err
	}
	if p, from := gcPercent(&o, getenv); p != 0 {
		// Process-wide; put back on return for in-process callers (tests).
		defer debug.SetGCPercent(debug.SetGCPercent(p))
		log.Info("garbage collector target", zap.Int("gc_percent", p), zap.String("from", from))
	}
	if usesSharedSecret(&o, getenv) {
		if s.sharedSecret, err = s.fetchSharedSecret(ctx); err != nil {
			return err
		}
		log.Warn(msgSharedSecret, zap.String("key", o.HMACSecretRedisKey))
	}
	if err := s.loadRules(ctx, getenv, h); err != nil {
		return err
	}
	defer s.rules.stop()

	tr, stopTracing, err := startTracing(ctx, &o, getenv, log, h.spanExporter)
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

	store, closeFn, err := s.openStore(ctx, &wg)
	if err != nil {
		return err
	}
	closeStore = closeFn
	if s.sharedSecret != nil {
		recheck := sharedSecretRecheck
		if h.secretRecheck > 0 {
			recheck = h.secretRecheck
		}
		s.keepSharedSecret(ctx, &wg, s.sharedSecret, recheck)
	}
	if err := s.frontStore(store, h); err != nil {
		return err
	}
	if s.storeState, err = newStoreState(o.Store, s.ping, s.reg, log); err != nil {
		return err
	}
	s.storeState.run(ctx, &wg)
	headers, _ := headerMode(o.DefaultHeaders) // checked by o.check
	// Stopped after the drain: the last calls are sent.
	observer, stopStatsd, err := s.startStatsd()
	if err != nil {
		return err
	}
	defer stopStatsd()
	// Stopped after the drain too: the last calls' denials are written.
	auditor, stopAudit, err := s.startAudit(h.stdout)
	if err != nil {
		return err
	}
	defer stopAudit()
	// The service's store answers failures by each policy's failure mode;
	// the admin API reads s.store itself, failures included.
	answering, err := failover.New(s.store, s.failoverConfig())
	if err != nil {
		return err
	}
	svc, err := rls.New(rls.Config{
		Rules:          s.rules.rules,
		Store:          answering,
		Metrics:        s.metrics.rpc,
		Logger:         log,
		DefaultHeaders: headers,
		HeaderNames:    o.headerNames(),
		TracerProvider: s.tracing.provider(),
		Received:       received,
		Claim:          claim,
		Observer:       s.withTop(observer),
		Clock:          s.clock,
		Auditor:        auditor,
		RequestIDKey:   o.AuditRequestIDKey,
	})
	if err != nil {
		return err
	}

	creds, err := o.grpcCredsOption()
	if err != nil {
		return err
	}
	grpcLis, adminLis, err := s.listen()
	if err != nil {
		return err
	}
	limited, err := limitConnections(grpcLis, o.GRPCMaxConnections, s.reg)
	if err != nil {
		_ = grpcLis.Close()
		_ = adminLis.Close()
		return err
	}
	grpcLis = limited
	guard, err := newReceiveGuard(o.GRPCReceiveTimeout, o.GRPCMaxIncompleteRequests, svc.CountCut, s.reg)
	if err != nil {
		_ = grpcLis.Close()
		_ = adminLis.Close()
		return err
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		guard.run(ctx)
	}()
	gs := s.grpcServer(svc, guard, creds)
	admin := s.adminServer()
	errc := startServers(&wg, gs, grpcLis, admin, adminLis)
	defer s.startReloads(ctx, &wg, h)()

	log.Info("serving",
		zap.String("grpc_addr", grpcLis.Addr().String()),
		zap.String("admin_addr", adminLis.Addr().String()),
		zap.String("store", o.Store),
		zap.String("config", s.ruleOrigin()),
		zap.String("default_headers", o.DefaultHeaders),
		zap.String("readiness", o.Readiness))
	if h.listening != nil {
		h.listening(grpcLis.Addr().String(), adminLis.Addr().String())
	}

	var runErr error
	select {
	case <-ctx.Done():
		log.Info("stop requested: draining", zap.Duration("drain_timeout", o.DrainTimeout))
	case runErr = <-errc:
		log.Error("a server failed: stopping", zap.Error(runErr))
	}
	s.drain(gs, admin)
	if runErr != nil {
		return fmt.Errorf("%w: %v", ErrFailed, runErr)
	}
	return nil
}

// loadRules reads the HMAC secret and the rules; the first load counts as a
// successful reload.
func (s *server) loadRules(ctx context.Context, getenv func(string) string, h hooks) error {
	secret, from, err := readSecret(&s.opts, getenv)
	if err != nil {
		return err
	}
	if s.sharedSecret != nil {
		secret, from = s.sharedSecret, "redis"
	}
	fm, _ := limiter.ParseFailureMode(s.opts.DefaultFailureMode) // checked by o.check
	dopts := descriptors.Options{Secret: secret, DefaultFailureMode: fm, Limits: s.opts.ConfigLimits.limits(), ShadowAll: s.opts.ShadowAll}
	if s.opts.ConfigSource == SourceXDS {
		if from == "random" {
			s.log.Warn("no HMAC secret given (--hmac-secret-file or " + SecretEnv + "): using a random per-process secret; fine for the memory store, but subjects change on restart")
		}
		x, err := s.startXDS(ctx, dopts)
		if err != nil {
			return err
		}
		s.rules = &ruleSet{x: x}
		return nil
	}
	s.rules, err = newRuleSet(s.opts.Config, dopts, s.onReload)
	if err != nil {
		return rulesError(label("config", s.opts.given), err)
	}
	if from == "random" {
		s.log.Warn("no HMAC secret given (--hmac-secret-file or " + SecretEnv + "): using a random per-process secret; fine for the memory store, but subjects change on restart")
	}
	s.onReload(s.rules.w.Last())
	if h.watcher != nil {
		h.watcher(s.rules.w)
	}
	return nil
}

// frontStore sets s.store: store behind the test wrapper, if any, and the
// local deny cache, if enabled. The deny cache sits in front of both: it
// repeats the store's own denials.
func (s *server) frontStore(store limiter.Store, h hooks) error {
	if h.wrapStore != nil {
		store = h.wrapStore(store)
	}
	if p, ok := store.(pinger); ok {
		s.ping = p
	}
	if s.opts.LocalCache {
		var err error
		if store, err = denycache.New(denycache.Config{Store: store, Size: s.opts.LocalCacheSize, Observer: s.metrics.cache, Clock: s.clock}); err != nil {
			return err
		}
	}
	s.store = store
	return nil
}

// listen opens the gRPC and admin listeners (both or neither).
func (s *server) listen() (grpcLis, adminLis net.Listener, err error) {
	network, addr := "tcp", s.opts.GRPCAddr
	if p, ok := strings.CutPrefix(addr, "unix:"); ok {
		network, addr = "unix", p
	}
	grpcLis, err = net.Listen(network, addr)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: must be an address this process can listen on: %w", label("grpc-addr", s.opts.given), err)
	}
	adminLis, err = net.Listen("tcp", s.opts.AdminAddr)
	if err != nil {
		_ = grpcLis.Close()
		return nil, nil, fmt.Errorf("%s: must be an address this process can listen on: %w", label("admin-addr", s.opts.given), err)
	}
	return grpcLis, adminLis, nil
}

// grpcServer builds the gRPC server with the rate-limit, health and
// reflection services, and reports it serving.
func (s *server) grpcServer(svc *rls.Server, guard *receiveGuard, creds grpc.ServerOption) *grpc.Server {
	opts := append(s.opts.grpcServerOptions(guard),
		// Calls run on reused goroutines (up to this many at once; gRPC
		// starts a goroutine per call beyond): a fresh goroutine per call
		// grows its stack on every call through the Redis client (copystack
		// was 15 % of server CPU in a profile at 64 calls).
		grpc.NumStreamWorkers(streamWorkers),
	)
	if o := s.tracing.serverOption(); o != nil {
		opts = append(opts, o)
	}
	if creds != nil {
		opts = append(opts, creds)
	}
	gs := grpc.NewServer(opts...)
	svc.Register(gs)
	s.health = health.NewServer()
	healthpb.RegisterHealthServer(gs, s.health)
	reflection.Register(gs)
	s.setServing(true)
	return gs
}

// startServers serves gRPC and admin on their listeners until they are
// stopped; the channel receives the failure of either.
func startServers(wg *sync.WaitGroup, gs *grpc.Server, grpcLis net.Listener, admin *http.Server, adminLis net.Listener) <-chan error {
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
