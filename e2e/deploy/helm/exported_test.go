package helm_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/e2e/deploy/internal/servetest"
	"github.com/envoy-rls/envoy-rls/internal/deploytest"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
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
	srv := servetest.Start(t, append([]string{"--config", rulesDir}, store...)...)
	call := func(domain, client string) {
		t.Helper()
		srv.Call(t, domain, []descriptors.Entry{{Key: "client", Value: client}})
	}
	// The same subject twice (allowed near the limit, then denied), more
	// subjects than the memory store holds (overflow), and a domain no
	// rule file has (unmatched).
	for i := range 8 {
		call("mon", "c0")
		call("mon", fmt.Sprintf("c%d", i+1))
	}
	call("nowhere", "c0")

	names := map[string]bool{}
	for name, f := range srv.Metrics(t) {
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
