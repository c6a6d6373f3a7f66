package app

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc/credentials"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
	"github.com/envoy-rls/envoy-rls/pkg/xdsconfig"
)

// Config sources (--config-source).
const (
	SourceFile = "file"
	SourceXDS  = "xds"
)

// Defaults of the xDS flags.
const (
	DefaultConfigSource      = SourceFile
	DefaultXDSNodeID         = xdsconfig.DefaultNodeID
	DefaultXDSRetryInterval  = xdsconfig.DefaultRetryInterval
	DefaultXDSRetryMax       = xdsconfig.DefaultMaxRetryInterval
	DefaultXDSInitialTimeout = time.Minute
)

// xdsOptions are the --config-source and --xds-* flags.
type xdsOptions struct {
	ConfigSource     string
	XDSServer        string
	XDSNodeID        string
	XDSNodeMetadata  pairList
	XDSTLS           bool
	XDSTLSCert       string
	XDSTLSKey        string
	XDSTLSCA         string
	XDSTLSSAN        string
	XDSHeaders       pairList
	XDSRetryInterval time.Duration
	XDSRetryMax      time.Duration
	XDSInitialWait   time.Duration
	ForceStart       bool
}

// pairList is a list of key:value (or key=value) pairs, comma-separated;
// each Set adds to it, so the flag can be repeated.
type pairList struct{ pairs [][2]string }

func (p *pairList) String() string {
	if p == nil {
		return ""
	}
	parts := make([]string, 0, len(p.pairs))
	for _, kv := range p.pairs {
		parts = append(parts, kv[0]+":"+kv[1])
	}
	return strings.Join(parts, ",")
}

func (p *pairList) Set(s string) error {
	if s == "" {
		return nil
	}
	var add [][2]string
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(part, ":")
		if i := strings.IndexByte(part, '='); i >= 0 && (!ok || i < len(k)) {
			k, v, ok = part[:i], part[i+1:], true
		}
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return fmt.Errorf("%q is not key:value", part)
		}
		add = append(add, [2]string{k, strings.TrimSpace(v)})
	}
	p.pairs = append(p.pairs, add...)
	return nil
}

func (p *pairList) m() map[string]string {
	if len(p.pairs) == 0 {
		return nil
	}
	out := make(map[string]string, len(p.pairs))
	for _, kv := range p.pairs {
		out[kv[0]] = kv[1]
	}
	return out
}

// xdsFlags adds the flags of the rule source.
func xdsFlags(fs *flag.FlagSet, o *xdsOptions) {
	fs.StringVar(&o.ConfigSource, "config-source", DefaultConfigSource, "where the rules come from: file (--config) or xds (RateLimitConfig resources from --xds-server)")
	fs.StringVar(&o.XDSServer, "xds-server", "", "xDS management server, host:port (--config-source xds)")
	fs.StringVar(&o.XDSNodeID, "xds-node-id", DefaultXDSNodeID, "node ID this service subscribes as")
	fs.Var(&o.XDSNodeMetadata, "xds-node-metadata", "node metadata, key:value or key=value pairs, comma-separated (repeatable)")
	fs.BoolVar(&o.XDSTLS, "xds-tls", false, "connect to the xDS server over TLS (implied by any --xds-tls-* file)")
	fs.StringVar(&o.XDSTLSCert, "xds-tls-cert", "", "PEM client certificate for mutual TLS with the xDS server (read at each connection)")
	fs.StringVar(&o.XDSTLSKey, "xds-tls-key", "", "PEM client key for mutual TLS with the xDS server")
	fs.StringVar(&o.XDSTLSCA, "xds-tls-ca", "", "PEM CA bundle that verifies the xDS server (default: system roots)")
	fs.StringVar(&o.XDSTLSSAN, "xds-tls-san", "", "name the xDS server's certificate must hold (default: the host of --xds-server)")
	fs.Var(&o.XDSHeaders, "xds-header", "gRPC metadata sent on the xDS stream, key:value pairs, comma-separated (repeatable)")
	fs.DurationVar(&o.XDSRetryInterval, "xds-retry-interval", DefaultXDSRetryInterval, "first wait before reconnecting to the xDS server; it doubles after each failed attempt up to --xds-retry-max-interval, each wait drawn between half and all of it")
	fs.DurationVar(&o.XDSRetryMax, "xds-retry-max-interval", DefaultXDSRetryMax, "longest wait between reconnection attempts")
	fs.DurationVar(&o.XDSInitialWait, "xds-initial-timeout", DefaultXDSInitialTimeout, "how long serve waits for the first valid rules from the xDS server before it gives up (not with --force-start-without-initial-config)")
	fs.BoolVar(&o.ForceStart, "force-start-without-initial-config", false, "with --config-source xds: serve at once with no rules (every call answered OK) until the xDS server sends valid rules")
}

