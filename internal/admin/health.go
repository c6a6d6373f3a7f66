package admin

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/pkg/rls"
)

// Pinger is a store that can say whether it is reachable (the Redis
// store).
type Pinger interface {
	Ping(ctx context.Context) error
}

// StoreProbeInterval is how often the store's state is to be checked
// (StoreState.Probe) for /healthz, the envoy_rls_store_up gauge and the
// transition logs.
const StoreProbeInterval = time.Second

// Log messages of store state transitions.
const (
	MsgStoreDown = "store unreachable: answering by each policy's failure mode"
	MsgStoreUp   = "store reachable"
)

// StoreState is what the server knows of its store: reachable or not,
// since when, and why not. A store without a Pinger (the memory store) is
// always reachable.
type StoreState struct {
	kind  string // the store's name
	ping  Pinger // nil: always reachable
	log   *zap.Logger
	gauge prometheus.Gauge

	mu    sync.Mutex
	known bool // a probe has run
	up    bool
	since time.Time
	cause string
}

// NewStoreState registers the envoy_rls_store_up gauge on reg; kind names
// the store in the logs and on /healthz.
func NewStoreState(kind string, ping Pinger, reg prometheus.Registerer, log *zap.Logger) (*StoreState, error) {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: rls.MetricsNamespace, Name: "store_up",
		Help: "Whether the limit store answers its health check (Redis PING, every second; the memory store always does): 1 yes, 0 no.",
	})
	if err := reg.Register(g); err != nil {
		return nil, fmt.Errorf("registering %s_store_up: %w", rls.MetricsNamespace, err)
	}
	st := &StoreState{kind: kind, ping: ping, log: log, gauge: g}
	if ping == nil {
		st.set(true, "", time.Now())
	}
	return st, nil
}

// Probe pings the store once (bounded by readyTimeout) and records the
// result; nothing without a Pinger.
func (st *StoreState) Probe(ctx context.Context) {
	if st.ping == nil {
		return
	}
	pctx, cancel := context.WithTimeout(ctx, readyTimeout)
	err := st.ping.Ping(pctx)
	cancel()
	if ctx.Err() != nil {
		return // stopping: the failure is ours
	}
	cause := ""
	if err != nil {
		cause = err.Error()
	}
	st.set(err == nil, cause, time.Now())
}

// set records a state and logs a transition (not every probe).
func (st *StoreState) set(up bool, cause string, now time.Time) {
	st.mu.Lock()
	changed := !st.known || st.up != up
	first := !st.known
	if changed {
		st.since = now
	}
	st.known, st.up, st.cause = true, up, cause
	st.mu.Unlock()
	if up {
		st.gauge.Set(1)
	} else {
		st.gauge.Set(0)
	}
	switch {
	case !changed:
	case !up:
		st.log.Warn(MsgStoreDown, zap.String("store", st.kind), zap.String("error", cause))
	case !first:
		st.log.Info(MsgStoreUp, zap.String("store", st.kind))
	}
}

// Describe is the store line of /healthz.
func (st *StoreState) Describe() string {
	st.mu.Lock()
	defer st.mu.Unlock()
	switch {
	case !st.known:
		return fmt.Sprintf("store %s: unknown (not checked yet)", st.kind)
	case st.up:
		return fmt.Sprintf("store %s: up since %s", st.kind, st.since.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("store %s: down since %s: %s", st.kind, st.since.UTC().Format(time.RFC3339), st.cause)
}

// IsUp reports the last known state (false before the first probe).
func (st *StoreState) IsUp() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.known && st.up
}

// Unreachable pings the store (at most readyTimeout) and returns why it did
// not answer, or "" (also without a Pinger).
func (st *StoreState) Unreachable(ctx context.Context) string {
	if st.ping == nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	if err := st.ping.Ping(ctx); err != nil {
		return "store unreachable: " + err.Error()
	}
	return ""
}
