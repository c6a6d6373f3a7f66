package e2e_test

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/envoy-rls/envoy-rls/internal/binarytest"
	"github.com/envoy-rls/envoy-rls/internal/polltest"
)

// The serve defaults the abuse tests run against (internal/app).
const (
	defaultMaxStreams     = 100
	defaultMaxConnections = 1000
	defaultReceiveTimeout = 5 * time.Second
	defaultMaxIncomplete  = 1024
)

// Memory ceilings of the abuse patterns (docs/operations.md, "Limits on
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
const abuseRules = `domain: e2e
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 3}
`

// rss is the resident set of process pid (VmRSS), in bytes.
func rss(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) != 2 || f[1] != "kB" {
				return 0, fmt.Errorf("VmRSS line %q", line)
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

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

// fresh returns a copy of r that calls over a new gRPC connection.
func (r *replica) fresh(t testing.TB) *replica {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+r.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("e2e: new gRPC client for %s: %v", r.name, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	f := *r
	f.conn, f.rls = conn, rlsv3.NewRateLimitServiceClient(conn)
	return &f
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
	f := r.fresh(t)
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
// connections are gone, a new connection is served again.
func TestIdleConnectionsBeyondTheLimitAreClosed(t *testing.T) {
	const total = defaultMaxConnections + 100
	r, pid, before, peak := startWatched(t, "idle")
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
	f := r.fresh(t)
	polltest.Eventually(t, 30*time.Second, 50*time.Millisecond, "a call on a new connection once the idle ones closed", func() error {
		if res := f.call(callTimeout, 1, entry{"user", unique("u")}); !res.ok() {
			return fmt.Errorf("%v", res)
		}
		return nil
	})
}
