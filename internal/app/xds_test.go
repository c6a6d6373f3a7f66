package app

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/internal/xdstest"
)

// userLimit is domain app, key user, n requests a minute.
func userLimit(n uint32) *rlsconf.RateLimitConfig {
	return &rlsconf.RateLimitConfig{Name: "app", Domain: "app", Descriptors: []*rlsconf.RateLimitDescriptor{{
		Key: "user", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_MINUTE, RequestsPerUnit: n},
	}}}
}

func xdsArgs(srv *xdstest.Server, c xdstest.Certs, extra ...string) []string {
	return append([]string{"--config-source", "xds", "--xds-server", srv.Addr(), "--xds-node-id", "rls-node",
		"--xds-tls-ca", c.CA, "--xds-tls-cert", c.ClientCert, "--xds-tls-key", c.ClientKey, "--xds-tls-san", "localhost",
		"--xds-header", "x-tenant:blue", "--xds-retry-interval", "50ms", "--xds-retry-max-interval", "200ms"}, extra...)
}

func limitOf(resp *rlsv3.RateLimitResponse) uint32 {
	if len(resp.GetStatuses()) == 0 || resp.Statuses[0].GetCurrentLimit() == nil {
		return 0
	}
	return resp.Statuses[0].GetCurrentLimit().GetRequestsPerUnit()
}

func TestXDSSource(t *testing.T) {
	certs := xdstest.NewCerts(t)
	srv := xdstest.Start(t, certs, "rls-node")
	srv.Set("v1", userLimit(2))
	r := startServe(t, xdsArgs(srv, certs), nil, hooks{})

	// v1 is enforced.
	r.wantCodes(t, "u1", allowed, allowed, denied)
	if _, ok := srv.Await(5*time.Second, xdstest.Acked("v1")); !ok {
		t.Fatalf("v1 not acknowledged; requests %+v", srv.Requests())
	}
	var md bool
	for _, q := range srv.Requests() {
		if q.Nonce == "(stream)" && len(q.Metadata.Get("x-tenant")) == 1 && q.Metadata.Get("x-tenant")[0] == "blue" {
			md = true
		}
		if q.Nonce != "(stream)" && q.Node != "" && q.Node != "rls-node" {
			t.Errorf("request as node %q", q.Node)
		}
	}
	if !md {
		t.Error("the stream did not carry --xds-header x-tenant:blue")
	}

	// v2 pushed under a bounded load: every call answers, then the new
	// limit is in force.
	var failed atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := 0; w < 4; w++ {
		wg.Go(func() {
			for i := 0; i < 2000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err := rlsv3.NewRateLimitServiceClient(r.conn).ShouldRateLimit(ctx, userRequest("load"))
				cancel()
				if err != nil {
					failed.Add(1)
				}
			}
		})
	}
	srv.Set("v2", userLimit(1000))
	_, ok := srv.Await(5*time.Second, xdstest.Acked("v2"))
	close(stop)
	wg.Wait()
	if !ok {
		t.Fatalf("v2 not acknowledged; requests %+v", srv.Requests())
	}
	if n := failed.Load(); n != 0 {
		t.Fatalf("%d calls failed while v2 was applied", n)
	}
	if got := limitOf(r.check(t, "u2")); got != 1000 {
		t.Fatalf("limit after v2: %d, want 1000", got)
	}

	// A bad version is refused with the compiler's reason; v2 stays.
	bad := userLimit(5)
	bad.Descriptors[0].RateLimit.Unit = rlsconf.RateLimitUnit_UNKNOWN
	srv.Set("v3", bad)
	q, ok := srv.Await(5*time.Second, xdstest.Nacked("v2"))
	if !ok {
		t.Fatalf("v3 not refused; requests %+v", srv.Requests())
	}
	if !strings.Contains(q.ErrorDetail, "v3") || !strings.Contains(q.ErrorDetail, "unit") {
		t.Errorf("error detail %q does not name the version and the problem", q.ErrorDetail)
	}
	if got := limitOf(r.check(t, "u3")); got != 1000 {
		t.Fatalf("limit after the refused v3: %d, want 1000 (v2)", got)
	}
	_, m := r.get(t, "/metrics")
	for _, want := range []string{`envoy_rls_xds_updates_total{result="nack"} 1`, `envoy_rls_xds_connected 1`} {
		t.Log(want)
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s:\n%s", want, m)
		}
	}
	if doc := r.config(t); doc.Source.Type != "xds" || doc.Source.Version != "v2" || doc.Source.Node != "rls-node" || doc.Source.Server != srv.Addr() || doc.LastReload.OK {
		t.Errorf("/config source %+v, last reload ok=%v; want xds v2 rls-node %s, last reload failed", doc.Source, doc.LastReload.OK, srv.Addr())
	}

	// The server goes away: the rules in service keep answering; it comes
	// back with v4, which is applied.
	srv.Stop()
	waitFor(t, func() bool {
		_, m := r.get(t, "/metrics")
		return strings.Contains(m, "envoy_rls_xds_connected 0")
	})
	if got := limitOf(r.check(t, "u4")); got != 1000 {
		t.Fatalf("limit with the xDS server down: %d, want 1000", got)
	}
	if code, _ := r.get(t, "/readyz"); code != 200 {
		t.Fatalf("/readyz %d with the xDS server down", code)
	}
	srv.Set("v4", userLimit(7))
	srv.Restart()
	if _, ok := srv.Await(10*time.Second, xdstest.Acked("v4")); !ok {
		t.Fatalf("v4 not acknowledged after the server came back; requests %+v\nlogs:\n%s", srv.Requests(), r.logs)
	}
	if got := limitOf(r.check(t, "u5")); got != 7 {
		t.Fatalf("limit after reconnecting: %d, want 7", got)
	}
}

