// Package e2e_test runs the real envoy-rls binary, as Envoy and an operator
// see it: the binary is built once with `go build`, replicas are started as
// processes on free loopback ports with their own rule directories and secret
// files, and a gRPC client built on Envoy's own protos
// (envoy.service.ratelimit.v3) plays Envoy. Redis is real too: redis-server
// processes started by internal/redistest (standalone or a six-node Cluster),
// killed, paused and restarted by PID.
//
// The suite is skipped in -short mode. Without redis-server the Redis tests
// skip, except with CI=true, where they fail. See docs/testing.md.
package e2e_test

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/binarytest"
)

// TestMain removes the binaries the suite built when it ends.
func TestMain(m *testing.M) { binarytest.Main(m) }

// binary returns the production binary (internal/binarytest), built with
// -race when the tests run with -race: the replicas then run with
// GORACE=halt_on_error=1, so a data race in the binary makes it exit
// non-zero, which the replica's cleanup reports. It skips the test in
// -short mode.
func binary(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("e2e: runs the real binary; skipped in -short mode")
	}
	return binarytest.Build(t, binarytest.MatchRace())
}

// testclockBinary returns the binary built with `-tags testclock`: the
// production binary plus ENVOY_RLS_TEST_CLOCK_FILE, a file its memory store
// and its answers read the time from (internal/app/testclock.go;
// docs/testing.md). It skips the test in -short mode.
func testclockBinary(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("e2e: runs the real binary; skipped in -short mode")
	}
	return binarytest.Build(t, binarytest.MatchRace(), binarytest.Tags("testclock"))
}

// testClock is the clock file of a testclock binary's replica: the time its
// memory store, deny cache and answers read, set by the test.
type testClock struct {
	t    testing.TB
	path string
}

// newTestClock returns a clock file reading at (RFC 3339).
func newTestClock(t testing.TB, at string) *testClock {
	t.Helper()
	c := &testClock{t: t, path: filepath.Join(t.TempDir(), "clock")}
	c.set(at)
	return c
}

// set moves the clock to at (RFC 3339): the file is replaced by rename, so
// the binary never reads half a write.
func (c *testClock) set(at string) {
	c.t.Helper()
	tm, err := time.Parse(time.RFC3339Nano, at)
	if err != nil {
		c.t.Fatal(err)
	}
	tmp := c.path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.FormatInt(tm.UnixMilli(), 10)), 0o644); err != nil {
		c.t.Fatal(err)
	}
	if err := os.Rename(tmp, c.path); err != nil {
		c.t.Fatal(err)
	}
}

// env is the replica's environment variable naming the clock file.
func (c *testClock) env() string { return "ENVOY_RLS_TEST_CLOCK_FILE=" + c.path }
