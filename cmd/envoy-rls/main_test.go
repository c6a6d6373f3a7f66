package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// These tests run the real binary: exit codes and signals are main's job.

func buildBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "envoy-rls")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

func TestBinary(t *testing.T) {
	bin := buildBinary(t)
	t.Run("validate exit codes", func(t *testing.T) { testValidateExitCodes(t, bin) })
	t.Run("serve stops cleanly on SIGTERM", func(t *testing.T) { testServeStopsOnSIGTERM(t, bin) })
}

func testValidateExitCodes(t *testing.T, bin string) {
	out, err := exec.Command(bin, "validate", "../../config/examples").Output()
	if exitCode(err) != 0 || !strings.Contains(string(out), "domain edge") {
		t.Fatalf("validate config/examples: exit %d\n%s", exitCode(err), out)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: -1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "validate", "--config", bad)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	if exitCode(err) != 1 || !strings.HasPrefix(stdout.String(), bad+":4:") {
		t.Fatalf("validate bad: exit %d\nstdout:\n%s\nstderr:\n%s", exitCode(err), stdout.String(), stderr.String())
	}
	if err := exec.Command(bin, "frobnicate").Run(); exitCode(err) != 1 {
		t.Fatalf("unknown command: exit %d", exitCode(err))
	}
}

func testServeStopsOnSIGTERM(t *testing.T, bin string) {
	cmd := exec.Command(bin, "serve", "--config", "../../config/examples", "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "ENVOY_RLS_LOG_LEVEL=info")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill() }()
	lines := make(chan map[string]any, 100)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				lines <- m
			}
		}
		close(lines)
	}()
	var admin string
	deadline := time.After(20 * time.Second)
	for admin == "" {
		select {
		case m, ok := <-lines:
			if !ok {
				t.Fatal("the binary exited before serving")
			}
			if m["msg"] == "serving" {
				admin, _ = m["admin_addr"].(string)
			}
		case <-deadline:
			t.Fatal("no serving line within 20s")
		}
	}
	resp, err := http.Get("http://" + admin + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/readyz %d", resp.StatusCode)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	go func() {
		for range lines {
		}
	}()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if exitCode(err) != 0 {
			t.Fatalf("exit %d after SIGTERM, want 0", exitCode(err))
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the binary did not stop within 20s of SIGTERM")
	}
}
