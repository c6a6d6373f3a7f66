package e2e_test

import (
	"bytes"
	"context"
	binenc "encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/envoy-rls/envoy-rls/internal/binarytest"
	"github.com/envoy-rls/envoy-rls/internal/polltest"
	"github.com/envoy-rls/envoy-rls/internal/rlswire"
)

// The serve defaults the abuse tests run against (internal/app).
const (
	defaultMaxStreams     = 100
	defaultMaxConnections = 1000
	defaultReceiveTimeout = 5 * time.Second
	defaultMaxIncomplete  = 1024
)

// Memory ceilings of the abuse patterns (docs/deploy.md, "Limits on
// connections and streams"): the replica's resident set may not exceed
// them while a pattern runs. A binary built with -race needs several times
// the memory.
const (
	abuseRSSCeiling     = 128 << 20
	abuseRSSCeilingRace = 512 << 20
)

func rssCeiling() int64 {
	if binarytest.Race {
		return abuseRSSCeilingRace
	}
	return abuseRSSCeiling
}

// abuseRules limit each user to 3 calls an hour.
var abuseRules = hourlyRules(3, "user")

// rssPeak samples a process's resident set every 20ms until stop.
type rssPeak struct {
	stopCh chan struct{}
	done   chan struct{}
	mu     sync.Mutex
	peak   int64
	err    error
}

func watchRSS(pid int) *rssPeak {
	p := &rssPeak{stopCh: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			n, err := rss(pid)
			p.mu.Lock()
			if err != nil && p.err == nil {
				p.err = err
			}
			p.peak = max(p.peak, n)
			p.mu.Unlock()
			select {
			case <-p.stopCh:
				return
			case <-tick.C:
			}
		}
	}()
	return p
}

// startWatched starts a replica of abuseRules with args and samples its
// resident set until the test ends (or stop): it returns the replica, its
// pid, its resident set at start and the sampler.
func startWatched(t testing.TB, name string, args ...string) (r *replica, pid int, before int64, peak *rssPeak) {
	t.Helper()
	r = startReplica(t, name, replicaConfig{Rules: rulesDir(t, abuseRules), Args: args})
	pid = r.cmd.Process.Pid
	before, err := rss(pid)
	if err != nil {
		t.Fatal(err)
	}
	peak = watchRSS(pid)
	t.Cleanup(func() { _, _ = peak.stop() })
	return r, pid, before, peak
}

