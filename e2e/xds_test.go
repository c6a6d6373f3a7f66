package e2e_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/internal/polltest"
	"github.com/envoy-rls/envoy-rls/internal/xdstest"
)

// xdsRules is domain e2e with a per-user limit of n a minute.
func xdsRules(n uint32) *rlsconf.RateLimitConfig {
	return &rlsconf.RateLimitConfig{Name: "e2e-rules", Domain: domain, Descriptors: []*rlsconf.RateLimitDescriptor{{
		Key: "user", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_MINUTE, RequestsPerUnit: n},
	}}}
}

// TestXDSConfigSource runs the binary with --config-source xds against a
// go-control-plane server over mutual TLS: rules pushed are enforced, a new
// version under load applies without a failed call, a bad version is
// refused with its reason while the previous rules stay, and the service
// keeps serving while the xDS server is down and takes the next version
// once it is back.
func TestXDSConfigSource(t *testing.T) {
	binary(t)
	certs := xdstest.NewCerts(t)
	srv := xdstest.Start(t, certs, "e2e-node")
	srv.Set("v1", xdsRules(2))
	r := startReplica(t, "replica", replicaConfig{Store: "memory", Args: []string{
		"--config-source", "xds", "--xds-server", srv.Addr(), "--xds-node-id", "e2e-node",
		"--xds-tls-ca", certs.CA, "--xds-tls-cert", certs.ClientCert, "--xds-tls-key", certs.ClientKey,
		"--xds-retry-interval", "100ms", "--xds-retry-max-interval", "500ms",
	}})

	checkXDSLifecycle(t, r, srv)
}

// checkXDSLifecycle drives a replica that enforces xdsRules(2) as version
// v1 of srv: v1 enforced; v2 pushed under load applies without a failed
// call; a bad v3 is refused with its reason while v2 stays; with the
// server down the replica keeps serving v2, and takes v4 once it is back.
func checkXDSLifecycle(t *testing.T, r *replica, srv *xdstest.Server) {
	t.Helper()
	r.checkAdmits(t, entry{"user", unique("u")}, 2, 3)

	// v2 under load: calls run before, during and after the push; every
	// one answers, and the answers switch from the v1 limit to the v2 one.
	ll, stopLoad := startLimitLoad(r, "user", 4, 20_000)
	all, calls := &ll.all, &ll.calls
	atLeast := func(n int64) {
		t.Helper()
		polltest.Eventually(t, reloadTimeout, 10*time.Millisecond, fmt.Sprintf("%d load calls", n), func() error {
			if got := calls.Load(); got < n {
				return fmt.Errorf("%d load calls", got)
			}
			return nil
		})
	}
	atLeast(200)
	srv.Set("v2", xdsRules(500))
	_, acked := srv.Await(reloadTimeout, xdstest.Acked("v2"))
	took := polltest.Eventually(t, reloadTimeout, 20*time.Millisecond, "current_limit 500", func() error {
		if got := r.mustCall(t, entry{"user", unique("w")}).Limit; got != 500 {
			return fmt.Errorf("current_limit %d", got)
		}
		return nil
	})
	atLeast(calls.Load() + 200)
	stopLoad()
	seen := ll.byLimit()
	before, after := seen[2], seen[500]
	t.Logf("v2 in force %v after it was acknowledged; load %s; answers with limit 2: %d, 500: %d", took, all.String(), before, after)
	if before == 0 || after == 0 {
		t.Errorf("the load saw %d answers under v1 and %d under v2; want both", before, after)
	}
	if !acked {
		t.Fatalf("v2 not acknowledged: %+v", srv.Requests())
	}
	if all.failed() != 0 {
		t.Fatalf("calls failed while v2 was applied: %s", all.String())
	}

	// A bad version: refused with the reason; v2 still answers.
	bad := xdsRules(5)
	bad.Descriptors[0].Key = ""
	srv.Set("v3", bad)
	q, ok := srv.Await(reloadTimeout, xdstest.Nacked("v2"))
	if !ok || !strings.Contains(q.ErrorDetail, "key") {
		t.Fatalf("v3 not refused with its reason: %+v", q)
	}
	if got := r.mustCall(t, entry{"user", unique("b")}).Limit; got != 500 {
		t.Fatalf("limit after the refused v3: %d, want 500", got)
	}
	doc, body := readConfig(t, r)
	if doc.LastReload.OK || !strings.Contains(body, `"version": "v2"`) || !strings.Contains(body, `"type": "xds"`) {
		t.Fatalf("/config after the refused v3:\n%s", body)
	}

	// The xDS server goes down: the service answers with v2; when the
	// server is back with v4, v4 applies.
	srv.Stop()
	polltest.Eventually(t, reloadTimeout, 20*time.Millisecond, "xds_connected 0", func() error {
		if v := r.metric("envoy_rls_xds_connected"); v != 0 {
			return fmt.Errorf("envoy_rls_xds_connected %v", v)
		}
		return nil
	})
	if got := r.mustCall(t, entry{"user", unique("d")}).Limit; got != 500 {
		t.Fatalf("limit with the xDS server down: %d, want 500", got)
	}
	if code, _ := r.mustAdmin("/readyz"); code != 200 {
		t.Fatalf("/readyz %d with the xDS server down", code)
	}
	srv.Set("v4", xdsRules(9))
	srv.Restart()
	took = polltest.Eventually(t, reloadTimeout, 20*time.Millisecond, "current_limit 9", func() error {
		if got := r.mustCall(t, entry{"user", unique("r")}).Limit; got != 9 {
			return fmt.Errorf("current_limit %d", got)
		}
		return nil
	})
	t.Logf("v4 in force %v after the server came back", took)
	if v := r.metric(`envoy_rls_xds_updates_total{result="nack"}`); v != 1 {
		t.Errorf(`envoy_rls_xds_updates_total{result="nack"} %v, want 1`, v)
	}
}

