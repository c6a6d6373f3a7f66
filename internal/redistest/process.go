package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// A Runner runs servers elsewhere than as redis-server processes from PATH:
// the e2e module's container lane (e2e/containers) runs each in a container
// of a pinned image. Standalone, StartCluster and StartSentinel take one with
// WithRunner.
type Runner interface {
	// Process prepares a server that runs redis-server (or the image's
	// equivalent) with args and works in dir, under the test's temporary
	// directory. The server is started with Start and removed with Remove.
	Process(t testing.TB, args []string, dir string) Process
}

// A Process is one server: a redis-server process, or what a Runner runs.
type Process interface {
	// Start starts the server, or starts it again after Kill, on the same
	// port and directory; it bounds its own wait and returns once the
	// server runs (the caller then waits for it to answer PING).
	Start(ctx context.Context) error
	// Exited is closed when the started server has exited; nil when the
	// process cannot tell (readiness then relies on PING alone).
	Exited() <-chan struct{}
	// PID is the host's process ID of the running server, 0 when none runs.
	PID() int
	// Kill stops the server at once, a paused one too, and returns once it
	// is gone.
	Kill(ctx context.Context) error
	// Pause freezes the server (connections stay open, nothing answers)
	// and returns once it is frozen; Resume continues it.
	Pause(ctx context.Context) error
	Resume(ctx context.Context) error
	// CLI runs the server's command-line client (redis-cli) with args and
	// returns its combined output.
	CLI(ctx context.Context, args ...string) (string, error)
	// Output is the server's log, for a failure message.
	Output() string
	// Remove stops the server for good and releases what it holds. It may
	// be called more than once.
	Remove()
}

// launch starts the server's process and waits until it answers PING.
func (s *Server) launch() error {
	if err := s.proc.Start(context.Background()); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	if err := s.waitReady(ctx); err != nil {
		return fmt.Errorf("%s not ready: %w\n%s", s.addr, err, s.proc.Output())
	}
	return nil
}

// waitReady polls PING until it answers PONG, the process exits, or ctx ends.
func (s *Server) waitReady(ctx context.Context) error {
	var exited <-chan struct{}
	if s.proc != nil {
		exited = s.proc.Exited()
	}
	var lastErr error
	for {
		select {
		case <-exited:
			return errors.New("the server exited")
		default:
		}
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		v, err := Do(pctx, s.addr, s.tls, "PING")
		cancel()
		if err == nil && v == "PONG" {
			return nil
		}
		if err == nil {
			err = fmt.Errorf("PING answered %v", v)
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), lastErr)
		case <-time.After(pollInterval):
		}
	}
}

// fault runs op (kill, pause, resume) on the server's process, bounded by
// faultTimeout. It skips the test for the external server of REDIS_ADDR and
// fails it when op fails.
func (s *Server) fault(what string, op func(context.Context) error) {
	s.t.Helper()
	if s.proc == nil {
		s.t.Skipf("redistest: cannot %s the external REDIS_ADDR server", what)
	}
	ctx, cancel := context.WithTimeout(context.Background(), faultTimeout)
	defer cancel()
	if err := op(ctx); err != nil {
		s.t.Fatalf("redistest: %s %s: %v", what, s.addr, err)
	}
}

// Kill stops the server at once (SIGKILL) and waits until it is gone.
func (s *Server) Kill() {
	s.t.Helper()
	s.fault("kill", func(ctx context.Context) error { return s.proc.Kill(ctx) })
}

// Restart starts a killed server again on the same port and directory.
func (s *Server) Restart() {
	s.t.Helper()
	if s.PID() != 0 {
		s.Kill()
	}
	s.fault("restart", func(context.Context) error {
		// The port was just released; another process could take it, which
		// makes launch fail with a clear message rather than hang.
		return s.launch()
	})
}

// Pause freezes the server (SIGSTOP): connections stay open, nothing
// answers. It returns once the server is stopped.
func (s *Server) Pause() {
	s.t.Helper()
	s.fault("pause", func(ctx context.Context) error { return s.proc.Pause(ctx) })
}

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() {
	s.t.Helper()
	s.fault("resume", func(ctx context.Context) error { return s.proc.Resume(ctx) })
}

// localRunner runs redis-server processes from PATH.
type localRunner struct{}

func (localRunner) Process(_ testing.TB, args []string, dir string) Process {
	return &localProcess{args: args, dir: dir}
}

// localProcess is one redis-server process, in its own process group, its
// output in dir/stdout.log.
type localProcess struct {
	args []string
	dir  string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has been reaped
}

func (p *localProcess) Start(context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	cmd := exec.Command("redis-server", p.args...)
	cmd.Dir = p.dir
	out, err := os.OpenFile(filepath.Join(p.dir, "stdout.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("open log: %w", err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	// Own process group: a signal meant for the test binary does not reach it,
	// and it never outlives the test by accident of inheritance.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		out.Close()
		return fmt.Errorf("start redis-server: %w", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		out.Close()
		close(done)
	}()
	p.cmd, p.done = cmd, done
	return nil
}

func (p *localProcess) Exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// running returns the process and its done channel, nil when none runs.
func (p *localProcess) running() (*exec.Cmd, chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return nil, nil
	}
	select {
	case <-p.done:
		return nil, nil
	default:
		return p.cmd, p.done
	}
}

func (p *localProcess) PID() int {
	if cmd, _ := p.running(); cmd != nil {
		return cmd.Process.Pid
	}
	return 0
}

func (p *localProcess) Kill(ctx context.Context) error {
	cmd, done := p.running()
	if cmd == nil {
		return nil
	}
	_ = cmd.Process.Signal(syscall.SIGCONT) // a paused process must die too
	_ = cmd.Process.Kill()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("pid %d did not exit after SIGKILL: %w", cmd.Process.Pid, ctx.Err())
	}
}

func (p *localProcess) Pause(ctx context.Context) error {
	pid := p.PID()
	if pid == 0 {
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("SIGSTOP %d: %w", pid, err)
	}
	return waitStopped(ctx, pid)
}

// waitStopped polls /proc/<pid>/stat until the process state is T
// (stopped); without /proc it returns at once.
func waitStopped(ctx context.Context, pid int) error {
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return nil
		}
		// pid (comm) state ...: comm may hold spaces, the state follows
		// the last ')'.
		if i := strings.LastIndexByte(string(b), ')'); i < 0 || i+2 >= len(b) || b[i+2] == 'T' {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pid %d not stopped after SIGSTOP: %w", pid, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

func (p *localProcess) Resume(context.Context) error {
	if pid := p.PID(); pid != 0 {
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
			return fmt.Errorf("SIGCONT %d: %w", pid, err)
		}
	}
	return nil
}

func (p *localProcess) CLI(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput()
	return string(out), err
}

func (p *localProcess) Output() string {
	log, _ := os.ReadFile(filepath.Join(p.dir, "redis.log"))
	so, _ := os.ReadFile(filepath.Join(p.dir, "stdout.log"))
	return fmt.Sprintf("redis.log:\n%s\nstdout:\n%s", log, so)
}

// Remove kills the process, if any, by PID.
func (p *localProcess) Remove() {
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	_ = p.Kill(ctx)
}
