// Package redistest gives tests a real Redis: the one named by REDIS_ADDR, or
// servers started on free loopback ports (one standalone server, a six-node
// Cluster, or a master with a replica and three sentinels) on one of two
// lanes: redis-server processes from PATH, or containers of pinned images
// (testcontainers-go) on the host's network, when a container engine answers
// (ENVOY_RLS_TEST_REDIS=local|containers|auto chooses; lane.go). Every server
// runs in t.TempDir() without persistence, listens on 127.0.0.1 only and is
// stopped (by PID, or its container removed) when the test ends. Tests can
// kill, restart, pause (SIGSTOP, or docker pause) and resume single nodes.
//
// When the local lane has no redis-server the test is skipped, except when
// CI=true, where it fails: CI must exercise the Redis lanes.
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
	"sync"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
)

// Bounds for starting and stopping processes.
const (
	// StartTimeout bounds waiting for one process to answer PING.
	StartTimeout = 10 * time.Second
	// TopologyTimeout bounds waiting for a Cluster or Sentinel set to settle.
	TopologyTimeout = 60 * time.Second
	// pollInterval is how often readiness is polled.
	pollInterval = 20 * time.Millisecond
)

// Server is one Redis process, or the external server of REDIS_ADDR.
type Server struct {
	t    testing.TB
	addr string
	port int
	dir  string
	args []string
	tls  *tls.Config // client config for readiness pings, nil for plain TCP
	ext  bool        // external: REDIS_ADDR, cannot be killed or restarted

	// image is the container image on the container lane, "" for a local
	// process.
	image string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}            // closed when cmd has been reaped
	ctr  testcontainers.Container // the server's container, nil for a process
}

// Addr is host:port of the server.
func (s *Server) Addr() string { return s.addr }

// Port is the server's TCP port (the TLS port for a TLS-only server).
func (s *Server) Port() int { return s.port }

// Dir is the server's working directory (empty for an external server).
func (s *Server) Dir() string { return s.dir }

// External reports whether the server is REDIS_ADDR's, which the test must not
// kill, restart or pause.
func (s *Server) External() bool { return s.ext }

// Image is the container image the server runs, "" for a local process.
func (s *Server) Image() string { return s.image }

// PID is the process ID of the running server (on the container lane, the
// host's PID of the container's server), or 0.
func (s *Server) PID() int {
	if s.image != "" {
		return s.containerPID()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Option changes how a server is started.
type Option func(*options)

type options struct {
	image      string // container image; "" is the lane's default
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

// WithImage runs the server in a container of image (the container lane
// only; MatrixImages lists the lane's images). An empty image is the lane's
// default.
func WithImage(image string) Option { return func(o *options) { o.image = image } }

// RequireServer skips the test when redis-server is missing (fails it when
// CI=true) and returns the binary's path; on the container lane, where the
// images bring the server, it returns "".
func RequireServer(t testing.TB) string {
	t.Helper()
	if lane(t).lane == LaneContainers {
		return ""
	}
	p, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("redistest: redis-server is not on PATH and CI=true: run scripts/ensure-deps.sh")
		}
		t.Skip("redistest: redis-server is not on PATH (set REDIS_ADDR or install redis-server)")
	}
	return p
}

// Standalone returns a Redis server: REDIS_ADDR when set (unless Local is
// given), else a new redis-server process.
func Standalone(t testing.TB, opts ...Option) *Server {
	t.Helper()
	var o options
	for _, f := range opts {
		f(&o)
	}
	if addr := os.Getenv("REDIS_ADDR"); addr != "" && !o.local {
		s := &Server{t: t, addr: addr, ext: true}
		ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
		defer cancel()
		if err := s.waitReady(ctx); err != nil {
			t.Fatalf("redistest: REDIS_ADDR=%s: %v", addr, err)
		}
		return s
	}
	RequireServer(t)
	return start(t, o, func(port int, dir string) ([]string, error) {
		return append(baseArgs(port, dir, o), o.args...), nil
	})
}

// start launches one redis-server with the arguments build returns and waits
// for it to answer PING. A port collision (another process grabbed the free
// port) is retried a few times.
func start(t testing.TB, o options, build func(port int, dir string) ([]string, error)) *Server {
	t.Helper()
	image := o.image
	if sel := lane(t); sel.lane == LaneContainers && image == "" {
		image = sel.images[0]
	} else if sel.lane == LaneLocal && image != "" {
		t.Fatalf("redistest: image %s asked for on the local lane (MatrixImages gives \"\" there)", image)
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
		s := &Server{t: t, addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), port: port, dir: dir, args: args, tls: o.tlsClient,
			image: image}
		t.Cleanup(s.stop)
		if lastErr = s.launch(); lastErr == nil {
			return s
		}
		s.stop()
	}
	t.Fatalf("redistest: starting redis-server: %v", lastErr)
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

// Eventually polls cond every interval until it returns nil or timeout passes,
// then fails the test with the last error.
func Eventually(t testing.TB, timeout, interval time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: %s: not within %v: %v", what, timeout, err)
		}
		time.Sleep(interval)
	}
}
