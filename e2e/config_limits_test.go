package e2e_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/polltest"
)

// runTimeout bounds one run of a command that must exit by itself.
const runTimeout = 30 * time.Second

// run is one finished run of the binary.
type run struct {
	code           int
	stdout, stderr string
}

// errorLines are the lines main printed for the error (the log lines,
// JSON, left out).
func (r run) errorLines() []string {
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(r.stderr), "\n") {
		if strings.HasPrefix(l, "envoy-rls: ") {
			out = append(out, l)
		}
	}
	return out
}

// startCommand starts the binary with args and env (added to the test's
// environment less any ENVOY_RLS_* variable) in its own process group, and
// registers a SIGKILL by PID for a test that ends before it exits.
func startCommand(t *testing.T, env []string, args ...string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer, <-chan error) {
	t.Helper()
	cmd := exec.Command(binary(t), args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ENVOY_RLS_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("e2e: starting envoy-rls %v: %v", args, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	// Once reaped, Kill signals nothing (os.ErrProcessDone).
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return cmd, &stdout, &stderr, done
}

// runCommand runs the binary to its exit, within runTimeout.
func runCommand(t *testing.T, env []string, args ...string) run {
	t.Helper()
	cmd, stdout, stderr, done := startCommand(t, env, args...)
	return awaitExit(t, cmd, stdout, stderr, done, runTimeout)
}

func awaitExit(t *testing.T, cmd *exec.Cmd, stdout, stderr *bytes.Buffer, done <-chan error, timeout time.Duration) run {
	t.Helper()
	select {
	case <-done:
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("e2e: envoy-rls %v did not exit within %v\nstdout:\n%s\nstderr:\n%s", cmd.Args[1:], timeout, stdout, stderr)
	}
	return run{code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String()}
}

// limitRules is a rule file of domain with n descriptors.
func limitRules(domain string, n int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "domain: %s\ndescriptors:\n", domain)
	for i := range n {
		fmt.Fprintf(&b, "  - key: k%d\n    rate_limit: {unit: hour, requests_per_unit: %d}\n", i, i+1)
	}
	return b.String()
}

// TestRuleSetOverLimitRefusedAtStart: a rule set over a whole-set bound
// (descriptors from a flag, bytes from the environment) stops serve at
// once with exit status 1 and one error line naming the total, the limit
// and the flag; so do *.yaml entries that are not files.
func TestRuleSetOverLimitRefusedAtStart(t *testing.T) {
	binary(t)
	dir := t.TempDir()
	for i := range 3 {
		writeFile(t, dir, fmt.Sprintf("r%d.yaml", i), limitRules(fmt.Sprintf("d%d", i), 2))
	}
	var bytesTotal int64
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		fi, _ := e.Info()
		bytesTotal += fi.Size()
	}
	listen := []string{"--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"}
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"descriptors", nil, []string{"--config-max-descriptors", "5"},
			fmt.Sprintf("envoy-rls: --config=%q: the 3 rule file(s) hold 6 descriptors, more than the limit of 5: raise --config-max-descriptors (or ENVOY_RLS_CONFIG_MAX_DESCRIPTORS) to load them; nothing served", dir)},
		{"bytes", []string{"ENVOY_RLS_CONFIG_MAX_BYTES=" + strconv.FormatInt(bytesTotal-1, 10)}, nil,
			fmt.Sprintf("envoy-rls: --config=%q: the 3 rule file(s) hold %d bytes, more than the limit of %d: raise --config-max-bytes (or ENVOY_RLS_CONFIG_MAX_BYTES) to load them; nothing served", dir, bytesTotal, bytesTotal-1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runCommand(t, tc.env, append(append([]string{"serve", "--config", dir}, listen...), tc.args...)...)
			if lines := r.errorLines(); r.code != 1 || len(lines) != 1 || lines[0] != tc.want {
				t.Fatalf("exit %d, error lines %q\nwant exit 1 and one line:\n%s\nstderr:\n%s", r.code, lines, tc.want, r.stderr)
			}
			if strings.Contains(r.stderr, `"msg":"serving"`) {
				t.Fatal("the replica served")
			}
		})
	}
	t.Run("directory entry", func(t *testing.T) {
		if err := os.Mkdir(filepath.Join(dir, "sub.yaml"), 0o755); err != nil {
			t.Fatal(err)
		}
		r := runCommand(t, nil, append([]string{"serve", "--config", dir}, listen...)...)
		lines := r.errorLines()
		if r.code != 1 || len(lines) != 2 || !strings.HasPrefix(lines[0], "envoy-rls: "+filepath.Join(dir, "sub.yaml")+": not a regular file (a directory)") {
			t.Fatalf("exit %d, error lines %q", r.code, lines)
		}
	})
}