// TestRatelimitEntryPointXDS: the binary started as ratelimit with Envoy
// Gateway's environment as it is deployed — CONFIG_TYPE=GRPC_XDS_SOTW, the
// CONFIG_GRPC_XDS_* variables, mutual TLS to the xDS server and from Envoy,
// FORCE_START_WITHOUT_INITIAL_CONFIG — takes its rules from a
// go-control-plane server, acknowledges and enforces them, applies the
// next version under load, refuses a bad one, and outlives the xDS server's
// outage (checkXDSLifecycle).
func TestRatelimitEntryPointXDS(t *testing.T) {
	certs := xdstest.NewCerts(t)
	srv := xdstest.Start(t, certs, "envoy-ratelimit")
	srv.Set("v1", xdsRules(2))
	g := startEnvoyGateway(t,
		"CACHE_KEY_PREFIX="+unique("compat-xds")+":",
		"CONFIG_TYPE=GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL="+srv.Addr(), "CONFIG_GRPC_XDS_NODE_ID=envoy-ratelimit",
		"CONFIG_GRPC_XDS_SERVER_USE_TLS=true", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT="+certs.ClientCert,
		"CONFIG_GRPC_XDS_CLIENT_TLS_KEY="+certs.ClientKey, "CONFIG_GRPC_XDS_SERVER_TLS_CACERT="+certs.CA,
		"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL=100ms", "XDS_CLIENT_BACKOFF_MAX_INTERVAL=500ms")
	r := startReplica(t, "ratelimit-xds", replicaConfig{Compat: true, Env: g.env, Creds: g.creds})

	if _, ok := srv.Await(reloadTimeout, xdstest.Acked("v1")); !ok {
		t.Fatalf("v1 was not acknowledged within %v; requests: %+v", reloadTimeout, srv.Requests())
	}
	// The limit of a fresh user shows which version is in force.
	limitNow := func(want uint32) func() error {
		return func() error {
			if res := r.mustCall(t, entry{"user", unique("probe")}); res.Limit != want {
				return fmt.Errorf("limit %d, want %d", res.Limit, want)
			}
			return nil
		}
	}
	polltest.Eventually(t, reloadTimeout, 20*time.Millisecond, "the v1 rules in force", limitNow(2))
	checkXDSLifecycle(t, r, srv)
	if code, body := r.mustAdmin("/healthcheck"); code != 200 {
		t.Fatalf("/healthcheck %d %q, want 200", code, body)
	}
}
