package xds

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
)

// trigger is the descriptors.ReloadResult trigger of a version received
// from the server.
const trigger = "xds"

// SourceConfig configures a Source.
type SourceConfig struct {
	// Client is the subscription (Required: Server). The Source sets its
	// Apply; its OnState, if set, is told every change after the Source.
	Client Config
	// Rules are the options every version is compiled with (Required:
	// Secret).
	Rules descriptors.Options
	// OnReload, if not nil, is told every version compiled, accepted or
	// refused, from the client's goroutine.
	OnReload func(descriptors.ReloadResult)
	// Metrics, if not nil, registers envoy_rls_xds_connected (1 while the
	// stream is open and the server answered on it) and
	// envoy_rls_xds_updates_total{result="ack"|"nack"}.
	Metrics prometheus.Registerer
}

// Source is the rule source of an xDS server: it runs a Client and keeps
// in service the snapshot of the last version that compiled. A version
// that does not compile is refused and leaves the snapshot in service. All
// methods are safe for concurrent use.
type Source struct {
	client   *client
	server   string
	node     string
	rules    descriptors.Options
	onReload func(descriptors.ReloadResult)

	cur     atomic.Pointer[descriptors.Snapshot]
	last    atomic.Pointer[descriptors.ReloadResult]
	version atomic.Pointer[string] // the version in service
	state   atomic.Int32           // State

	firstOnce sync.Once
	first     chan struct{} // closed once a version is in service

	connected prometheus.Gauge
	updates   *prometheus.CounterVec

	mu   sync.Mutex
	stop func() // ends the client started by Start and waits for it

	// keyMu serializes what compiles with rules.Secret and swaps cur
	// (apply, ServeEmpty) with SetSecret, which changes both.
	keyMu sync.Mutex
}

// NewSource checks cfg, prepares the client and registers the metrics; it
// does not connect (Start does).
func NewSource(cfg SourceConfig) (*Source, error) {
	if len(cfg.Rules.Secret) < descriptors.MinSecretLength {
		return nil, descriptors.ErrSecret
	}
	s := &Source{server: cfg.Client.Server, node: cfg.Client.NodeID, rules: cfg.Rules, onReload: cfg.OnReload, first: make(chan struct{})}
	s.rules.Secret = slices.Clone(cfg.Rules.Secret)
	s.connected = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "envoy_rls", Name: "xds_connected",
		Help: "1 while the stream to the xDS server is open and the server has answered on it, else 0.",
	})
	s.updates = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "envoy_rls", Name: "xds_updates_total",
		Help: "Versions received from the xDS server, by answer: ack (rules in service) or nack (refused; the previous rules stay).",
	}, []string{"result"})
	s.updates.WithLabelValues("ack")
	s.updates.WithLabelValues("nack")
	onState := cfg.Client.OnState
	cfg.Client.Apply = s.apply
	cfg.Client.OnState = func(st State, err error) {
		s.state.Store(int32(st))
		if st == Connected {
			s.connected.Set(1)
		} else {
			s.connected.Set(0)
		}
		if onState != nil {
			onState(st, err)
		}
	}
	c, err := newClient(cfg.Client)
	if err != nil {
		return nil, err
	}
	if s.node == "" {
		s.node = DefaultNodeID
	}
	s.client = c
	if cfg.Metrics != nil {
		for _, m := range []prometheus.Collector{s.connected, s.updates} {
			if err := cfg.Metrics.Register(m); err != nil {
				return nil, fmt.Errorf("xds: registering metrics: %w", err)
			}
		}
	}
	return s, nil
}

