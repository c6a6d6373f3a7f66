package e2e_test

import (
	"bytes"
	binenc "encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// rlsPath is the HTTP/2 :path of ShouldRateLimit.
const rlsPath = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

// h2conn is a raw HTTP/2 client connection (h2c, prior knowledge) that
// plays by none of the client rules it can break: it opens streams past
// the server's SETTINGS_MAX_CONCURRENT_STREAMS and sends request bodies
// shorter than they promise. A reader goroutine records what the server
// sends back, per stream.
type h2conn struct {
	c    net.Conn
	wmu  sync.Mutex // the framer's writes and the HPACK encoder
	fr   *http2.Framer
	enc  *hpack.Encoder
	hbuf bytes.Buffer
	next uint32 // next stream ID

	mu       sync.Mutex
	settings bool               // the server's SETTINGS arrived
	refused  int                // RST_STREAM REFUSED_STREAM
	ended    map[uint32]string  // streams the server ended, and how
	goAway   *http2.GoAwayFrame // the first GOAWAY
	readErr  error              // why the reader stopped
	changed  chan struct{}      // closed and replaced on every change
}

// dialH2 connects to addr, sends the client preface and SETTINGS, and
// starts the reader. The connection is closed by close.
func dialH2(addr string) (*h2conn, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	h := &h2conn{c: c, next: 1, ended: map[uint32]string{}, changed: make(chan struct{})}
	h.fr = http2.NewFramer(c, c)
	h.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	h.enc = hpack.NewEncoder(&h.hbuf)
	_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		_ = c.Close()
		return nil, err
	}
	if err := h.fr.WriteSettings(); err != nil {
		_ = c.Close()
		return nil, err
	}
	go h.read()
	return h, nil
}

func (h *h2conn) close() { _ = h.c.Close() }

// read records frames until the connection fails or closes.
func (h *h2conn) read() {
	for {
		f, err := h.fr.ReadFrame()
		h.mu.Lock()
		if err != nil {
			h.readErr = err
			h.notify()
			h.mu.Unlock()
			return
		}
		var ack func() error
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				h.settings = true
				ack = h.fr.WriteSettingsAck
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				data := f.Data
				ack = func() error { return h.fr.WritePing(true, data) }
			}
		case *http2.RSTStreamFrame:
			if f.ErrCode == http2.ErrCodeRefusedStream {
				h.refused++
			} else if _, done := h.ended[f.StreamID]; !done {
				h.ended[f.StreamID] = "RST_STREAM " + f.ErrCode.String()
			}
		case *http2.MetaHeadersFrame:
			if f.StreamEnded() {
				status := "trailers"
				if v := f.PseudoValue("status"); v != "" {
					status = "headers :status " + v
				}
				for _, hf := range f.Fields {
					if hf.Name == "grpc-status" {
						status += " grpc-status " + hf.Value
					}
				}
				if _, done := h.ended[f.StreamID]; !done {
					h.ended[f.StreamID] = status
				}
			}
		case *http2.GoAwayFrame:
			if h.goAway == nil {
				h.goAway = f
			}
		}
		h.notify()
		h.mu.Unlock()
		if ack != nil {
			h.wmu.Lock()
			_ = ack()
			h.wmu.Unlock()
		}
	}
}

// notify wakes waiters; h.mu is held.
func (h *h2conn) notify() {
	close(h.changed)
	h.changed = make(chan struct{})
}

// slowStream opens a ShouldRateLimit stream whose gRPC message header
// promises promised bytes, of which it sends sent (within the stream's
// initial flow-control window, 64 KiB less the 5-byte header), and never
// ends it.
func (h *h2conn) slowStream(promised, sent int) (uint32, error) {
	h.wmu.Lock()
	defer h.wmu.Unlock()
	id := h.next
	h.next += 2
	h.hbuf.Reset()
	for _, f := range [][2]string{
		{":method", "POST"}, {":scheme", "http"}, {":path", rlsPath}, {":authority", "127.0.0.1"},
		{"content-type", "application/grpc"}, {"te", "trailers"},
	} {
		if err := h.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]}); err != nil {
			return id, err
		}
	}
	_ = h.c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: h.hbuf.Bytes(), EndHeaders: true}); err != nil {
		return id, err
	}
	body := make([]byte, 5+sent)
	binenc.BigEndian.PutUint32(body[1:5], uint32(promised))
	for len(body) > 0 {
		n := min(len(body), 16<<10) // the default SETTINGS_MAX_FRAME_SIZE
		if err := h.fr.WriteData(id, false, body[:n]); err != nil {
			return id, err
		}
		body = body[n:]
	}
	return id, nil
}

// state is a snapshot of what the server sent.
type h2state struct {
	settings bool
	refused  int
	ended    map[uint32]string
	goAway   bool
	readErr  error
}

func (h *h2conn) state() h2state {
	h.mu.Lock()
	defer h.mu.Unlock()
	ended := make(map[uint32]string, len(h.ended))
	for k, v := range h.ended {
		ended[k] = v
	}
	return h2state{settings: h.settings, refused: h.refused, ended: ended, goAway: h.goAway != nil, readErr: h.readErr}
}

// waitFor waits until cond holds on the connection's state or timeout
// passes, and returns the last state and whether cond held.
func (h *h2conn) waitFor(timeout time.Duration, cond func(h2state) bool) (h2state, bool) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		h.mu.Lock()
		ch := h.changed
		h.mu.Unlock()
		st := h.state()
		if cond(st) {
			return st, true
		}
		select {
		case <-ch:
		case <-deadline.C:
			st = h.state()
			return st, cond(st)
		}
	}
}

// closedByServer reports a read error meaning the server closed or reset
// the connection (not our own close).
func closedByServer(err error) bool {
	return err != nil && !errors.Is(err, net.ErrClosed)
}

func (s h2state) String() string {
	return fmt.Sprintf("settings=%v refused=%d ended=%d goaway=%v read_err=%v", s.settings, s.refused, len(s.ended), s.goAway, s.readErr)
}
