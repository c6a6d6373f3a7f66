package helm_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/envoy-rls/envoy-rls/internal/deploytest"
)

// exportRules is one domain whose single limit (1 a minute per subject)
// denies the second call of a subject and falls back locally when the
// store fails.
const exportRules = `domain: mon
descriptors:
  - key: client
    rate_limit:
      unit: minute
      requests_per_unit: 1
      failure_mode: local
`

// exportedMetrics returns the metric names (histograms as their _bucket,
// _sum and _count series) the real binary exports once it has decided
// allowed, denied, unmatched and overflowing calls on the memory store,
// and local fallbacks on a Redis store that does not answer.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "mon.yaml"), []byte(exportRules), 0o600); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(dir, "hmac")
	if err := os.WriteFile(secret, []byte(substituted), 0o600); err != nil {
		t.Fatal(err)
	}
	closed := deploytest.FreeAddr(t) // nothing listens there: the Redis store never connects
	names := map[string]bool{}
	for _, store := range [][]string{
		{"--store", "memory", "--memory-max-entries", "2", "--local-cache"},
		{"--store", "redis", "--redis-addr", closed, "--hmac-secret-file", secret},
	} {
		for n := range scrapeAfterCalls(t, dir, store) {
			names[n] = true
		}
	}
	return names
}

// scrapeAfterCalls runs envoy-rls serve on rulesDir with the store flags,
// makes calls and returns the names /metrics shows.
func scrapeAfterCalls(t *testing.T, rulesDir string, store []string) map[string]bool {
	t.Helper()
	grpcAddr, adminAddr := deploytest.Serve(t, append([]string{"--config", rulesDir}, store...)...)

	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	call := func(domain, client0 string) {
		t.Helper()
		cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer ccancel()
		req := &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{{
			Entries: []*ratelimitcommonv3.RateLimitDescriptor_Entry{{Key: "client", Value: client0}},
		}}}
		if _, err := client.ShouldRateLimit(cctx, req); err != nil {
			t.Fatalf("ShouldRateLimit %s %s: %v", domain, client0, err)
		}
	}
	// The same subject twice (allowed near the limit, then denied), more
	// subjects than the memory store holds (overflow), and a domain no
	// rule file has (unmatched).
	for i := range 8 {
		call("mon", "c0")
		call("mon", fmt.Sprintf("c%d", i+1))
	}
	call("nowhere", "c0")

	resp, err := http.Get("http://" + adminAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics: %v", err)
	}
	names := map[string]bool{}
	for name, f := range families {
		if !strings.HasPrefix(name, "envoy_rls_") {
			continue
		}
		names[name] = true
		if f.GetType().String() == "HISTOGRAM" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				names[name+s] = true
			}
		}
	}
	return names
}