// apply is the client's Config.Apply: compile, swap on success.
func (s *Source) apply(version string, cs []*rlsconf.RateLimitConfig) error {
	s.keyMu.Lock()
	snap, err := compile(cs, s.rules)
	if err != nil {
		s.updates.WithLabelValues("nack").Inc()
		snap = s.cur.Load()
	} else {
		s.cur.Store(snap)
		s.version.Store(&version)
		s.updates.WithLabelValues("ack").Inc()
	}
	s.keyMu.Unlock()
	res := descriptors.NewReloadResult(trigger, snap, err)
	s.last.Store(&res)
	if err == nil {
		// Signalled after every record above is stored: a caller that
		// WaitFirst released reads this version in Current, Version and Last.
		s.firstOnce.Do(func() { close(s.first) })
	}
	if s.onReload != nil {
		s.onReload(res)
	}
	if err != nil {
		return fmt.Errorf("version %q refused: %w", version, err)
	}
	return nil
}

// Start runs the client in its own goroutine until ctx ends or Stop is
// called. Call it once.
func (s *Source) Start(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.client.Run(ctx)
	}()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stop = func() {
		cancel()
		<-done
	}
}

// Stop ends the client started by Start and waits for it; the rules in
// service stay. It does nothing before Start.
func (s *Source) Stop() {
	s.mu.Lock()
	stop := s.stop
	s.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// ServeEmpty puts a rule set without domains in service, unless a version
// already is, until the first version compiles: every descriptor is then
// unmatched. Received stays false.
func (s *Source) ServeEmpty() error {
	s.keyMu.Lock()
	defer s.keyMu.Unlock()
	empty, err := descriptors.Compile(nil, s.rules)
	if err != nil {
		return err
	}
	s.cur.CompareAndSwap(nil, empty)
	res := descriptors.NewReloadResult(descriptors.TriggerInitial, empty, nil)
	s.last.CompareAndSwap(nil, &res)
	return nil
}

// SetSecret keys the subjects with secret from now on: the rules in
// service are replaced by the same rules keyed with it (nothing is asked of
// the server or compiled again), and every later version compiles with it.
// Received, Version and Last are unchanged.
func (s *Source) SetSecret(secret []byte) error {
	s.keyMu.Lock()
	defer s.keyMu.Unlock()
	snap, err := s.cur.Load().WithSecret(secret)
	if err != nil {
		return err
	}
	s.rules.Secret = slices.Clone(secret)
	if snap != nil {
		s.cur.Store(snap)
	}
	return nil
}

// maxWhy bounds the refusal quoted by WaitFirst.
const maxWhy = 500

// WaitFirst waits until a version is in service or ctx ends. It returns
// nil once one is, else an error saying why none is: the versions received
// were refused (with the last reason), the server did not answer, or no
// valid version was received.
func (s *Source) WaitFirst(ctx context.Context) error {
	select {
	case <-s.first:
		return nil
	case <-ctx.Done():
	}
	switch l := s.last.Load(); {
	case l != nil && !l.OK:
		return fmt.Errorf("the versions received were refused: %s", truncate(l.Err.Error(), maxWhy))
	case s.State() != Connected:
		return errors.New("the server did not answer")
	}
	return errors.New("no valid version received")
}

// Received reports whether a version received from the server is in
// service (not the empty set of ServeEmpty).
func (s *Source) Received() bool {
	select {
	case <-s.first:
		return true
	default:
		return false
	}
}

// Current returns the snapshot in service (nil before the first version
// or ServeEmpty).
func (s *Source) Current() *descriptors.Snapshot { return s.cur.Load() }

// Last returns the last version compiled (the zero value before the
// first).
func (s *Source) Last() descriptors.ReloadResult {
	if l := s.last.Load(); l != nil {
		return *l
	}
	return descriptors.ReloadResult{}
}

// Version returns the version in service ("" before the first).
func (s *Source) Version() string {
	if v := s.version.Load(); v != nil {
		return *v
	}
	return ""
}

// State returns the state of the connection to the server.
func (s *Source) State() State { return State(s.state.Load()) }

// Status is what the admin /config page shows of a Source.
type Status struct {
	Server  string `json:"server,omitempty"`
	Node    string `json:"node,omitempty"`
	Version string `json:"version,omitempty"`
	State   string `json:"state,omitempty"`
}

// Status returns the server, the node, the version in service and the
// connection state.
func (s *Source) Status() Status {
	return Status{Server: s.server, Node: s.node, Version: s.Version(), State: s.State().String()}
}
