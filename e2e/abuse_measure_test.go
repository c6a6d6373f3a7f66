package e2e_test

import (
	"fmt"
	"os"
	"testing"
	"time"
)

// BenchmarkSlowStreams measures one slow-stream pattern for
// docs/operations.md (the figures are reported, nothing is checked):
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
	res := r.fresh(t).call(callTimeout, 1, entry{"user", unique("u")})
	t.Logf("%d connections × %d streams promising %d bytes, sending %d (receive timeout %s): RSS before %s, peak %s; a call on a fresh connection: %v",
		conns, streams, promised, sent, timeout, mib(before), mib(top), res)
	b.ReportMetric(float64(top)/(1<<20), "peak-RSS-MiB")
	b.ReportMetric(0, "ns/op")
}
