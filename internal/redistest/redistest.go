// Package redistest gives tests a real Redis: the one named by REDIS_ADDR, or
// servers started on free loopback ports: one standalone server, a six-node
// Cluster, or a master with a replica and three sentinels. They are
// redis-server processes from PATH, or, given WithRunner, whatever a Runner
// runs (the e2e module's container lane runs them in containers of pinned
// images). Every server runs in t.TempDir() without persistence, listens on
// 127.0.0.1 only and is stopped (by PID) when the test ends. Tests can kill,
// restart, pause (SIGSTOP) and resume single nodes.
//
// Without redis-server the test is skipped, except when CI=true, where it
// fails: CI must exercise the Redis lanes.
package redistest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Bounds for starting and stopping servers.
const (
	// StartTimeout bounds waiting for one server to answer PING once it
	// runs.
	StartTimeout = 10 * time.Second
	// TopologyTimeout bounds waiting for a Cluster or Sentinel set to settle.
	TopologyTimeout = 60 * time.Second
	// faultTimeout bounds killing, pausing or resuming one server.
	faultTimeout = time.Minute
	// pollInterval is how often readiness is polled.
	pollInterval = 20 * time.Millisecond
)

// Server is one Redis server, or the external server of REDIS_ADDR.
type Server struct {
	t    testing.TB
	addr string
	port int
	dir  string
	tls  *tls.Config // client config for readiness pings, nil for plain TCP
	proc Process     // nil for the external server of REDIS_ADDR
}

// Addr is host:port of the server.
func (s *Server) Addr() string { return s.addr }

// Port is the server's TCP port (the TLS port for a TLS-only server).
func (s *Server) Port() int { return s.port }

// Dir is the server's working directory (empty for an external server).
func (s *Server) Dir() string { return s.dir }

// External reports whether the server is REDIS_ADDR's, which the test must not
// kill, restart or pause.
func (s *Server) External() bool { return s.proc == nil }

// PID is the host's process ID of the running server, or 0.
func (s *Server) PID() int {
	if s.proc == nil {
		return 0
	}
	return s.proc.PID()
}

// Option changes how a server is started.
type Option func(*options)

type options struct {
	runner     Runner // nil: redis-server processes from PATH
	args       []string
	local      bool
	tlsFiles   *TLSFiles
	tlsClient  *tls.Config
	noPlainTCP bool
}

// WithArgs adds redis-server command-line arguments ("--name", "value", ...).
func WithArgs(args ...string) Option {
	return func(o *options) { o.args = append(o.args, args...) }
}

// Local ignores REDIS_ADDR: the test needs a process it controls (fault
// injection, TLS, ACL users, configuration).
func Local() Option { return func(o *options) { o.local = true } }

// WithTLS starts a TLS-only server (no plain TCP port) with the given server
// certificate; client is the configuration readiness pings use.
func WithTLS(files TLSFiles, client *tls.Config) Option {
	return func(o *options) {
		o.tlsFiles = &files
		o.tlsClient = client
		o.noPlainTCP = true
		o.local = true
	}
}

// WithRunner starts the servers with r instead of as redis-server
// processes from PATH; it implies Local (REDIS_ADDR is not used).
func WithRunner(r Runner) Option {
	return func(o *options) {
		o.runner = r
		o.local = true
	}
}

// RequireServer skips the test when redis-server is missing (fails it when
// CI=true) and returns the binary's path.
func RequireServer(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("redistest: redis-server is not on PATH and CI=true: run scripts/ensure-deps.sh")
		}
		t.Skip("redistest: redis-server is not on PATH (set REDIS_ADDR or install redis-server)")
	}
	return p
}

// RedisLane skips t with -short (make test-short): the Redis lane is the
// tests that run the service, or its settings, on Redis; tests of a store
// on one local server run with -short too.
func RedisLane(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("Redis lane")
	}
}

// newOptions applies opts.
func newOptions(opts []Option) options {
	var o options
	for _, f := range opts {
		f(&o)
	}
	return o
}

