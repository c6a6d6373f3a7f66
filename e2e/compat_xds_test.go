package e2e_test

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/credentials"

	"github.com/envoy-rls/envoy-rls/internal/polltest"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/internal/xdstest"
)

// TestRatelimitEntryPointXDS: the binary started as ratelimit with Envoy
// Gateway's environment as it is deployed — CONFIG_TYPE=GRPC_XDS_SOTW, the
// CONFIG_GRPC_XDS_* variables, mutual TLS to the xDS server and from Envoy,
// FORCE_START_WITHOUT_INITIAL_CONFIG — takes its rules from a
// go-control-plane server, acknowledges and enforces them, applies the
// next version under load, refuses a bad one, and outlives the xDS server's
// outage (checkXDSLifecycle).
func TestRatelimitEntryPointXDS(t *testing.T) {
	binary(t)
	redis := redistest.Standalone(t)
	tlsFiles := redistest.GenerateTLS(t)
	mtls := credentials.NewTLS(tlsFiles.ClientConfig(t))
	certs := xdstest.NewCerts(t)
	srv := xdstest.Start(t, certs, "envoy-ratelimit")
	srv.Set("v1", xdsRules(2))
	env, _ := envoyGatewayEnv(t, redis.Addr(), tlsFiles,
		"CACHE_KEY_PREFIX="+unique("compat-xds")+":",
		"CONFIG_TYPE=GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL="+srv.Addr(), "CONFIG_GRPC_XDS_NODE_ID=envoy-ratelimit",
		"CONFIG_GRPC_XDS_SERVER_USE_TLS=true", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT="+certs.ClientCert,
		"CONFIG_GRPC_XDS_CLIENT_TLS_KEY="+certs.ClientKey, "CONFIG_GRPC_XDS_SERVER_TLS_CACERT="+certs.CA,
		"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL=100ms", "XDS_CLIENT_BACKOFF_MAX_INTERVAL=500ms")
	r := startReplica(t, "ratelimit-xds", replicaConfig{Compat: true, Env: env, Creds: mtls})

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
