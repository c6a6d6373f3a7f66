package grpcserve

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// connLimit serves max connections at once, closes the next one on accept,
// and takes one again when a served connection closes.
func TestConnLimit(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl, err := newConnLimit(2, 0, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	l := cl.listener(inner)
	defer l.Close()
	accepted := make(chan net.Conn)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	dial := func() net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	next := func(what string) net.Conn {
		t.Helper()
		select {
		case c := <-accepted:
			return c
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: not accepted within 10s", what)
		}
		return nil
	}
	dial()
	dial()
	served := []net.Conn{next("first"), next("second")}
	// The third is closed by the listener: it is reset while it connects,
	// or reading it ends at once.
	if extra, err := net.Dial("tcp", inner.Addr().String()); err == nil {
		defer extra.Close()
		_ = extra.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := extra.Read(make([]byte, 1)); err == nil || isTimeout(err) {
			t.Fatalf("connection beyond the limit: read %v, want it closed by the server", err)
		}
	}
	if got := value(cl.refused); got != 1 {
		t.Errorf("refused = %v, want 1", got)
	}
	if got := value(cl.gauge); got != 2 {
		t.Errorf("open gauge = %v, want 2", got)
	}
	_ = served[0].Close()
	_ = served[0].Close() // a second Close gives nothing back twice
	dial()
	next("after a close")
	if got := value(cl.gauge); got != 2 {
		t.Errorf("open gauge after one closed and one accepted = %v, want 2", got)
	}
	if got := cl.open.Load(); got != 2 {
		t.Errorf("open = %d, want 2", got)
	}
}

// isTimeout reports a read that timed out: the connection was left open.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// value reads a counter or gauge.
func value(c prometheus.Metric) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	if m.Gauge != nil {
		return m.Gauge.GetValue()
	}
	return m.Counter.GetValue()
}