func TestXDSForceStartAndInitialTimeout(t *testing.T) {
	certs := xdstest.NewCerts(t)
	srv := xdstest.Start(t, certs, "rls-node")
	// Nothing served for the node: with the flag, serve starts without
	// rules and answers OK.
	r := startServe(t, xdsArgs(srv, certs, "--force-start-without-initial-config", "--healthcheck-requires-rules"), nil, hooks{})
	if got := r.check(t, "u1").OverallCode; got != rlsv3.RateLimitResponse_OK {
		t.Fatalf("without rules: %v, want OK", got)
	}
	if code, _ := r.get(t, "/readyz"); code != 200 {
		t.Fatalf("/readyz %d without rules", code)
	}
	// The empty start is not a loaded rule set for the reference's probe
	// (HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED).
	if code, body := r.get(t, "/healthcheck"); code != 500 || !strings.Contains(body, "no rules loaded") {
		t.Fatalf("/healthcheck %d %q before the first version, want 500", code, body)
	}
	srv.Set("v1", userLimit(1))
	if _, ok := srv.Await(5*time.Second, xdstest.Acked("v1")); !ok {
		t.Fatal("v1 not acknowledged")
	}
	if code, body := r.get(t, "/healthcheck"); code != 200 {
		t.Fatalf("/healthcheck %d %q after v1, want 200", code, body)
	}
	if got := limitOf(r.check(t, "u1")); got != 1 {
		t.Fatalf("limit after v1: %d, want 1", got)
	}

	// Without it, serve gives up after --xds-initial-timeout.
	srv2 := xdstest.Start(t, certs, "other-node")
	err := run(context.Background(), append([]string{"serve", "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"},
		xdsArgs(srv2, certs, "--xds-initial-timeout", "300ms")...), noEnv, &syncBuffer{}, &syncBuffer{}, hooks{})
	if err == nil || !strings.Contains(err.Error(), "no rules from the xDS server") || !strings.Contains(err.Error(), "--force-start-without-initial-config") {
		t.Fatalf("serve without initial rules: %v", err)
	}
}
