package deploytest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/binarytest"
	"github.com/envoy-rls/envoy-rls/internal/polltest"
)

// readyTimeout bounds waiting for a served binary's /readyz.
const readyTimeout = 15 * time.Second

// FreeAddr returns a loopback address nothing listens on.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// Serve runs `envoy-rls serve` (binarytest.Build) with args on free
// loopback ports and returns them once /readyz answers 200. The process is
// killed when the test ends; its output is printed when the test failed.
func Serve(t testing.TB, args ...string) (grpcAddr, adminAddr string) {
	t.Helper()
	grpcAddr, adminAddr = FreeAddr(t), FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, binarytest.Build(t),
		append([]string{"serve", "--grpc-addr", grpcAddr, "--admin-addr", adminAddr}, args...)...)
	// Read only after Wait, which returns once the output is copied.
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("envoy-rls serve %v log:\n%s", args, logs.String())
		}
	})
	url := "http://" + adminAddr + "/readyz"
	polltest.Eventually(t, readyTimeout, 50*time.Millisecond, url+" answers 200", func() error {
		resp, err := http.Get(url)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	})
	return grpcAddr, adminAddr
}
