package app

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/pkg/rls"
)

// Readiness modes (--readiness).
const (
	// ReadinessRules: ready once the rules are loaded and the listeners
	// are up, whatever the store's state; a store outage is answered by
	// each policy's failure mode.
	ReadinessRules = "rules"
	// ReadinessStore: also unready while the store does not answer its
	// ping, so that Envoy's failure_mode_deny decides during an outage.
	ReadinessStore = "store"
)

// storeProbeInterval is how often the store's state is checked for
// /healthz, the envoy_rls_store_up gauge and the transition logs.
const storeProbeInterval = time.Second

// Log messages of store state transitions.
const (
	msgStoreDown = "store unreachable: answering by each policy's failure mode"
	msgStoreUp   = "store reachable"
)

// storeState is what the server knows of its store: reachable or not,
// since when, and why not. The memory store is always reachable.
type storeState struct {
	kind  string // the --store value
	ping  pinger // nil: always reachable
	log   *zap.Logger
	gauge prometheus.Gauge

	mu    sync.Mutex
	known bool // a probe has run
	up    bool
	since time.Time
	cause string
}

func newStoreState(kind string, ping pinger, reg prometheus.Registerer, log *zap.Logger) (*storeState, error) {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: rls.MetricsNamespace, Name: "store_up",
		Help: "Whether the limit store answers its health check (Redis PING, every second; the memory store always does): 1 yes, 0 no.",
	})
	if err := reg.Register(g); err != nil {
		return nil, fmt.Errorf("registering %s_store_up: %w", rls.MetricsNamespace, err)
	}
	st := &storeState{kind: kind, ping: ping, log: log, gauge: g}
	if ping == nil {
		st.set(true, "", time.Now())
	}
	return st, nil
}

// run probes the store every storeProbeInterval until ctx ends.
func (st *storeState) run(ctx context.Context, wg *sync.WaitGroup) {
	if st.ping == nil {
		return
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		st.probe(ctx)
		every(ctx, storeProbeInterval, func(time.Time) { st.probe(ctx) })
	}()
}

// probe pings the store once (bounded by readyTimeout) and records the
// result.
func (st *storeState) probe(ctx context.Context) {
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
func (st *storeState) set(up bool, cause string, now time.Time) {
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
		st.log.Warn(msgStoreDown, zap.String("store", st.kind), zap.String("error", cause))
	case !first:
		st.log.Info(msgStoreUp, zap.String("store", st.kind))
	}
}

// describe is the store line of /healthz.
func (st *storeState) describe() string {
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

// isUp reports the last known state (false before the first probe).
func (st *storeState) isUp() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.known && st.up
}
