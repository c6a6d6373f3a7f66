package statsd

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// tcpSender is a statsd.Sender over one TCP connection, dialled on first
// use and again after a failure (not sooner than redialAfter after a failed
// dial). Each Send is one batch of lines; it adds the final newline that
// the buffered sender strips.
type tcpSender struct {
	addr       string
	mu         sync.Mutex
	conn       net.Conn
	failedDial time.Time
}

func (t *tcpSender) Send(data []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.conn == nil {
		if !t.failedDial.IsZero() && time.Since(t.failedDial) < redialAfter {
			return 0, errors.New("statsd: not connected (last dial failed)")
		}
		c, err := net.DialTimeout("tcp", t.addr, dialTimeout)
		if err != nil {
			t.failedDial = time.Now()
			return 0, fmt.Errorf("statsd: dialling %s: %w", t.addr, err)
		}
		t.conn, t.failedDial = c, time.Time{}
	}
	_ = t.conn.SetWriteDeadline(time.Now().Add(writeTimeout))
	bufs := net.Buffers{data, []byte{'\n'}}
	n, err := bufs.WriteTo(t.conn)
	if err != nil {
		_ = t.conn.Close()
		t.conn = nil
		return int(n), fmt.Errorf("statsd: writing to %s: %w", t.addr, err)
	}
	return len(data), nil
}

func (t *tcpSender) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.conn == nil {
		return nil
	}
	err := t.conn.Close()
	t.conn = nil
	return err
}
