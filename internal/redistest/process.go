package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

func (s *Server) launch() error {
	if s.image != "" {
		return s.launchContainer()
	}
	s.mu.Lock()
	cmd := exec.Command("redis-server", s.args...)
	cmd.Dir = s.dir
	out, err := os.OpenFile(filepath.Join(s.dir, "stdout.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		s.mu.Unlock()
		return fmt.Errorf("open log: %w", err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	// Own process group: a signal meant for the test binary does not reach it,
	// and it never outlives the test by accident of inheritance.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		s.mu.Unlock()
		out.Close()
		return fmt.Errorf("start redis-server: %w", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		out.Close()
		close(done)
	}()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	if err := s.waitReady(ctx); err != nil {
		log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
		so, _ := os.ReadFile(filepath.Join(s.dir, "stdout.log"))
		return fmt.Errorf("%s not ready: %w\nredis.log:\n%s\nstdout:\n%s", s.addr, err, log, so)
	}
	return nil
}

// waitReady polls PING until it answers PONG, the process exits, or ctx ends.
func (s *Server) waitReady(ctx context.Context) error {
	var lastErr error
	for {
		s.mu.Lock()
		done := s.done
		s.mu.Unlock()
		if done != nil {
			select {
			case <-done:
				return errors.New("redis-server exited")
			default:
			}
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

func (s *Server) mustLocal(op string) {
	s.t.Helper()
	if s.ext {
		s.t.Skipf("redistest: cannot %s the external REDIS_ADDR server", op)
	}
}

// Kill sends SIGKILL to the server and waits until it is gone.
func (s *Server) Kill() {
	s.t.Helper()
	s.mustLocal("kill")
	if s.image != "" {
		s.killContainer()
		return
	}
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT) // a paused process must die too
	_ = cmd.Process.Kill()
	select {
	case <-done:
	case <-time.After(StartTimeout):
		s.t.Fatalf("redistest: pid %d did not exit after SIGKILL", cmd.Process.Pid)
	}
	s.mu.Lock()
	s.cmd, s.done = nil, nil
	s.mu.Unlock()
}

// Restart starts a killed server again on the same port and directory.
func (s *Server) Restart() {
	s.t.Helper()
	s.mustLocal("restart")
	if s.PID() != 0 {
		s.Kill()
	}
	// The port was just released; another process could take it, which makes
	// launch fail with a clear message rather than hang.
	if err := s.launch(); err != nil {
		s.t.Fatalf("redistest: restart %s: %v", s.addr, err)
	}
}

// Pause stops the process with SIGSTOP: connections stay open, nothing answers.
// It returns once the process is stopped (where /proc tells).
func (s *Server) Pause() {
	s.t.Helper()
	if s.image != "" {
		s.mustLocal("pause")
		s.pauseContainer(true)
		return
	}
	if pid := s.signal("pause", syscall.SIGSTOP, "SIGSTOP"); pid != 0 {
		waitStopped(pid, StartTimeout)
	}
}

// signal sends sig (named name) to the local process for op and returns its
// PID, 0 when none runs.
func (s *Server) signal(op string, sig syscall.Signal, name string) int {
	s.t.Helper()
	s.mustLocal(op)
	pid := s.PID()
	if pid != 0 {
		if err := syscall.Kill(pid, sig); err != nil {
			s.t.Fatalf("redistest: %s %d: %v", name, pid, err)
		}
	}
	return pid
}

// waitStopped polls /proc/<pid>/stat until the process state is T
// (stopped), for at most timeout; without /proc it returns at once.
func waitStopped(pid int, timeout time.Duration) {
	end := time.Now().Add(timeout)
	for time.Now().Before(end) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return
		}
		// pid (comm) state ...: comm may hold spaces, the state follows
		// the last ')'.
		if i := strings.LastIndexByte(string(b), ')'); i < 0 || i+2 >= len(b) || b[i+2] == 'T' {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// Resume continues a paused process with SIGCONT.
func (s *Server) Resume() {
	s.t.Helper()
	if s.image != "" {
		s.mustLocal("resume")
		s.pauseContainer(false)
		return
	}
	s.signal("resume", syscall.SIGCONT, "SIGCONT")
}

// stop kills the process (if any) by PID; registered with t.Cleanup.
func (s *Server) stop() {
	if s.image != "" {
		s.terminateContainer()
		return
	}
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd, s.done = nil, nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_ = cmd.Process.Kill()
	select {
	case <-done:
	case <-time.After(StartTimeout):
	}
}
