package app

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors/xds"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
)

// TriggerXDS is the ReloadResult trigger of a version from the xDS server.
const TriggerXDS = "xds"

// xdsSource holds the rules received from the xDS server.
type xdsSource struct {
	opts     descriptors.Options
	server   string
	node     string
	onReload func(descriptors.ReloadResult)

	cur     atomic.Pointer[descriptors.Snapshot]
	last    atomic.Pointer[descriptors.ReloadResult]
	version atomic.Pointer[string] // the version in service
	state   atomic.Int32           // xds.State

	firstOnce sync.Once
	first     chan struct{} // closed once a version is in service

	connected prometheus.Gauge
	updates   *prometheus.CounterVec

	stop func() // cancels Run and waits for it
}

// apply is the client's Config.Apply: compile, swap on success.
func (x *xdsSource) apply(version string, cs []*rlsconf.RateLimitConfig) error {
	res := descriptors.ReloadResult{Time: time.Now(), Trigger: TriggerXDS}
	s, err := xds.Compile(cs, x.opts)
	if err != nil {
		res.Err = err
		var ce *descriptors.ConfigError
		if errors.As(err, &ce) {
			res.Problems = slices.Clone(ce.Problems)
		}
		x.updates.WithLabelValues("nack").Inc()
		if prev := x.cur.Load(); prev != nil {
			res.Fingerprint = prev.Fingerprint()
			res.Domains, res.Rules = prev.Size()
		}
	} else {
		res.OK = true
		x.cur.Store(s)
		x.version.Store(&version)
		x.updates.WithLabelValues("ack").Inc()
		res.Fingerprint = s.Fingerprint()
		res.Domains, res.Rules = s.Size()
		x.firstOnce.Do(func() { close(x.first) })
	}
	x.last.Store(&res)
	x.onReload(res)
	if err != nil {
		return fmt.Errorf("version %q refused: %w", version, err)
	}
	return nil
}

// versionInService is the version in service ("" before the first).
func (x *xdsSource) versionInService() string {
	if v := x.version.Load(); v != nil {
		return *v
	}
	return ""
}

// startXDS subscribes to the xDS server and, unless --force-start-without-
// initial-config, waits for the first valid version (at most
// --xds-initial-timeout). The client runs until s.rules.stop.
func (s *server) startXDS(ctx context.Context, opts descriptors.Options) (*xdsSource, error) {
	o := &s.opts.xdsOptions
	x := &xdsSource{opts: opts, server: o.XDSServer, node: o.XDSNodeID, onReload: s.onReload, first: make(chan struct{})}
	x.connected = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: rls.MetricsNamespace, Name: "xds_connected",
		Help: "1 while the stream to the xDS server is open and the server has answered on it, else 0.",
	})
	x.updates = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: rls.MetricsNamespace, Name: "xds_updates_total",
		Help: "Versions received from the xDS server, by answer: ack (rules in service) or nack (refused; the previous rules stay).",
	}, []string{"result"})
	for _, c := range []prometheus.Collector{x.connected, x.updates} {
		if err := s.reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering the xDS metrics: %w", err)
		}
	}
	x.updates.WithLabelValues("ack")
	x.updates.WithLabelValues("nack")
	creds, err := o.xdsCredentials()
	if err != nil {
		return nil, err
	}
	log := s.log.With(zap.String("xds_server", o.XDSServer), zap.String("xds_node", o.XDSNodeID))
	if s.opts.Config != "" {
		log.Warn("--config is not read with --config-source xds: the rules come from the xDS server", zap.String("config", s.opts.Config))
	}
	c, err := xds.New(xds.Config{
		Server: o.XDSServer, NodeID: o.XDSNodeID, NodeMetadata: o.XDSNodeMetadata.m(),
		Credentials: creds, Headers: o.XDSHeaders.m(),
		RetryInterval: o.XDSRetryInterval, MaxRetryInterval: o.XDSRetryMax,
		Apply: x.apply,
		OnState: func(st xds.State, err error) {
			x.state.Store(int32(st))
			if st == xds.Connected {
				x.connected.Set(1)
				log.Info("xds stream open")
				return
			}
			x.connected.Set(0)
			switch v := x.versionInService(); {
			case err == nil:
			case v == "":
				log.Warn("xds stream failed; reconnecting", zap.Error(err))
			default:
				log.Warn("xds stream failed; serving the rules in service and reconnecting", zap.Error(err), zap.String("version", v))
			}
		},
	})
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.Run(runCtx)
	}()
	x.stop = func() {
		cancel()
		<-done
	}
	if o.ForceStart {
		empty, err := descriptors.Compile(nil, opts)
		if err != nil {
			x.stop()
			return nil, err
		}
		// A version may already be in service: then these are not stored.
		x.cur.CompareAndSwap(nil, empty)
		x.last.CompareAndSwap(nil, &descriptors.ReloadResult{Time: time.Now(), Trigger: descriptors.TriggerInitial, OK: true, Fingerprint: empty.Fingerprint()})
		log.Warn("starting without rules (--force-start-without-initial-config): every call is answered OK until the xDS server sends valid rules")
		return x, nil
	}
	log.Info("waiting for the first rules from the xds server", zap.Duration("timeout", o.XDSInitialWait))
	timer := time.NewTimer(o.XDSInitialWait)
	defer timer.Stop()
	select {
	case <-x.first:
		return x, nil
	case <-ctx.Done():
		x.stop()
		return nil, fmt.Errorf("stopped while waiting for the first rules from the xDS server %s: %w", o.XDSServer, ctx.Err())
	case <-timer.C:
		x.stop()
		why := "no valid version received"
		if l := x.last.Load(); l != nil && !l.OK {
			why = "the versions received were refused: " + truncateText(l.Err.Error(), 500)
		} else if xds.State(x.state.Load()) != xds.Connected {
			why = "the server did not answer"
		}
		return nil, fmt.Errorf("%s: no rules from the xDS server %s (node %q) within %v (%s): %s; nothing served (--force-start-without-initial-config starts without rules)",
			label("config-source", s.opts.given), o.XDSServer, o.XDSNodeID, o.XDSInitialWait, label("xds-initial-timeout", s.opts.given), why)
	}
}

func truncateText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// xdsSourceDoc is the xDS part of /config.
type xdsSourceDoc struct {
	Type    string `json:"type"`
	Server  string `json:"server,omitempty"`
	Node    string `json:"node,omitempty"`
	Version string `json:"version,omitempty"`
	State   string `json:"state,omitempty"`
}

func (x *xdsSource) doc() xdsSourceDoc {
	return xdsSourceDoc{Type: SourceXDS, Server: x.server, Node: x.node, Version: x.versionInService(), State: xds.State(x.state.Load()).String()}
}
