package redistest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
)

// containerStartTimeout bounds creating and starting one container, an image
// pull included (the first run of an image on a machine pulls it).
const containerStartTimeout = 5 * time.Minute

// EngineAnswers reports whether a Docker-compatible engine answers, through
// testcontainers' own provider health check. testcontainers panics on some
// engine-less setups; that is reported as no engine.
func EngineAnswers() (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("testcontainers: %v", r)
		}
	}()
	p, err := testcontainers.NewDockerProvider()
	if err != nil {
		return fmt.Errorf("testcontainers provider: %w", err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), engineProbeTimeout)
	defer cancel()
	if err := p.Health(ctx); err != nil {
		return fmt.Errorf("engine health: %w", err)
	}
	return nil
}

// serverBinary is the server command of an image: valkey images name it
// valkey-server.
func serverBinary(image string) string {
	if isValkey(image) {
		return "valkey-server"
	}
	return "redis-server"
}

// cliBinary is the command-line client of an image.
func cliBinary(image string) string {
	if isValkey(image) {
		return "valkey-cli"
	}
	return "redis-cli"
}

func isValkey(image string) bool {
	name := image
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		name = name[i+1:]
	}
	return strings.HasPrefix(name, "valkey")
}

// containerRequest is the container of one server: the image's server
// binary with the same arguments a local process gets, on the host's network
// (so addresses, Cluster and Sentinel announcements are the same loopback
// ports as on the local lane), as this user (so it writes the test's
// directories), with the temporary directory mounted at its own path (the
// server's directory, configuration and TLS files keep their paths).
func containerRequest(image string, args []string) testcontainers.GenericContainerRequest {
	tmp := os.TempDir()
	return testcontainers.GenericContainerRequest{
		ContainerRequest: testcontainers.ContainerRequest{
			Image: image,
			Cmd:   append([]string{serverBinary(image)}, args...),
			User:  strconv.Itoa(os.Getuid()) + ":" + strconv.Itoa(os.Getgid()),
			HostConfigModifier: func(hc *container.HostConfig) {
				hc.NetworkMode = "host"
				hc.Binds = append(hc.Binds, tmp+":"+tmp)
			},
		},
		Started: true,
	}
}

// launchContainer starts the server's container (or starts it again after
// Kill) and waits until it answers PING.
func (s *Server) launchContainer() error {
	ctx, cancel := context.WithTimeout(context.Background(), containerStartTimeout)
	defer cancel()
	s.mu.Lock()
	ctr := s.ctr
	s.mu.Unlock()
	if ctr == nil {
		c, err := testcontainers.GenericContainer(ctx, containerRequest(s.image, s.args))
		if c != nil {
			s.mu.Lock()
			s.ctr = c
			s.mu.Unlock()
		}
		if err != nil {
			return fmt.Errorf("start container %s: %w", s.image, err)
		}
	} else if err := ctr.Start(ctx); err != nil {
		return fmt.Errorf("start container %s again: %w", s.image, err)
	}
	rctx, rcancel := context.WithTimeout(context.Background(), StartTimeout)
	defer rcancel()
	if err := s.waitReady(rctx); err != nil {
		return fmt.Errorf("%s (%s) not ready: %w\n%s", s.addr, s.image, err, s.containerLogs())
	}
	return nil
}

// containerLogs returns the container's output for a failure message.
func (s *Server) containerLogs() string {
	s.mu.Lock()
	ctr := s.ctr
	s.mu.Unlock()
	if ctr == nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	r, err := ctr.Logs(ctx)
	if err != nil {
		return "container logs: " + err.Error()
	}
	defer r.Close()
	b, _ := io.ReadAll(io.LimitReader(r, 64<<10))
	return "container output:\n" + string(b)
}

// engineClient returns a client of the engine for what testcontainers'
// Container does not offer (pause, unpause).
func engineClient(ctx context.Context) (*testcontainers.DockerClient, error) {
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return nil, fmt.Errorf("engine client: %w", err)
	}
	return cli, nil
}

// containerOp runs op on the server's container with a bounded context and
// fails the test on error.
func (s *Server) containerOp(what string, op func(ctx context.Context, ctr testcontainers.Container) error) {
	s.t.Helper()
	s.mu.Lock()
	ctr := s.ctr
	s.mu.Unlock()
	if ctr == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), containerStartTimeout)
	defer cancel()
	if err := op(ctx, ctr); err != nil {
		s.t.Fatalf("redistest: %s container of %s: %v", what, s.addr, err)
	}
}

// pauseContainer freezes the container (docker pause): connections stay open,
// nothing answers.
func (s *Server) pauseContainer(pause bool) {
	s.t.Helper()
	s.containerOp("pause", func(ctx context.Context, ctr testcontainers.Container) error {
		cli, err := engineClient(ctx)
		if err != nil {
			return err
		}
		defer cli.Close()
		if pause {
			_, err = cli.ContainerPause(ctx, ctr.GetContainerID(), client.ContainerPauseOptions{})
		} else {
			_, err = cli.ContainerUnpause(ctx, ctr.GetContainerID(), client.ContainerUnpauseOptions{})
		}
		return err
	})
}

// killContainer stops the container at once (SIGKILL), unpausing it first:
// a paused container must die too. The container is kept for Restart.
func (s *Server) killContainer() {
	s.t.Helper()
	s.containerOp("kill", func(ctx context.Context, ctr testcontainers.Container) error {
		if st, err := ctr.State(ctx); err == nil && st.Paused {
			if cli, err := engineClient(ctx); err == nil {
				_, _ = cli.ContainerUnpause(ctx, ctr.GetContainerID(), client.ContainerUnpauseOptions{})
				cli.Close()
			}
		}
		zero := time.Duration(0)
		return ctr.Stop(ctx, &zero)
	})
}

// containerPID is the host PID of the container's server, 0 when it does not
// run.
func (s *Server) containerPID() int {
	s.mu.Lock()
	ctr := s.ctr
	s.mu.Unlock()
	if ctr == nil {
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	st, err := ctr.State(ctx)
	if err != nil || !st.Running {
		return 0
	}
	return st.Pid
}

// terminateContainer removes the container; registered with t.Cleanup.
func (s *Server) terminateContainer() {
	s.mu.Lock()
	ctr := s.ctr
	s.ctr = nil
	s.mu.Unlock()
	if ctr == nil {
		return
	}
	if err := testcontainers.TerminateContainer(ctr); err != nil && !errors.Is(err, context.Canceled) {
		s.t.Logf("redistest: remove container of %s: %v", s.addr, err)
	}
}

// execCLI runs the image's command-line client inside the server's container
// (the host may have no redis-cli) and returns its output.
func (s *Server) execCLI(ctx context.Context, args ...string) (string, error) {
	s.mu.Lock()
	ctr := s.ctr
	s.mu.Unlock()
	if ctr == nil {
		return "", errors.New("no container")
	}
	code, r, err := ctr.Exec(ctx, append([]string{cliBinary(s.image)}, args...))
	var out []byte
	if r != nil {
		out, _ = io.ReadAll(io.LimitReader(r, 1<<20))
	}
	if err != nil {
		return string(out), fmt.Errorf("exec %s: %w", cliBinary(s.image), err)
	}
	if code != 0 {
		return string(out), fmt.Errorf("%s exited %d", cliBinary(s.image), code)
	}
	return string(out), nil
}
