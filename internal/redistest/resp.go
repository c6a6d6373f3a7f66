package redistest

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
)

// ErrorReply is an error reply (-ERR ...) from the server.
type ErrorReply string

func (e ErrorReply) Error() string { return "redis: " + string(e) }

// Conn is a minimal RESP2 connection for test setup and inspection: seeding
// hashes, DUMP, SCAN, CLUSTER and SENTINEL commands. It is not safe for
// concurrent use and is deliberately independent of the client under test.
type Conn struct {
	c net.Conn
	r *bufio.Reader
}

// Dial connects to addr; tlsConf, when not nil, wraps the connection in TLS.
// The dial and every later command are bounded by timeout.
func Dial(addr string, tlsConf *tls.Config, timeout time.Duration) (*Conn, error) {
	d := net.Dialer{Timeout: timeout}
	var c net.Conn
	var err error
	if tlsConf != nil {
		c, err = tls.DialWithDialer(&d, "tcp", addr, tlsConf)
	} else {
		c, err = d.Dial("tcp", addr)
	}
	if err != nil {
		return nil, fmt.Errorf("redistest: dial %s: %w", addr, err)
	}
	return &Conn{c: c, r: bufio.NewReader(c)}, nil
}

// Close closes the connection.
func (c *Conn) Close() error { return c.c.Close() }

// Do sends one command and reads its reply: string (simple or bulk), int64,
// nil, []any, or an ErrorReply as the error. The call is bounded by ctx's
// deadline or, without one, by ten seconds.
func (c *Conn) Do(ctx context.Context, args ...string) (any, error) {
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(10 * time.Second)
	}
	if err := c.c.SetDeadline(dl); err != nil {
		return nil, fmt.Errorf("redistest: set deadline: %w", err)
	}
	buf := make([]byte, 0, 64)
	buf = append(buf, '*')
	buf = strconv.AppendInt(buf, int64(len(args)), 10)
	buf = append(buf, '\r', '\n')
	for _, a := range args {
		buf = append(buf, '$')
		buf = strconv.AppendInt(buf, int64(len(a)), 10)
		buf = append(buf, '\r', '\n')
		buf = append(buf, a...)
		buf = append(buf, '\r', '\n')
	}
	if _, err := c.c.Write(buf); err != nil {
		return nil, fmt.Errorf("redistest: write %s: %w", args[0], err)
	}
	v, err := c.read(0)
	if err != nil {
		var er ErrorReply
		if errors.As(err, &er) {
			return nil, err
		}
		return nil, fmt.Errorf("redistest: read reply to %s: %w", args[0], err)
	}
	return v, nil
}

const maxDepth = 8

func (c *Conn) read(depth int) (any, error) {
	if depth > maxDepth {
		return nil, errors.New("reply nested too deeply")
	}
	line, err := c.r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return nil, fmt.Errorf("malformed line %q", line)
	}
	body := line[1 : len(line)-2]
	switch line[0] {
	case '+':
		return body, nil
	case '-':
		return nil, ErrorReply(body)
	case ':':
		n, err := strconv.ParseInt(body, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("malformed integer %q", body)
		}
		return n, nil
	case '$', '*':
		// A bulk string or an array: its length, -1 for null.
		what, limit := "bulk", 512<<20
		if line[0] == '*' {
			what, limit = "array", 1<<20
		}
		n, err := strconv.Atoi(body)
		if err != nil || n < -1 || n > limit {
			return nil, fmt.Errorf("malformed %s length %q", what, body)
		}
		if n == -1 {
			return nil, nil
		}
		if line[0] == '$' {
			b := make([]byte, n+2)
			if _, err := io.ReadFull(c.r, b); err != nil {
				return nil, err
			}
			return string(b[:n]), nil
		}
		out := make([]any, n)
		for i := range out {
			if out[i], err = c.read(depth + 1); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("unknown reply type %q", line[0])
}

// Do dials addr, runs one command and closes the connection.
func Do(ctx context.Context, addr string, tlsConf *tls.Config, args ...string) (any, error) {
	c, err := Dial(addr, tlsConf, 5*time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.Do(ctx, args...)
}
