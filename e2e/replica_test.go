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
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/envoy-rls/envoy-rls/internal/binarytest"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
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

// Bounds of the process lifecycle.
const (
	// startTimeout bounds a replica's start: the "serving" log line, then
	// /readyz answering 200.
	startTimeout = 30 * time.Second
	// drainTimeout is the replicas' --drain-timeout.
	drainTimeout = 5 * time.Second
	// stopTimeout bounds waiting for exit after SIGTERM before SIGKILL.
	stopTimeout = drainTimeout + 10*time.Second
	// logTail is how much of a replica's stderr a failed test prints.
	logTail = 64 << 10
)

// replicaConfig describes one envoy-rls process.
type replicaConfig struct {
	// Rules is the --config path (a rule directory).
	Rules string
	// Store is --store; empty leaves the flag out (the memory default).
	Store string
	// RedisAddr and RedisMode are --redis-addr and --redis-mode.
	RedisAddr string
	RedisMode string
	// Secret is the --hmac-secret-file path; empty leaves the flag out.
	Secret string
	// Args are more serve flags.
	Args []string
	// Env are more environment variables (NAME=value).
	Env []string
	// Unready: return once the replica serves, without waiting for /readyz
	// 200 (its store is not reachable yet).
	Unready bool
	// Compat starts the binary as `ratelimit` (a link made in a temporary
	// directory) with no arguments: Env alone configures it, as the
	// reference service's deployments do (the other fields but Unready and
	// Creds are not used).
	Compat bool
	// Creds are the gRPC client's transport credentials (default
	// plaintext).
	Creds credentials.TransportCredentials
	// Bin is the binary to start (default: binary(t), the production
	// build).
	Bin string
}

// process is one run of the binary, in its own process group (a signal
// meant for the test binary stays there), with the test's environment
// less any setting of the binary's own (ENVOY_RLS_*, the race detector's
// GORACE, tracing's OTEL_* and TRACING_*), so that only its arguments and
// the env given configure it. A process still running when its test ends
// is killed by PID.
type process struct {
	cmd     *exec.Cmd
	done    chan struct{} // closed when the process has been reaped
	exitErr error         // set before done is closed
}

// startProcess starts bin with args and env, its output going to stdout and
// stderr.
func startProcess(t testing.TB, bin string, env []string, stdout, stderr io.Writer, args ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(bin, args...), done: make(chan struct{})}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ENVOY_RLS_") && !strings.HasPrefix(kv, "GORACE=") &&
			!strings.HasPrefix(kv, "OTEL_") && !strings.HasPrefix(kv, "TRACING_") {
			p.cmd.Env = append(p.cmd.Env, kv)
		}
	}
	// A race the binary detects ends it with a non-zero exit at once.
	p.cmd.Env = append(p.cmd.Env, "GORACE=halt_on_error=1")
	p.cmd.Env = append(p.cmd.Env, env...)
	p.cmd.Stdout, p.cmd.Stderr = stdout, stderr
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("e2e: starting %s %q: %v", bin, args, err)
	}
	go func() {
		p.exitErr = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// terminate sends SIGTERM (the graceful stop Kubernetes and Envoy's operators
// use).
func (p *process) terminate(t testing.TB) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("e2e: SIGTERM pid %d: %v", p.cmd.Process.Pid, err)
	}
}

// wait waits up to timeout for the process to exit and returns its exit code,
// or an error when it is still running.
func (p *process) wait(timeout time.Duration) (int, error) {
	select {
	case <-p.done:
	case <-time.After(timeout):
		return -1, fmt.Errorf("pid %d still running after %v", p.cmd.Process.Pid, timeout)
	}
	var ee *exec.ExitError
	switch {
	case p.exitErr == nil:
		return 0, nil
	case errors.As(p.exitErr, &ee):
		return ee.ExitCode(), nil
	}
	return -1, p.exitErr
}

// stop sends SIGTERM, waits up to stopTimeout, then SIGKILLs. It returns an
// error unless the process exited 0 on SIGTERM.
func (p *process) stop() error {
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("SIGTERM: %w", err)
	}
	code, err := p.wait(stopTimeout)
	if err != nil {
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%w: killed", err)
	}
	if code != 0 {
		return fmt.Errorf("exit %d after SIGTERM, want 0 (a race report, if any, is in the log)", code)
	}
	return nil
}

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

// command is a run of the binary that ends by itself.
type command struct {
	*process
	stdout, stderr bytes.Buffer
}

// startCommand starts bin (the production binary when "") with args and
// env.
func startCommand(t testing.TB, bin string, env []string, args ...string) *command {
	t.Helper()
	if bin == "" {
		bin = binary(t)
	}
	c := &command{}
	c.process = startProcess(t, bin, env, &c.stdout, &c.stderr, args...)
	return c
}

// finish waits up to timeout for the command's exit and returns the run;
// a command still running then is killed and fails the test.
func (c *command) finish(t testing.TB, timeout time.Duration) run {
	t.Helper()
	code, err := c.wait(timeout)
	if err != nil {
		_ = c.cmd.Process.Kill()
		<-c.done
		t.Fatalf("e2e: %q: %v\nstdout:\n%s\nstderr:\n%s", c.cmd.Args, err, &c.stdout, &c.stderr)
	}
	return run{code: code, stdout: c.stdout.String(), stderr: c.stderr.String()}
}