// xdsAccepts is what the xDS flags take, for errors.
var xdsAccepts = map[string]string{
	"config-source":          SourceFile + " or " + SourceXDS,
	"xds-server":             "host:port of the xDS server (required with --config-source xds)",
	"xds-node-id":            "a non-empty node ID",
	"xds-tls-cert":           "set together with --xds-tls-key",
	"xds-tls-key":            "set together with --xds-tls-cert",
	"xds-retry-interval":     "a positive duration such as 3s",
	"xds-retry-max-interval": "a duration at least --xds-retry-interval",
	"xds-initial-timeout":    "a positive duration such as 1m",
	"xds-node-metadata":      "key:value or key=value pairs, comma-separated",
	"xds-header":             "key:value pairs, comma-separated",
}

// check returns the problems of the xDS flags, one error each.
func (o *xdsOptions) check(seen map[string]given) []error {
	var errs []error
	bad := func(name string) {
		errs = append(errs, fmt.Errorf("%s: must be %s", label(name, seen), xdsAccepts[name]))
	}
	switch o.ConfigSource {
	case SourceFile:
		return nil
	case SourceXDS:
	default:
		bad("config-source")
		return errs
	}
	if o.XDSServer == "" {
		bad("xds-server")
	}
	if o.XDSNodeID == "" {
		bad("xds-node-id")
	}
	if (o.XDSTLSCert == "") != (o.XDSTLSKey == "") {
		if o.XDSTLSCert == "" {
			bad("xds-tls-cert")
		} else {
			bad("xds-tls-key")
		}
	}
	for _, kv := range o.XDSHeaders.pairs {
		if !validHeaderName(kv[0]) {
			errs = append(errs, fmt.Errorf("%s: header name %q must be lower-case letters, digits, '-', '_' or '.', and not start with grpc-", label("xds-header", seen), kv[0]))
			break
		}
	}
	if o.XDSRetryInterval <= 0 {
		bad("xds-retry-interval")
	}
	if o.XDSRetryMax < o.XDSRetryInterval {
		bad("xds-retry-max-interval")
	}
	if o.XDSInitialWait <= 0 {
		bad("xds-initial-timeout")
	}
	return errs
}

// validHeaderName is a gRPC metadata key a client may send.
func validHeaderName(k string) bool {
	if k == "" || strings.HasPrefix(k, "grpc-") {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

func (o *xdsOptions) useTLS() bool {
	return o.XDSTLS || o.XDSTLSCA != "" || o.XDSTLSCert != "" || o.XDSTLSSAN != ""
}

// xdsCredentials builds the TLS credentials of the xDS connection (nil:
// plaintext). The CA is read once; the client certificate at each
// handshake, so a rotated certificate is used from the next connection on.
func (o *xdsOptions) xdsCredentials() (credentials.TransportCredentials, error) {
	if !o.useTLS() {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: o.XDSTLSSAN}
	if o.XDSTLSCA != "" {
		pem, err := os.ReadFile(o.XDSTLSCA)
		if err != nil {
			return nil, fmt.Errorf("--xds-tls-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--xds-tls-ca=%q: holds no PEM certificate", o.XDSTLSCA)
		}
		cfg.RootCAs = pool
	}
	if o.XDSTLSCert != "" {
		cert, key := o.XDSTLSCert, o.XDSTLSKey
		if _, err := tls.LoadX509KeyPair(cert, key); err != nil {
			return nil, fmt.Errorf("--xds-tls-cert=%q, --xds-tls-key=%q: %w", cert, key, err)
		}
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			c, err := tls.LoadX509KeyPair(cert, key)
			if err != nil {
				return nil, fmt.Errorf("xds client certificate: %w", err)
			}
			return &c, nil
		}
	}
	return credentials.NewTLS(cfg), nil
}

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
	state   atomic.Int32           // xdsconfig.State

	firstOnce sync.Once
	first     chan struct{} // closed once a version is in service

	connected prometheus.Gauge
	updates   *prometheus.CounterVec

	stop func() // cancels Run and waits for it
}

// apply is the client's Config.Apply: compile, swap on success.
func (x *xdsSource) apply(version string, cs []*rlsconf.RateLimitConfig) error {
	res := descriptors.ReloadResult{Time: time.Now(), Trigger: TriggerXDS}
	s, err := xdsconfig.Compile(cs, x.opts)
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
	c, err := xdsconfig.New(xdsconfig.Config{
		Server: o.XDSServer, NodeID: o.XDSNodeID, NodeMetadata: o.XDSNodeMetadata.m(),
		Credentials: creds, Headers: o.XDSHeaders.m(),
		RetryInterval: o.XDSRetryInterval, MaxRetryInterval: o.XDSRetryMax,
		Apply: x.apply,
		OnState: func(st xdsconfig.State, err error) {
			x.state.Store(int32(st))
			if st == xdsconfig.Connected {
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
		} else if xdsconfig.State(x.state.Load()) != xdsconfig.Connected {
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
	return xdsSourceDoc{Type: SourceXDS, Server: x.server, Node: x.node, Version: x.versionInService(), State: xdsconfig.State(x.state.Load()).String()}
}
