package containers

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
)

func TestSelectLane(t *testing.T) {
	up := func() error { return nil }
	down := func() error { return errors.New("Cannot connect to the Docker daemon\nat unix:///var/run/docker.sock") }
	for _, tc := range []struct {
		name, mode, images string
		engine             func() error
		run                bool
		want               []string
		why, err           string
	}{
		{name: "auto, engine present", engine: up, run: true, want: DefaultImages, why: "a container engine answers"},
		{name: "auto spelled out, engine absent", mode: "auto", engine: down,
			why: "no container engine answers (Cannot connect to the Docker daemon)"},
		{name: "local despite an engine", mode: "local", engine: up, why: LaneEnv + "=local"},
		{name: "containers asked for, engine present", mode: "containers", engine: up, run: true, want: DefaultImages,
			why: LaneEnv + "=containers"},
		{name: "containers asked for, engine absent", mode: "containers", engine: down, err: "no container engine answers"},
		{name: "images narrowed", mode: "auto", images: " redis:8.0.2 , valkey/valkey:8.0.2,", engine: up,
			run: true, want: []string{"redis:8.0.2", "valkey/valkey:8.0.2"}, why: "a container engine answers"},
		{name: "images empty list", mode: "auto", images: " , ", engine: up, err: "names no image"},
		{name: "unknown mode", mode: "docker", engine: up, err: "want auto, containers or local"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			asked := false
			engine := func() error { asked = true; return tc.engine() }
			sel := selectLane(tc.mode, tc.images, engine)
			if tc.err != "" {
				if sel.err == nil || !strings.Contains(sel.err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", sel.err, tc.err)
				}
				return
			}
			if sel.err != nil {
				t.Fatalf("unexpected error %v", sel.err)
			}
			if sel.run != tc.run || !slices.Equal(sel.images, tc.want) || sel.why != tc.why {
				t.Errorf("run %v on %q (%s), want %v on %q (%s)", sel.run, sel.images, sel.why, tc.run, tc.want, tc.why)
			}
			if tc.mode == "local" && asked {
				t.Error("the engine was probed although the lane was turned off")
			}
		})
	}
}

func TestImageBinaries(t *testing.T) {
	for image, want := range map[string][2]string{
		"redis:7.4.1":                  {"redis-server", "redis-cli"},
		"valkey/valkey:8.0.2":          {"valkey-server", "valkey-cli"},
		"registry.example/valkey:8":    {"valkey-server", "valkey-cli"},
		"registry.example/redis-stack": {"redis-server", "redis-cli"},
	} {
		if got := [2]string{serverBinary(image), cliBinary(image)}; got != want {
			t.Errorf("%s: %v, want %v", image, got, want)
		}
	}
}

func TestContainerRequest(t *testing.T) {
	req := containerRequest("valkey/valkey:8.0.2", []string{"--port", "7000"})
	if got := req.Cmd; !slices.Equal(got, []string{"valkey-server", "--port", "7000"}) {
		t.Errorf("Cmd %q", got)
	}
	if !req.Started || req.HostConfigModifier == nil || req.User == "" {
		t.Errorf("request not started, without host config or user: %+v", req.ContainerRequest)
	}
}

// TestLane prints whether the container lane runs and on which images:
// `make test` ends with this line.
func TestLane(t *testing.T) {
	d := Describe()
	if !strings.HasPrefix(d, "container lane: ") {
		t.Fatalf("Describe = %q", d)
	}
	t.Log(d)
}

// TestServers runs the harness's suite (kill, restart, pause, TLS, Cluster,
// Sentinel) on containers of the lane's first image.
func TestServers(t *testing.T) {
	redistest.CheckServers(t, redistest.WithRunner(Runner(Images(t)[0])))
}

// TestMatrixStart starts a server of every image of the lane, runs a
// command on it, and kills and restarts it: each image works with the
// harness's arguments.
func TestMatrixStart(t *testing.T) {
	for _, image := range Images(t) {
		t.Run(image, func(t *testing.T) {
			s := redistest.Standalone(t, redistest.WithRunner(Runner(image)))
			if got := s.MustDo("SET", "k", "v"); got != "OK" {
				t.Fatalf("SET answered %v", got)
			}
			info, ok := s.MustDo("INFO", "server").(string)
			if !ok || !strings.Contains(info, "_version:") {
				t.Fatalf("INFO server answered %v", info)
			}
			for _, line := range strings.Split(info, "\r\n") {
				if strings.HasPrefix(line, "redis_version:") || strings.HasPrefix(line, "valkey_version:") {
					t.Log(image, line)
				}
			}
			if s.PID() == 0 {
				t.Fatal("no PID for a running server")
			}
			s.Kill()
			if s.PID() != 0 {
				t.Fatal("a PID after Kill")
			}
			s.Restart()
			if got := s.MustDo("EXISTS", "k"); got != int64(0) {
				t.Fatalf("EXISTS after restart = %v", got)
			}
		})
	}
}