// runCommand runs the production binary with args and env to its exit,
// within runTimeout.
func runCommand(t testing.TB, env []string, args ...string) run {
	t.Helper()
	return startCommand(t, "", env, args...).finish(t, runTimeout)
}

// runOK is runCommand for a command that must exit 0; it returns stdout.
func runOK(t testing.TB, env []string, args ...string) string {
	t.Helper()
	r := runCommand(t, env, args...)
	if r.code != 0 {
		t.Fatalf("envoy-rls %s: exit %d\nstderr:\n%s", strings.Join(args, " "), r.code, r.stderr)
	}
	return r.stdout
}

// replica is one running envoy-rls serve and a gRPC client playing Envoy.
type replica struct {
	*process
	t    testing.TB
	name string
	log  *logBuffer

	grpcAddr, adminAddr string
	conn                *grpc.ClientConn
	rls                 rlsv3.RateLimitServiceClient
}

// startReplica starts the binary with cfg on 127.0.0.1:0 ports, waits until
// it logs the addresses it listens on and (unless cfg.Unready) /readyz
// answers 200, and registers its stop (SIGTERM, then SIGKILL after
// stopTimeout) with t.Cleanup. Its
// stderr is printed into the test log when the test fails.
func startReplica(t testing.TB, name string, cfg replicaConfig) *replica {
	t.Helper()
	bin := cfg.Bin
	if bin == "" {
		bin = binary(t)
	}
	args := []string{"serve",
		"--config", cfg.Rules,
		"--grpc-addr", "127.0.0.1:0",
		"--admin-addr", "127.0.0.1:0",
		"--drain-timeout", drainTimeout.String(),
	}
	if cfg.Store != "" {
		args = append(args, "--store", cfg.Store)
	}
	if cfg.RedisAddr != "" {
		args = append(args, "--redis-addr", cfg.RedisAddr)
	}
	if cfg.RedisMode != "" {
		args = append(args, "--redis-mode", cfg.RedisMode)
	}
	if cfg.Secret != "" {
		args = append(args, "--hmac-secret-file", cfg.Secret)
	}
	args = append(args, cfg.Args...)
	if cfg.Compat {
		bin, args = ratelimitLink(t), nil
	}

	r := &replica{t: t, name: name}
	addrs := make(chan [2]string, 1)
	r.log = &logBuffer{onLine: func(line []byte) {
		var m struct {
			Msg   string `json:"msg"`
			GRPC  string `json:"grpc_addr"`
			Admin string `json:"admin_addr"`
		}
		if json.Unmarshal(line, &m) == nil && m.Msg == "serving" {
			select {
			case addrs <- [2]string{m.GRPC, m.Admin}:
			default:
			}
		}
	}}
	r.process = startProcess(t, bin, cfg.Env, r.log, r.log, args...)
	t.Logf("e2e: started %s (pid %d): %s", name, r.cmd.Process.Pid, strings.Join(r.cmd.Args, " "))
	t.Cleanup(r.cleanup)

	deadline := time.NewTimer(startTimeout)
	defer deadline.Stop()
	select {
	case a := <-addrs:
		r.grpcAddr, r.adminAddr = a[0], a[1]
	case <-r.done:
		t.Fatalf("e2e: %s exited before serving: %v", name, r.exitErr)
	case <-deadline.C:
		t.Fatalf("e2e: %s logged no serving line within %v", name, startTimeout)
	}
	r.conn, r.rls = dial(t, r.grpcAddr, cfg.Creds)
	for !cfg.Unready {
		code, _, err := r.admin("/readyz")
		if err == nil && code == http.StatusOK {
			break
		}
		select {
		case <-r.done:
			t.Fatalf("e2e: %s exited before ready: %v", name, r.exitErr)
		case <-deadline.C:
			t.Fatalf("e2e: %s not ready within %v: /readyz %d %v", name, startTimeout, code, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	return r
}

// startReplicas starts n replicas sharing one Redis (standalone or cluster
// mode), one rule directory and one HMAC secret.
func startReplicas(t *testing.T, n int, rules string, cfg replicaConfig) []*replica {
	t.Helper()
	cfg.Rules = rulesDir(t, rules)
	cfg.Secret = secretFile(t)
	rs := make([]*replica, n)
	for i := range rs {
		rs[i] = startReplica(t, fmt.Sprintf("replica-%d", i), cfg)
	}
	return rs
}

// cleanup stops the process by PID and prints its log when the test
// failed.
func (r *replica) cleanup() {
	select {
	case <-r.done:
	default:
		if err := r.stop(); err != nil {
			r.t.Errorf("e2e: stopping %s: %v", r.name, err)
		}
	}
	if r.t.Failed() {
		r.t.Logf("e2e: %s stderr (last %d KiB):\n%s", r.name, logTail>>10, r.log.tail(logTail))
	}
}

// adminDo sends a request of method for path to the admin port (1 s
// bound), with the bearer token unless it is empty, and returns the status
// code and body.
func (r *replica) adminDo(method, path, token string) (int, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, "http://"+r.adminAddr+path, nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return resp.StatusCode, string(b), err
}

// admin GETs path on the admin port without a token.
func (r *replica) admin(path string) (int, string, error) {
	return r.adminDo(http.MethodGet, path, "")
}

// mustAdmin is admin that fails the test on a transport error.
func (r *replica) mustAdmin(path string) (int, string) {
	r.t.Helper()
	code, body, err := r.admin(path)
	if err != nil {
		r.t.Fatalf("e2e: %s GET %s: %v", r.name, path, err)
	}
	return code, body
}

// metricsLines returns the lines of /metrics.
func (r *replica) metricsLines() []string {
	r.t.Helper()
	code, body := r.mustAdmin("/metrics")
	if code != http.StatusOK {
		r.t.Fatalf("e2e: %s /metrics: %d", r.name, code)
	}
	return strings.Split(body, "\n")
}

// metricSum adds the samples of /metrics whose line starts with prefix (0
// when there are none).
func (r *replica) metricSum(prefix string) float64 {
	r.t.Helper()
	var sum float64
	for _, line := range r.metricsLines() {
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err != nil {
			r.t.Fatalf("e2e: %s /metrics: %q: %v", r.name, line, err)
		}
		sum += v
	}
	return sum
}

// metric returns the value of one sample of /metrics, by its full name with
// labels as exposed (e.g. `envoy_rls_config_reloads_total{result="failure"}`),
// or 0 when the sample is absent.
func (r *replica) metric(sample string) float64 {
	r.t.Helper()
	return r.metricSum(sample + " ")
}

// metricLines returns the /metrics samples whose names start with one of
// prefixes, one per line, for failure messages.
func (r *replica) metricLines(prefixes ...string) string {
	r.t.Helper()
	var b strings.Builder
	for _, line := range r.metricsLines() {
		for _, p := range prefixes {
			if strings.HasPrefix(line, p) {
				b.WriteString("\n\t" + line)
				break
			}
		}
	}
	return b.String()
}

// rss is the resident set of process pid (VmRSS), in bytes.
func rss(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) != 2 || f[1] != "kB" {
				return 0, fmt.Errorf("VmRSS line %q", line)
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// logBuffer keeps a process's output and calls onLine for each complete line.
type logBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	partial []byte
	onLine  func([]byte)
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(p)
	b.partial = append(b.partial, p...)
	for {
		i := bytes.IndexByte(b.partial, '\n')
		if i < 0 {
			break
		}
		if b.onLine != nil {
			b.onLine(b.partial[:i])
		}
		b.partial = b.partial[i+1:]
	}
	return len(p), nil
}

// tail returns the last n bytes written.
func (b *logBuffer) tail(n int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.buf.Bytes()
	if len(s) > n {
		s = s[len(s)-n:]
	}
	return string(s)
}

// contains reports whether the output holds s.
func (b *logBuffer) contains(s string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Contains(b.buf.Bytes(), []byte(s))
}

// writeFile writes data to dir/name and returns the path.
func writeFile(t testing.TB, dir, name, data string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// secretFile writes an HMAC secret file shared by the replicas of one test.
func secretFile(t testing.TB) string {
	t.Helper()
	return writeFile(t, t.TempDir(), "hmac-secret", "e2e-shared-secret-0123456789abcdef0123456789\n")
}

// rulesDir writes one rule file into a new directory and returns the
// directory.
func rulesDir(t testing.TB, rules string) string {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, dir, "rules.yaml", rules)
	return dir
}

// hourlyRules is a rule file with one descriptor per key, each limited to
// perHour calls an hour (a window no test outlives).
func hourlyRules(perHour int, keys ...string) string { return ruleFile(perHour, keys, false) }

// failureModeRules is hourlyRules with one key per failure mode in modes,
// named after the mode, with that failure_mode.
func failureModeRules(perHour int, modes ...string) string { return ruleFile(perHour, modes, true) }

func ruleFile(perHour int, keys []string, failureModes bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "domain: %s\ndescriptors:\n", domain)
	for _, k := range keys {
		fmt.Fprintf(&b, "  - key: %s\n    rate_limit: {unit: hour, requests_per_unit: %d", k, perHour)
		if failureModes {
			fmt.Fprintf(&b, ", failure_mode: %s", k)
		}
		b.WriteString("}\n")
	}
	return b.String()
}

// withStandaloneRedis builds the binary (skipping the test in -short mode),
// starts a standalone Redis (opts as redistest.Standalone:
// redistest.Local() for one the test kills, pauses or restarts) and
// returns it with the configuration of a replica that uses it.
func withStandaloneRedis(t *testing.T, opts ...redistest.Option) (*redistest.Server, replicaConfig) {
	t.Helper()
	binary(t)
	redis := redistest.Standalone(t, opts...)
	return redis, replicaConfig{Store: "redis", RedisAddr: redis.Addr(), RedisMode: "standalone"}
}
