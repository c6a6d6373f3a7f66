package grpcserve

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/peer"

	"github.com/envoy-rls/envoy-rls/pkg/rls"
)

// connLimit holds at most max connections of a listener open: one
// accepted beyond it is closed at once (the client sees its connection
// reset) and counted, so that the kernel's accept queue never fills with
// connections nobody serves. A connection that has opened no call within
// firstCall of being accepted is closed too, so that connections that never
// call cannot hold the places: a client that has called once keeps its
// connection however long it idles after (Envoy's pooled connections), up
// to the server's idle and age bounds.
type connLimit struct {
	max       int64
	firstCall time.Duration // 0: never
	open      atomic.Int64
	gauge     prometheus.Gauge
	refused   prometheus.Counter
	callless  prometheus.Counter
}

// newConnLimit registers its collectors on reg.
func newConnLimit(max int, firstCall time.Duration, reg prometheus.Registerer) (*connLimit, error) {
	cl := &connLimit{
		max:       int64(max),
		firstCall: firstCall,
		gauge: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: rls.MetricsNamespace, Name: "grpc_connections",
			Help: "Open gRPC connections (at most --grpc-max-connections).",
		}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: rls.MetricsNamespace, Name: "grpc_connections_refused_total",
			Help: "gRPC connections closed on accept because --grpc-max-connections were open.",
		}),
		callless: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: rls.MetricsNamespace, Name: "grpc_connections_without_call_closed_total",
			Help: "gRPC connections closed because they opened no call within --grpc-first-call-timeout of being accepted.",
		}),
	}
	for _, c := range []prometheus.Collector{cl.gauge, cl.refused, cl.callless} {
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
		lc := &limitedConn{Conn: c, l: l.cl}
		lc.addr = connAddr{addr: c.RemoteAddr(), conn: lc}
		if d := l.cl.firstCall; d > 0 {
			lc.timer.Store(time.AfterFunc(d, lc.noCall))
		}
		return lc, nil
	}
}

// States of a limitedConn's first call.
const (
	awaitingCall int32 = iota
	called
	callless // closed for not calling in time
)

// limitedConn gives its place back when it is closed (once), and closes
// itself when no call has been opened on it when its timer fires.
type limitedConn struct {
	net.Conn
	l      *connLimit
	addr   connAddr
	timer  atomic.Pointer[time.Timer] // nil without a first-call bound
	state  atomic.Int32
	closed atomic.Bool
}

// connAddr is the remote address of a limitedConn, which gRPC gives every
// call of the connection as its peer address (with TLS too: a TLS
// connection's RemoteAddr is its underlying connection's): that is how a
// call finds its connection (callOpened). It prints as the address it
// wraps (empty when there is none, as for some unix socket peers).
type connAddr struct {
	addr net.Addr
	conn *limitedConn
}

func (a *connAddr) Network() string {
	if a.addr == nil {
		return ""
	}
	return a.addr.Network()
}

func (a *connAddr) String() string {
	if a.addr == nil {
		return ""
	}
	return a.addr.String()
}

func (c *limitedConn) RemoteAddr() net.Addr { return &c.addr }

// callOpened records that the connection of the call whose context is ctx
// has opened a call: it is no longer closed for not calling. Run for every
// new stream, before it is served (the InTapHandle).
func callOpened(ctx context.Context) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return
	}
	a, ok := p.Addr.(*connAddr)
	if !ok || a.conn.state.Load() != awaitingCall {
		return
	}
	if a.conn.state.CompareAndSwap(awaitingCall, called) {
		a.conn.stopTimer()
	}
}

// noCall closes the connection unless a call was opened on it first.
func (c *limitedConn) noCall() {
	if c.state.CompareAndSwap(awaitingCall, callless) {
		c.l.callless.Inc()
		_ = c.Close()
	}
}

func (c *limitedConn) stopTimer() {
	if t := c.timer.Load(); t != nil {
		t.Stop()
	}
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	if c.closed.CompareAndSwap(false, true) {
		c.stopTimer()
		c.l.open.Add(-1)
		c.l.gauge.Dec()
	}
	return err
}