// stop ends the sampling and returns the peak.
func (p *rssPeak) stop() (int64, error) {
	select {
	case <-p.stopCh:
	default:
		close(p.stopCh)
	}
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.peak, p.err
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// TestSlowStreamsAreRefusedAndCut: twenty connections each open 5,000
// ShouldRateLimit streams whose message header promises 100 bytes of which
// 5 come (100,000 in all). Each connection keeps at most 100 streams at
// once (--grpc-max-concurrent-streams) and has the others refused
// (RST_STREAM REFUSED_STREAM); of the 2,000 kept, at most 1,024 wait for
// their request at once (--grpc-max-incomplete-requests: the oldest are
// cut as others arrive), and those are cut when --grpc-receive-timeout
// passes. Every stream cut is a call counted in calls_total. The process
// stays under the memory ceiling, and a call on a fresh connection gets
// its decision meanwhile.
func TestSlowStreamsAreRefusedAndCut(t *testing.T) {
	const conns = 20
	perConn := 5_000
	if binarytest.Race {
		perConn = 1_000 // the race detector writes and reads them 5 to 10 times slower
	}
	r, pid, before, peak := startWatched(t, "abuse")

	hs := make([]*h2conn, conns)
	var err error
	for i := range hs {
		if hs[i], err = dialH2(r.grpcAddr); err != nil {
			t.Fatalf("e2e: raw HTTP/2 connection %d: %v", i, err)
		}
		t.Cleanup(hs[i].close)
	}
	start := time.Now()
	var wg sync.WaitGroup
	writeErrs := make([]error, conns)
	for i, h := range hs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range perConn {
				if _, err := h.slowStream(100, 5); err != nil {
					writeErrs[i] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	for i, err := range writeErrs {
		if err != nil {
			t.Fatalf("e2e: connection %d: writing streams: %v (%v)", i, err, hs[i].state())
		}
	}
	t.Logf("e2e: %d streams opened on %d connections in %v", conns*perConn, conns, time.Since(start))

	// Beyond the limits, streams are refused or cut at once: soon no
	// connection has more than its limit unanswered, nor all of them more
	// than the incomplete-request limit.
	unanswered := func(s h2state) int { return perConn - s.refused - len(s.ended) }
	polltest.Eventually(t, 60*time.Second, 20*time.Millisecond, "streams beyond the limits answered", func() error {
		total := 0
		for i, h := range hs {
			st := h.state()
			if st.readErr != nil || st.goAway {
				return fmt.Errorf("connection %d lost: %v", i, st)
			}
			if n := unanswered(st); n > defaultMaxStreams {
				return fmt.Errorf("connection %d: %d streams unanswered: %v", i, n, st)
			}
			total += unanswered(st)
		}
		if total > defaultMaxIncomplete {
			return fmt.Errorf("%d streams unanswered in all", total)
		}
		return nil
	})
	held, _ := rss(pid)

	// A call on a fresh connection is answered while the streams are held.
	f := r.fresh(t, nil)
	res := f.call(callTimeout, 1, entry{"user", unique("u")})
	if !res.ok() {
		t.Fatalf("e2e: a call on a fresh connection during the abuse: %v, want OK", res)
	}
	t.Logf("e2e: call on a fresh connection while the slow streams are held: %v", res.Took)

	// Every stream is answered once the receive time is over: refused, or
	// ended by the server with DEADLINE_EXCEEDED.
	cut := 0
	for i, h := range hs {
		st, ok := h.waitFor(defaultReceiveTimeout+30*time.Second, func(s h2state) bool { return unanswered(s) <= 0 || s.readErr != nil })
		if !ok || unanswered(st) != 0 || st.readErr != nil {
			t.Fatalf("e2e: connection %d: %v; want every stream refused or ended by the server", i, st)
		}
		for id, how := range st.ended {
			if !strings.Contains(how, "grpc-status 4") {
				t.Fatalf("e2e: connection %d stream %d ended by %q, want grpc-status 4 (DEADLINE_EXCEEDED)", i, id, how)
			}
		}
		cut += len(st.ended)
	}
	t.Logf("e2e: every stream answered %v after the first was opened: %d refused, %d cut", time.Since(start), conns*perConn-cut, cut)
	top, err := peak.stop()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("e2e: RSS before %s, with the streams held %s, peak %s (ceiling %s)", mib(before), mib(held), mib(top), mib(rssCeiling()))
	if top > rssCeiling() {
		t.Errorf("e2e: RSS peak %s above the ceiling %s", mib(top), mib(rssCeiling()))
	}
	// A cut call is counted when its handler returns, which can be just
	// after the client has read the stream's end. A call cut before its
	// handler started (gRPC's transport aborts a stream whose context is
	// already done, so that handler never runs: a stream evicted in the
	// instant after its tap) is counted by the guard as it cuts it.
	polltest.Eventually(t, 10*time.Second, 20*time.Millisecond, "every stream cut is a call counted", func() error {
		if got := r.metric(`envoy_rls_calls_total{code="DeadlineExceeded"}`); got != float64(cut) {
			return fmt.Errorf("calls_total{code=DeadlineExceeded} = %v, want %d; %s", got, cut,
				r.metricLines("envoy_rls_calls_total", "envoy_rls_grpc_incomplete_requests"))
		}
		return nil
	})
	timeouts := r.metric(`envoy_rls_grpc_incomplete_requests_cut_total{reason="timeout"}`)
	evicted := r.metric(`envoy_rls_grpc_incomplete_requests_cut_total{reason="evicted"}`)
	if timeouts+evicted != float64(cut) || evicted == 0 || timeouts == 0 {
		t.Errorf("e2e: incomplete requests cut: %v by timeout, %v evicted; want both, %d in all", timeouts, evicted, cut)
	}
	if n := r.metric("go_goroutines"); n > 500 {
		t.Errorf("e2e: %v goroutines once the streams are cut, want the handlers gone", n)
	}
}

// TestIdleConnectionsBeyondTheLimitAreClosed: 1,100 idle HTTP/2
// connections (preface and SETTINGS, then nothing). The server keeps
// --grpc-max-connections (counting the test client's own) and closes the
// others as soon as it accepts them; the process stays under the memory
// ceiling and the established client keeps getting decisions. Once the idle
// connections are gone, a new connection is served again. The connections
// are held while measured: --grpc-first-call-timeout is longer than the
// test (TestConnectionsWithoutCallsAreClosed runs the default's part).
func TestIdleConnectionsBeyondTheLimitAreClosed(t *testing.T) {
	const total = defaultMaxConnections + 100
	r, pid, before, peak := startWatched(t, "idle", "--grpc-first-call-timeout", "10m")
	r.mustCall(t, entry{"user", unique("u")}) // the client's connection is open

	var hs []*h2conn
	refused := 0
	for range total {
		h, err := dialH2(r.grpcAddr)
		if err != nil {
			// The server reset the connection before the preface was
			// written.
			refused++
			continue
		}
		t.Cleanup(h.close)
		hs = append(hs, h)
	}
	accepted := 0
	for i, h := range hs {
		st, _ := h.waitFor(30*time.Second, func(s h2state) bool { return s.settings || s.readErr != nil })
		switch {
		case st.settings && st.readErr == nil:
			accepted++
		case !st.settings && closedByServer(st.readErr):
			refused++
		default:
			t.Fatalf("e2e: idle connection %d: %v; want served (SETTINGS) or closed at once", i, st)
		}
	}
	held, _ := rss(pid)
	t.Logf("e2e: %d idle connections: %d served, %d closed on accept", total, accepted, refused)
	if want := defaultMaxConnections - 1; accepted != want || refused != total-want {
		t.Fatalf("e2e: %d served and %d closed, want %d served (the limit, less the client's connection) and %d closed", accepted, refused, want, total-want)
	}
	if got := r.metric("envoy_rls_grpc_connections_refused_total"); got != float64(total-(defaultMaxConnections-1)) {
		t.Errorf("e2e: grpc_connections_refused_total = %v, want %d", got, total-(defaultMaxConnections-1))
	}
	if got := r.metric("envoy_rls_grpc_connections"); got != defaultMaxConnections {
		t.Errorf("e2e: grpc_connections = %v, want %d", got, defaultMaxConnections)
	}
	// The served connections stay served: nothing more has closed them.
	for i, h := range hs {
		if st := h.state(); st.settings && st.readErr != nil {
			t.Fatalf("e2e: served idle connection %d closed: %v", i, st)
		}
	}
	if res := r.call(callTimeout, 1, entry{"user", unique("u")}); !res.ok() {
		t.Fatalf("e2e: a call on the established connection with every place taken: %v, want OK", res)
	}
	top, err := peak.stop()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("e2e: RSS before %s, with %d idle connections %s, peak %s (ceiling %s)", mib(before), accepted, mib(held), mib(top), mib(rssCeiling()))
	if top > rssCeiling() {
		t.Errorf("e2e: RSS peak %s above the ceiling %s", mib(top), mib(rssCeiling()))
	}

	for _, h := range hs {
		h.close()
	}
	f := r.fresh(t, nil)
	polltest.Eventually(t, 30*time.Second, 50*time.Millisecond, "a call on a new connection once the idle ones closed", func() error {
		if res := f.call(callTimeout, 1, entry{"user", unique("u")}); !res.ok() {
			return fmt.Errorf("%v", res)
		}
		return nil
	})
}

// TestConnectionsWithoutCallsAreClosed: HTTP/2 connections that never call
// take every place of --grpc-max-connections the test client's connection
// leaves, and a new client is reset on accept. Each is closed at
// --grpc-first-call-timeout; a new client is then served, and the test
// client's connection, which called once and then stayed idle for longer
// than that, still serves it (as Envoy's pooled connections).
func TestConnectionsWithoutCallsAreClosed(t *testing.T) {
	const (
		places    = 50
		firstCall = 8 * time.Second
	)
	r := startReplica(t, "first-call", replicaConfig{Rules: rulesDir(t, abuseRules),
		Args: []string{"--grpc-max-connections", fmt.Sprint(places), "--grpc-first-call-timeout", firstCall.String()}})
	r.mustCall(t, entry{"user", unique("u")}) // the client's connection has called

	filled := time.Now()
	var idle []*h2conn
	for range places - 1 {
		h, err := dialH2(r.grpcAddr)
		if err != nil {
			t.Fatalf("e2e: idle connection %d: %v", len(idle), err)
		}
		t.Cleanup(h.close)
		idle = append(idle, h)
	}
	for i, h := range idle {
		if st, ok := h.waitFor(10*time.Second, func(s h2state) bool { return s.settings || s.readErr != nil }); !ok || !st.settings {
			t.Fatalf("e2e: idle connection %d not served: %v", i, st)
		}
	}
	// Every place is taken (the first idle connection was accepted after
	// filled): one more is reset on accept.
	if c, err := net.DialTimeout("tcp", r.grpcAddr, 5*time.Second); err == nil {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = c.Read(make([]byte, 1))
		_ = c.Close()
		if !closedByServer(err) || isTimeout(err) {
			t.Fatalf("e2e: a connection with every place taken: read %v, want it reset", err)
		}
	}
	if took := time.Since(filled); took >= firstCall {
		t.Fatalf("e2e: filling the places took %v, longer than the first-call timeout: the test proves nothing", took)
	}
	if got := r.metric("envoy_rls_grpc_connections_refused_total"); got < 1 {
		t.Errorf("e2e: grpc_connections_refused_total = %v with every place taken, want at least 1", got)
	}

	// A new client is served once the connections that never called are
	// closed.
	f := r.fresh(t, nil)
	polltest.Eventually(t, 30*time.Second, 50*time.Millisecond, "a call on a new connection", func() error {
		if res := f.call(callTimeout, 1, entry{"user", unique("u")}); !res.ok() {
			return fmt.Errorf("%v", res)
		}
		return nil
	})
	t.Logf("e2e: a new client was served %v after the places were filled (first-call timeout %v)", time.Since(filled).Round(time.Millisecond), firstCall)
	for i, h := range idle {
		if st, _ := h.waitFor(10*time.Second, func(s h2state) bool { return s.readErr != nil }); !closedByServer(st.readErr) {
			t.Fatalf("e2e: idle connection %d not closed by the server: %v", i, st)
		}
	}
	if got := r.metric("envoy_rls_grpc_connections_without_call_closed_total"); got != places-1 {
		t.Errorf("e2e: grpc_connections_without_call_closed_total = %v, want %d: the connections that never called, and only them", got, places-1)
	}
	if res := r.call(callTimeout, 1, entry{"user", unique("u")}); !res.ok() {
		t.Fatalf("e2e: a call on the connection that called first, idle since: %v, want OK", res)
	}
}

// isTimeout reports a read that timed out: the connection was left open.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

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

// BenchmarkSlowStreams measures one slow-stream pattern for
// docs/deploy.md (the figures are reported, nothing is checked):
//
//	E2E_SLOW_STREAMS=CONNS,STREAMS,PROMISED,SENT[,RECEIVE_TIMEOUT] go test -run x -bench BenchmarkSlowStreams -benchtime 1x ./e2e/
//
// (default 5,200,100,10)
// opens CONNS raw HTTP/2 connections, each with STREAMS ShouldRateLimit
// streams whose message promises PROMISED bytes of which SENT come
// (SENT < 65531), against a replica with --grpc-receive-timeout
// RECEIVE_TIMEOUT (default 30s, so that the streams stay held), logs the
// replica's resident set every second for 8 s, its peak, and how a call on
// a fresh connection fares.
func BenchmarkSlowStreams(b *testing.B) {
	t := b
	spec := os.Getenv("E2E_SLOW_STREAMS")
	if spec == "" {
		spec = "5,200,100,10"
	}
	var conns, streams, promised, sent int
	timeout := "30s"
	if n, _ := fmt.Sscanf(spec, "%d,%d,%d,%d,%s", &conns, &streams, &promised, &sent, &timeout); n < 4 {
		t.Fatalf("E2E_SLOW_STREAMS=%q: want CONNS,STREAMS,PROMISED,SENT[,RECEIVE_TIMEOUT]", spec)
	}
	r, pid, before, peak := startWatched(t, "measure", "--grpc-receive-timeout", timeout)
	for i := range conns {
		h, err := dialH2(r.grpcAddr)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		t.Cleanup(h.close)
		for range streams {
			if _, err := h.slowStream(promised, sent); err != nil {
				t.Fatalf("connection %d: %v", i, err)
			}
		}
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for i := 1; i <= 8; i++ {
		<-tick.C
		n, _ := rss(pid)
		t.Logf("after %ds: RSS %s", i, mib(n))
	}
	top, _ := peak.stop()
	res := r.fresh(t, nil).call(callTimeout, 1, entry{"user", unique("u")})
	t.Logf("%d connections × %d streams promising %d bytes, sending %d (receive timeout %s): RSS before %s, peak %s; a call on a fresh connection: %v",
		conns, streams, promised, sent, timeout, mib(before), mib(top), res)
	b.ReportMetric(float64(top)/(1<<20), "peak-RSS-MiB")
	b.ReportMetric(0, "ns/op")
}

// wireCodec sends a request as the bytes given (wireRequest) and reads the
// response as protobuf: a client that, like Envoy, does not check that
// header bytes copied into descriptor values are UTF-8 (gRPC's own codec
// refuses to marshal such strings).
type wireCodec struct{}

// wireRequest is a request already in protobuf wire format.
type wireRequest []byte

func (wireCodec) Name() string { return "proto" }

func (wireCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.(wireRequest))}, nil
}

func (wireCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return proto.Unmarshal(data.Materialize(), v.(proto.Message))
}

// encodeRequest writes a request for domain with one descriptor of the
// given entries, field by field, so that keys and values may hold any
// bytes.
func encodeRequest(domain string, entries ...entry) wireRequest {
	es := make([]rlswire.Entry, len(entries))
	for i, e := range entries {
		es[i] = rlswire.Entry(e)
	}
	return rlswire.Request(domain, es...)
}

// callWire sends req as it is and returns the overall code or the error.
func (r *replica) callWire(req wireRequest) (rlsv3.RateLimitResponse_Code, error) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	resp := &rlsv3.RateLimitResponse{}
	err := r.conn.Invoke(ctx, rlsPath, req, resp, grpc.ForceCodecV2(wireCodec{}))
	return resp.GetOverallCode(), err
}

// TestInvalidUTF8IsDecided: a descriptor value holding bytes that are not
// UTF-8 (0xff, as an API key header may carry) is a subject like any other:
// limited after its 3 calls, apart from another value, and every call is
// counted in calls_total. A request that is not protobuf at all is still
// refused, and counted too.
func TestInvalidUTF8IsDecided(t *testing.T) {
	r := startReplica(t, "utf8", replicaConfig{Rules: rulesDir(t, hourlyRules(3, "api_key"))})
	okBefore := r.metric(`envoy_rls_calls_total{code="OK"}`)
	key := unique("k") + "\xff\xfe"
	for i := range 5 {
		code, err := r.callWire(encodeRequest(domain, entry{"api_key", key}))
		want := rlsv3.RateLimitResponse_OK
		if i >= 3 {
			want = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if err != nil || code != want {
			t.Fatalf("e2e: call %d with value 0xff: %v %v, want %v", i, code, err, want)
		}
	}
	// The same text with U+FFFD where the bytes were is another subject:
	// values are compared as bytes, not after a lossy conversion.
	other := key[:len(key)-2] + "\uFFFD\uFFFD"
	if code, err := r.callWire(encodeRequest(domain, entry{"api_key", other})); err != nil || code != rlsv3.RateLimitResponse_OK {
		t.Fatalf("e2e: another value: %v %v, want OK", code, err)
	}
	// A key that is not UTF-8 matches no rule: OK, unlimited.
	if code, err := r.callWire(encodeRequest(domain, entry{"api\xff", "v"})); err != nil || code != rlsv3.RateLimitResponse_OK {
		t.Fatalf("e2e: key 0xff: %v %v, want OK", code, err)
	}
	// A call is counted when its handler returns, which may be after the
	// client has its answer.
	polltest.Eventually(t, 5*time.Second, 10*time.Millisecond, "the calls counted", func() error {
		if got, want := r.metric(`envoy_rls_calls_total{code="OK"}`)-okBefore, 7.0; got != want {
			return fmt.Errorf("calls_total{code=OK} grew by %v, want %v", got, want)
		}
		return nil
	})

	internalBefore := r.metric(`envoy_rls_calls_total{code="Internal"}`)
	_, err := r.callWire(wireRequest{0x0a, 0x05, 'e'}) // domain longer than the message
	if status.Code(err) != codes.Internal {
		t.Fatalf("e2e: truncated request: %v, want Internal", err)
	}
	polltest.Eventually(t, 5*time.Second, 10*time.Millisecond, "the malformed request counted", func() error {
		if got := r.metric(`envoy_rls_calls_total{code="Internal"}`) - internalBefore; got != 1 {
			return fmt.Errorf("calls_total{code=Internal} grew by %v after one malformed request, want 1", got)
		}
		return nil
	})
}
