package grpcserve

import (
	"fmt"
	"net"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/envoy-rls/envoy-rls/pkg/rls"
)

// connLimit holds at most max connections of a listener open: one
// accepted beyond it is closed at once (the client sees its connection
// reset) and counted, so that the kernel's accept queue never fills with
// connections nobody serves.
type connLimit struct {
	max     int64
	open    atomic.Int64
	gauge   prometheus.Gauge
	refused prometheus.Counter
}

// newConnLimit registers its collectors on reg.
func newConnLimit(max int, reg prometheus.Registerer) (*connLimit, error) {
	cl := &connLimit{
		max: int64(max),
		gauge: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: rls.MetricsNamespace, Name: "grpc_connections",
			Help: "Open gRPC connections (at most --grpc-max-connections).",
		}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: rls.MetricsNamespace, Name: "grpc_connections_refused_total",
			Help: "gRPC connections closed on accept because --grpc-max-connections were open.",
		}),
	}
	for _, c := range []prometheus.Collector{cl.gauge, cl.refused} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering the gRPC connection metrics: %w", err)
		}
	}
	return cl, nil
}

// listener is l under the limit.
func (cl *connLimit) listener(l net.Listener) net.Listener {
	return &limitedListener{Listener: l, cl: cl}
}

// limitedListener accepts within its connLimit.
type limitedListener struct {
	net.Listener
	cl *connLimit
}

func (l *limitedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.cl.open.Add(1) > l.cl.max {
			l.cl.open.Add(-1)
			l.cl.refused.Inc()
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0) // reset: nothing is owed to this peer
			}
			_ = c.Close()
			continue
		}
		l.cl.gauge.Inc()
		return &limitedConn{Conn: c, l: l.cl}, nil
	}
}

// limitedConn gives its place back when it is closed (once).
type limitedConn struct {
	net.Conn
	l      *connLimit
	closed atomic.Bool
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	if c.closed.CompareAndSwap(false, true) {
		c.l.open.Add(-1)
		c.l.gauge.Dec()
	}
	return err
}