// Standalone returns a Redis server: REDIS_ADDR when set (unless Local or
// WithRunner is given), else a new one: a redis-server process, or the
// runner's.
func Standalone(t testing.TB, opts ...Option) *Server {
	t.Helper()
	o := newOptions(opts)
	if addr := os.Getenv("REDIS_ADDR"); addr != "" && !o.local {
		s := &Server{t: t, addr: addr}
		ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
		defer cancel()
		if err := s.waitReady(ctx); err != nil {
			t.Fatalf("redistest: REDIS_ADDR=%s: %v", addr, err)
		}
		return s
	}
	if o.runner == nil {
		RequireServer(t)
	}
	return start(t, o, func(port int, dir string) ([]string, error) {
		return append(baseArgs(port, dir, o), o.args...), nil
	})
}

// start launches one server with the arguments build returns, on o's
// runner, and waits for it to answer PING. A port collision (another process
// grabbed the free port) is retried a few times.
func start(t testing.TB, o options, build func(port int, dir string) ([]string, error)) *Server {
	t.Helper()
	runner := o.runner
	if runner == nil {
		runner = localRunner{}
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := FreePort()
		if err != nil {
			t.Fatalf("redistest: %v", err)
		}
		dir := filepath.Join(t.TempDir(), "redis-"+strconv.Itoa(port))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatalf("redistest: %v", err)
		}
		args, err := build(port, dir)
		if err != nil {
			t.Fatalf("redistest: %v", err)
		}
		s := &Server{t: t, addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), port: port, dir: dir, tls: o.tlsClient,
			proc: runner.Process(t, args, dir)}
		t.Cleanup(s.proc.Remove)
		if lastErr = s.launch(); lastErr == nil {
			return s
		}
		s.proc.Remove()
	}
	t.Fatalf("redistest: starting a server: %v", lastErr)
	return nil
}

func baseArgs(port int, dir string, o options) []string {
	p := strconv.Itoa(port)
	args := []string{
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--daemonize", "no",
		"--loglevel", "warning",
		"--logfile", filepath.Join(dir, "redis.log"),
		"--pidfile", filepath.Join(dir, "redis.pid"),
		"--enable-debug-command", "local",
	}
	if o.noPlainTCP {
		f := o.tlsFiles
		args = append(args, "--port", "0", "--tls-port", p,
			"--tls-cert-file", f.ServerCert, "--tls-key-file", f.ServerKey,
			"--tls-ca-cert-file", f.CA, "--tls-auth-clients", "optional")
	} else {
		args = append(args, "--port", p)
	}
	return args
}

// config writes a configuration file (needed by sentinels, which rewrite it).
func writeConfig(dir, name string, lines []string) (string, error) {
	path := filepath.Join(dir, name)
	var b []byte
	for _, l := range lines {
		b = append(b, l...)
		b = append(b, '\n')
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return "", fmt.Errorf("redistest: write %s: %w", path, err)
	}
	return path, nil
}

// Do runs one command on the server over a fresh connection.
func (s *Server) Do(ctx context.Context, args ...string) (any, error) {
	return Do(ctx, s.addr, s.tls, args...)
}

// MustDo runs one command and fails the test on error.
func (s *Server) MustDo(args ...string) any {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := s.Do(ctx, args...)
	if err != nil {
		s.t.Fatalf("redistest: %s %v: %v", s.addr, args, err)
	}
	return v
}

// FreePort returns a loopback TCP port that is free, and whose cluster bus
// port (port+10000) is free too.
func FreePort() (int, error) {
	for i := 0; i < 50; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("find a free port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		if port > 55535 {
			l.Close()
			continue
		}
		bus, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+10000)))
		l.Close()
		if err != nil {
			continue
		}
		bus.Close()
		return port, nil
	}
	return 0, errors.New("find a free port: no port with a free bus port after 50 tries")
}

// Describe says, in one line for the test log's summary, which servers the
// Redis tests of this module run on.
func Describe() string {
	version := "redis-server not on PATH"
	if _, err := exec.LookPath("redis-server"); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
		defer cancel()
		out, err := exec.CommandContext(ctx, "redis-server", "--version").Output()
		if err != nil {
			version = "redis-server --version: " + err.Error()
		} else {
			version = strings.TrimSpace(string(out))
		}
	}
	line := "redis lane: local processes (" + version + ")"
	if addr := os.Getenv("REDIS_ADDR"); addr != "" {
		line += "; REDIS_ADDR=" + addr + " for the tests that need a Redis but not its process"
	}
	return line
}
