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
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// buildTimeout bounds `go build` of the binary.
const buildTimeout = 5 * time.Minute

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
	buildDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// binary returns the path of cmd/envoy-rls built for this run (once per
// test binary, so -run filters and -short build nothing they do not need).
// It skips the test in -short mode. When the tests run with -race the binary
// is built with -race as well, and a race it detects makes it exit non-zero,
// which the replica's cleanup reports.
func binary(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("e2e: runs the real binary; skipped in -short mode")
	}
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "envoy-rls-e2e-")
		if buildErr != nil {
			return
		}
		binPath = filepath.Join(buildDir, "envoy-rls")
		args := []string{"build", "-o", binPath}
		if raceEnabled {
			args = append(args, "-race")
		}
		args = append(args, "github.com/envoy-rls/envoy-rls/cmd/envoy-rls")
		cmd := exec.Command(goTool(), args...)
		done := make(chan struct{})
		var out []byte
		go func() {
			out, buildErr = cmd.CombinedOutput()
			close(done)
		}()
		select {
		case <-done:
			if buildErr != nil {
				buildErr = fmt.Errorf("go %v: %v\n%s", args, buildErr, out)
			}
		case <-time.After(buildTimeout):
			_ = cmd.Process.Kill()
			<-done
			buildErr = fmt.Errorf("go build did not finish within %v", buildTimeout)
		}
	})
	if buildErr != nil {
		t.Fatalf("e2e: building envoy-rls: %v", buildErr)
	}
	return binPath
}

// goTool is the go command of the toolchain running the tests.
func goTool() string {
	if root := os.Getenv("GOROOT"); root != "" {
		p := filepath.Join(root, "bin", "go")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "go"
}