// TestRuleSetOverLimitOnReload: an edit that takes the rule set over a
// bound is a failed reload (the rules in service keep answering, /config
// and the log say which bound and flag), and putting the files back clears
// the failure on /config.
func TestRuleSetOverLimitOnReload(t *testing.T) {
	binary(t)
	dir := rulesDir(t, reloadRules(1000, 5)) // 2 descriptors
	r := startReplica(t, "limited", replicaConfig{Rules: dir, Store: "memory", Args: []string{"--config-max-descriptors", "5"}})
	good, _ := readConfig(t, r)
	failures := r.metric(`envoy_rls_config_reloads_total{result="failure"}`)

	big := writeFile(t, dir, "more.yaml", limitRules("more", 4))
	const want = "the 2 rule file(s) hold 6 descriptors, more than the limit of 5: raise --config-max-descriptors (or ENVOY_RLS_CONFIG_MAX_DESCRIPTORS) to load them"
	polltest.Eventually(t, reloadTimeout, 20*time.Millisecond, "/config reports the reload over the limit", func() error {
		if doc, body := readConfig(t, r); doc.LastReload.OK || doc.LastReload.Error != want {
			return fmt.Errorf("last_reload: %s", body)
		}
		return nil
	})
	if doc, _ := readConfig(t, r); doc.LastReload.Fingerprint != good.LastReload.Fingerprint {
		t.Errorf("fingerprint %s after the failed reload, want the one in service %s", doc.LastReload.Fingerprint, good.LastReload.Fingerprint)
	}
	if got := r.metric(`envoy_rls_config_reloads_total{result="failure"}`); got <= failures {
		t.Errorf(`envoy_rls_config_reloads_total{result="failure"} %v, want more than %v`, got, failures)
	}
	if !r.log.contains(want) {
		t.Errorf("the log does not say %q", want)
	}
	if got := r.mustCall(t, entry{"load", unique("w")}).Limit; got != 1000 {
		t.Errorf("after the refused reload: current_limit %d, want the previous 1000", got)
	}

	if err := os.Remove(big); err != nil {
		t.Fatal(err)
	}
	polltest.Eventually(t, reloadTimeout, 20*time.Millisecond, "/config clears the failure once the files are back", func() error {
		if doc, body := readConfig(t, r); !doc.LastReload.OK || doc.LastReload.Error != "" || doc.LastReload.Fingerprint != good.LastReload.Fingerprint {
			return fmt.Errorf("last_reload: %s", body)
		}
		return nil
	})
}

// TestValidateNamedPipe: validate refuses a named pipe at once with a clear
// error instead of waiting for a writer.
func TestValidateNamedPipe(t *testing.T) {
	binary(t)
	fifo := filepath.Join(t.TempDir(), "rules.yaml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	r := runCommand(t, nil, "validate", fifo)
	if want := fifo + ": not a regular file (a named pipe)"; r.code != 1 || !strings.Contains(r.stdout, want) {
		t.Fatalf("validate of a FIFO: exit %d, stdout:\n%s\nstderr:\n%s\nwant exit 1 and %q", r.code, r.stdout, r.stderr, want)
	}
}

// TestValidateStopsOnSIGTERM: SIGTERM ends a validate that is still
// reading a large rule set, with exit status 1 and a line saying so.
func TestValidateStopsOnSIGTERM(t *testing.T) {
	binary(t)
	dir := t.TempDir()
	// About 40 MB of rules in files under the per-file token bound: tens of
	// seconds of parsing under -race, many seconds without.
	for i := range 16 {
		var b strings.Builder
		fmt.Fprintf(&b, "domain: d%d\ndescriptors:\n", i)
		for j := 0; b.Len() < 5<<19; j++ {
			fmt.Fprintf(&b, "  - key: k\n    value: v%d\n    rate_limit: {unit: second, requests_per_unit: 1}\n", j)
		}
		writeFile(t, dir, fmt.Sprintf("r%d.yaml", i), b.String())
	}
	cmd, stdout, stderr, done := startCommand(t, nil, "validate", "--config-max-bytes", "100000000", "--config-max-descriptors", "10000000", dir)
	// Wait until it is parsing (its heap has grown), so that its signal
	// handling is in place.
	polltest.Eventually(t, runTimeout, 20*time.Millisecond, "validate parsing", func() error {
		select {
		case err := <-done:
			t.Fatalf("validate exited (%v) before it was signalled:\n%s\n%s", err, stdout, stderr)
		default:
		}
		if rss := rssKB(cmd.Process.Pid); rss < 100<<10 {
			return fmt.Errorf("RSS %d KB", rss)
		}
		return nil
	})
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	r := awaitExit(t, cmd, stdout, stderr, done, 5*time.Second)
	if lines := r.errorLines(); r.code != 1 || len(lines) != 1 || !strings.Contains(lines[0], "stopped before the rules were read") {
		t.Fatalf("validate after SIGTERM: exit %d, stderr:\n%s", r.code, r.stderr)
	}
}

// rssKB is the resident set of pid, in KiB (0 when unknown).
func rssKB(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	return 0
}
