package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/internal/options"
	"github.com/envoy-rls/envoy-rls/internal/refmetrics"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
)

// newRefMetrics makes the sink of the reference's Prometheus metrics when
// --reference-metrics-addr is set (s.refMetrics stays nil otherwise): the
// mapping file is read here, so a bad one stops the start.
func (s *server) newRefMetrics() error {
	o := s.opts
	if o.ReferenceMetricsAddr == "" {
		return nil
	}
	ratio, _ := o.statsd.Ratio() // checked by statsd.Flags.Check
	mapper, err := o.ReferenceMapper()
	if err != nil {
		return err
	}
	dropped := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: rls.MetricsNamespace, Name: "reference_metrics_dropped_total",
		Help: "Stats not exported on --reference-metrics-addr, by reason: series_limit (the bound on series), invalid_name (a mapping made a name Prometheus refuses), type_conflict (a counter and a histogram mapped to one name).",
	}, []string{"reason"})
	if err := s.reg.Register(dropped); err != nil {
		return fmt.Errorf("registering %s_reference_metrics_dropped_total: %w", rls.MetricsNamespace, err)
	}
	s.refMetrics, err = refmetrics.New(refmetrics.Config{Mapper: mapper, NearLimitRatio: ratio, Dropped: dropped})
	return err
}

// refObserver is the reference metrics' sink as an rls.Observer: nil when
// it is off.
func (s *server) refObserver() rls.Observer {
	if s.refMetrics == nil {
		return nil
	}
	return s.refMetrics
}

// serveRefMetrics listens on --reference-metrics-addr and serves the
// reference's metrics at --reference-metrics-path there, in the background
// work serve waits for (wg). stop closes the server; addr is the bound
// address (empty when off).
func (s *server) serveRefMetrics(wg *sync.WaitGroup) (addr string, stop func(), err error) {
	if s.refMetrics == nil {
		return "", func() {}, nil
	}
	lis, err := net.Listen("tcp", s.opts.ReferenceMetricsAddr)
	if err != nil {
		return "", nil, fmt.Errorf("%s: must be an address this process can listen on: %w", options.Label("reference-metrics-addr", s.opts.Given), err)
	}
	path, metrics := s.opts.ReferenceMetricsPath, s.refMetrics.Handler()
	// The path is compared as given: it is the user's, not a mux pattern.
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path != path:
			http.NotFound(w, r)
		case r.Method != http.MethodGet && r.Method != http.MethodHead:
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		default:
			metrics.ServeHTTP(w, r)
		}
	})
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second, MaxHeaderBytes: 16 << 10}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("reference metrics server stopped", zap.Error(err))
		}
	}()
	return lis.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			_ = srv.Close()
		}
	}, nil
}
