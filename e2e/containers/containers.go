// Package containers is the container lane: it runs internal/redistest's
// servers in containers of pinned Redis and Valkey images (testcontainers-go)
// on the host's network, with the same arguments, ports and directories as
// redis-server processes, so that Standalone, StartCluster and StartSentinel
// work unchanged given WithRunner(Runner(image)). Its tests are the image
// matrix: the harness's suite and the rate programs' differential tests on
// each image. The lane runs where a Docker-compatible engine answers
// (lane.go); elsewhere its tests skip and say why.
package containers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
)

// Bounds of the engine's work.
const (
	// startTimeout bounds creating and starting one container, an image
	// pull included (the first run of an image on a machine pulls it).
	startTimeout = 5 * time.Minute
	// askTimeout bounds one question to the engine: whether it answers, a
	// container's state, its logs.
	askTimeout = 10 * time.Second
)

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
	ctx, cancel := context.WithTimeout(context.Background(), askTimeout)
	defer cancel()
	if err := p.Health(ctx); err != nil {
		return fmt.Errorf("engine health: %w", err)
	}
	return nil
}

// Runner runs each server in a container of image.
func Runner(image string) redistest.Runner { return runner{image: image} }

type runner struct{ image string }

func (r runner) Process(t testing.TB, args []string, _ string) redistest.Process {
	return &process{t: t, image: r.image, args: args}
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
// binary with the arguments a local process gets, on the host's network (so
// addresses, Cluster and Sentinel announcements are the same loopback ports
// as a process's), as this user (so it writes the test's directories), with
// the temporary directory mounted at its own path (the server's directory,
// configuration and TLS files keep their paths).
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

// process is one server's container, created by the first Start and kept
// (stopped) across Kill for the next Start.
type process struct {
	t     testing.TB
	image string
	args  []string

	mu  sync.Mutex
	ctr testcontainers.Container
}

func (p *process) container() testcontainers.Container {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ctr
}

func (p *process) Start(context.Context) error {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if ctr := p.container(); ctr != nil {
		if err := ctr.Start(ctx); err != nil {
			return fmt.Errorf("start container %s again: %w", p.image, err)
		}
		return nil
	}
	c, err := testcontainers.GenericContainer(ctx, containerRequest(p.image, p.args))
	if c != nil {
		p.mu.Lock()
		p.ctr = c
		p.mu.Unlock()
	}
	if err != nil {
		return fmt.Errorf("start container %s: %w", p.image, err)
	}
	return nil
}

// Exited is nil: readiness relies on PING and the start's bound.
func (p *process) Exited() <-chan struct{} { return nil }

// PID is the host's PID of the container's server, 0 when it does not run.
func (p *process) PID() int {
	ctr := p.container()
	if ctr == nil {
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), askTimeout)
	defer cancel()
	st, err := ctr.State(ctx)
	if err != nil || !st.Running {
		return 0
	}
	return st.Pid
}

// engine returns a client of the engine for what testcontainers' Container
// does not offer (pause, unpause).
func engine(ctx context.Context) (*testcontainers.DockerClient, error) {
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return nil, fmt.Errorf("engine client: %w", err)
	}
	return cli, nil
}

// pause freezes (docker pause) or thaws the container.
func (p *process) pause(ctx context.Context, freeze bool) error {
	ctr := p.container()
	if ctr == nil {
		return nil
	}
	cli, err := engine(ctx)
	if err != nil {
		return err
	}
	defer cli.Close()
	if freeze {
		_, err = cli.ContainerPause(ctx, ctr.GetContainerID(), client.ContainerPauseOptions{})
	} else {
		_, err = cli.ContainerUnpause(ctx, ctr.GetContainerID(), client.ContainerUnpauseOptions{})
	}
	return err
}

func (p *process) Pause(ctx context.Context) error  { return p.pause(ctx, true) }
func (p *process) Resume(ctx context.Context) error { return p.pause(ctx, false) }

// Kill stops the container at once (SIGKILL), thawing it first: a paused
// container must die too. The container is kept for the next Start.
func (p *process) Kill(ctx context.Context) error {
	ctr := p.container()
	if ctr == nil {
		return nil
	}
	if st, err := ctr.State(ctx); err == nil && st.Paused {
		if err := p.pause(ctx, false); err != nil {
			return err
		}
	}
	zero := time.Duration(0)
	return ctr.Stop(ctx, &zero)
}

// CLI runs the image's command-line client inside the container (the host
// may have no redis-cli).
func (p *process) CLI(ctx context.Context, args ...string) (string, error) {
	ctr := p.container()
	if ctr == nil {
		return "", errors.New("no container")
	}
	code, r, err := ctr.Exec(ctx, append([]string{cliBinary(p.image)}, args...))
	var out []byte
	if r != nil {
		out, _ = io.ReadAll(io.LimitReader(r, 1<<20))
	}
	if err != nil {
		return string(out), fmt.Errorf("exec %s: %w", cliBinary(p.image), err)
	}
	if code != 0 {
		return string(out), fmt.Errorf("%s exited %d", cliBinary(p.image), code)
	}
	return string(out), nil
}

// Output is the container's output.
func (p *process) Output() string {
	ctr := p.container()
	if ctr == nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), askTimeout)
	defer cancel()
	r, err := ctr.Logs(ctx)
	if err != nil {
		return "container logs: " + err.Error()
	}
	defer r.Close()
	b, _ := io.ReadAll(io.LimitReader(r, 64<<10))
	return "container output (" + p.image + "):\n" + string(b)
}

// Remove removes the container.
func (p *process) Remove() {
	p.mu.Lock()
	ctr := p.ctr
	p.ctr = nil
	p.mu.Unlock()
	if ctr == nil {
		return
	}
	if err := testcontainers.TerminateContainer(ctr); err != nil && !errors.Is(err, context.Canceled) {
		p.t.Logf("containers: remove the container of %s: %v", p.image, err)
	}
}
