package compose_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/deploytest"
	"github.com/envoy-rls/envoy-rls/internal/polltest"
	"github.com/envoy-rls/envoy-rls/internal/rlqstest"
)

// TestDemoServesRLQS: the demo's envoy-rls, started with the flags
// docker-compose.yaml gives it (its store, Redis and addresses replaced by
// the memory store and loopback ports), serves RLQS on its gRPC port: a
// proxy running Envoy's rate_limit_quota filter that reports a bucket of
// the demo's domain, {remote_address: <client>} as the descriptor the
// demo's routes send, gets a token-bucket quota for it.
func TestDemoServesRLQS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the binary")
	}
	replaced := map[string]bool{"config": true, "store": true, "grpc-addr": true, "admin-addr": true}
	var args []string
	for _, a := range loadCompose(t).Services["envoy-rls"].Command[1:] {
		name, _, hasValue := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !replaced[name] && !strings.HasPrefix(name, "redis-") {
			args = append(args, a)
			continue
		}
		if !hasValue {
			t.Fatalf("envoy-rls command: %q: write --%s=VALUE so this test can replace it", a, name)
		}
	}
	grpcAddr, _ := deploytest.Serve(t, append(args, "--config", filepath.Join(dir(t), "rules"), "--store", "memory")...)

	p := rlqstest.Run(t, rlqstest.Config{Domain: parseEnvoy(t).rl.GetDomain(), Targets: []string{grpcAddr}, Interval: rlqstest.MinInterval})
	bucket := map[string]string{"remote_address": "198.51.100.7"}
	if !p.Request(bucket) {
		t.Fatal("the bucket's first request was denied before any quota")
	}
	polltest.Eventually(t, 10*time.Second, 20*time.Millisecond, "a quota for "+grpcAddr+"'s bucket", func() error {
		a, ok := p.Assignment(bucket)
		switch {
		case !ok:
			s := p.Stats()
			return fmt.Errorf("no assignment (streams opened %d, ended %d, last open error %q)", s.StreamsOpened, s.StreamsClosed, s.OpenError)
		case a.Strategy.GetTokenBucket() == nil:
			return fmt.Errorf("assigned %v, want a token bucket (the rule's rate)", a.Strategy)
		}
		return nil
	})
}
