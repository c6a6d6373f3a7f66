package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/binarytest"
)

// These tests run the real binary: exit codes and signals are main's job.

func TestMain(m *testing.M) { binarytest.Main(m) }

// buildBinary returns the production binary; it skips in -short mode.
func buildBinary(t *testing.T, opts ...binarytest.Option) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	return binarytest.Build(t, opts...)
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
	t.Run("start-up errors", func(t *testing.T) { testStartErrors(t, bin) })
	t.Run("help", func(t *testing.T) { testHelp(t, bin) })
}

// Every start-up failure exits 1 with one line per problem on stderr,
// naming the flag or variable, the value and what it accepts; nothing on
// stdout, and no usage dump.
func testStartErrors(t *testing.T, bin string) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: -1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	examples := []string{"serve", "--config", "../../config/examples", "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"}
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"env int", []string{"ENVOY_RLS_REDIS_POOL_SIZE=abc"}, examples, `envoy-rls: ENVOY_RLS_REDIS_POOL_SIZE="abc": must be an integer between 1 and 256`},
		{"env int out of range", []string{"ENVOY_RLS_REDIS_POOL_SIZE=0"}, examples, `envoy-rls: ENVOY_RLS_REDIS_POOL_SIZE="0": must be an integer between 1 and 256`},
		{"env duration", []string{"ENVOY_RLS_REDIS_TIMEOUT=50"}, examples, `envoy-rls: ENVOY_RLS_REDIS_TIMEOUT="50": must be a duration between 1ms and 1m0s`},
		{"env bool", []string{"ENVOY_RLS_PPROF=on"}, examples, `envoy-rls: ENVOY_RLS_PPROF="on": must be true or false`},
		{"env word", []string{"ENVOY_RLS_STORE=etcd"}, examples, `envoy-rls: ENVOY_RLS_STORE="etcd": must be memory or redis`},
		{"env gc percent", []string{"ENVOY_RLS_GC_PERCENT=1"}, examples, `envoy-rls: ENVOY_RLS_GC_PERCENT="1": must be 0 (automatic) or an integer between 10 and 10000`},
		{"flag int", nil, append(examples, "--memory-max-entries=lots"), `envoy-rls: --memory-max-entries="lots": must be 0 (automatic) or a positive integer`},
		{"flag duration", nil, append(examples, "--drain-timeout", "0"), `envoy-rls: --drain-timeout="0": must be a positive duration such as 15s`},
		{"flag bool", nil, append(examples, "--local-cache=maybe"), `envoy-rls: --local-cache="maybe": must be true or false`},
		{"unknown flag", nil, append(examples, "--grpc-port", "1"), `envoy-rls: unknown flag --grpc-port ("envoy-rls serve --help" lists the flags)`},
		{"missing config", nil, []string{"serve"}, "envoy-rls: --config (or ENVOY_RLS_CONFIG) is not set: must be the rule file or directory to serve"},
		{"redis without address", []string{"ENVOY_RLS_HMAC_SECRET=a-shared-secret-of-32-bytes-----"}, append(examples, "--store", "redis"), "envoy-rls: --redis-addr (or ENVOY_RLS_REDIS_ADDR) is not set: must be at least one host:port"},
		{"unreadable secret file", []string{"ENVOY_RLS_HMAC_SECRET_FILE=/nonexistent/s"}, examples, `envoy-rls: ENVOY_RLS_HMAC_SECRET_FILE="/nonexistent/s": must be a readable file holding the secret: open /nonexistent/s: no such file or directory`},
		{"listen failure", nil, append(examples, "--admin-addr", "127.0.0.1:99999"), `envoy-rls: --admin-addr="127.0.0.1:99999": must be an address this process can listen on: listen tcp: address 99999: invalid port`},
		{"two problems", []string{"ENVOY_RLS_LOG_LEVEL=chatty", "ENVOY_RLS_REDIS_POOL_SIZE=-1"}, examples,
			`envoy-rls: ENVOY_RLS_LOG_LEVEL="chatty": must be debug, info, warn or error` + "\n" + `envoy-rls: ENVOY_RLS_REDIS_POOL_SIZE="-1": must be an integer between 1 and 256`},
		{"redis without a secret", nil, append(examples, "--store", "redis", "--redis-addr", "127.0.0.1:1"),
			"envoy-rls: --store redis needs an HMAC secret shared by every replica: set --hmac-secret-file (or ENVOY_RLS_HMAC_SECRET_FILE) or ENVOY_RLS_HMAC_SECRET"},
		{"rules", nil, []string{"serve", "--config", bad},
			bad + ":4:51: requests_per_unit must be between 0 and 4294967295, got -1\n" + fmt.Sprintf("envoy-rls: --config=%q: 1 problem(s) in the rules; nothing served", bad)},
		{"unknown command", nil, []string{"frobnicate"}, `envoy-rls: unknown command "frobnicate": must be serve, validate, explain, digest, version or help ("envoy-rls help" explains them)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(bin, tc.args...)
			cmd.Env = append(cleanEnv(), tc.env...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			// Log lines (JSON) may precede the failure; the failure itself
			// is the plain lines at the end.
			var plain []string
			for _, line := range strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n") {
				if !strings.HasPrefix(line, "{") {
					plain = append(plain, line)
				}
			}
			got := strings.Join(plain, "\n")
			if tc.name == "rules" {
				got = strings.TrimPrefix(got, "envoy-rls: ")
			}
			if exitCode(err) != 1 || got != tc.want || stdout.Len() != 0 {
				t.Fatalf("exit %d\nstderr:\n%s\nwant:\n%s\nstdout:\n%s", exitCode(err), stderr.String(), tc.want, stdout.String())
			}
		})
	}
}

// cleanEnv is the test's environment without ENVOY_RLS_* variables.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ENVOY_RLS_") {
			env = append(env, kv)
		}
	}
	return env
}

// -h and --help print help on stdout and exit 0.
func testHelp(t *testing.T, bin string) {
	for _, args := range [][]string{{"serve", "-h"}, {"serve", "--help"}, {"--help"}, {"help"}} {
		cmd := exec.Command(bin, args...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); exitCode(err) != 0 || stderr.Len() != 0 || !strings.Contains(stdout.String(), "ENVOY_RLS_GRPC_ADDR") {
			t.Fatalf("%q: exit %d\nstdout:\n%s\nstderr:\n%s", args, exitCode(err), stdout.String(), stderr.String())
		}
	}
}

func testValidateExitCodes(t *testing.T, bin string) {
	out, err := exec.Command(bin, "validate", "../../config/examples").Output()
	if exitCode(err) != 0 || !strings.Contains(string(out), "domain edge") || !strings.Contains(string(out), "policy several/api_key::1: fixed_window 1000 per day [rate_limits[1] of 2]") {
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
