package redistest

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestSelectLane(t *testing.T) {
	up := func() error { return nil }
	down := func() error { return errors.New("Cannot connect to the Docker daemon\nat unix:///var/run/docker.sock") }
	for _, tc := range []struct {
		name, mode, images string
		engine             func() error
		lane               string
		images_            []string
		err                string
		why                string
	}{
		{name: "auto, engine present", mode: "", engine: up, lane: LaneContainers, images_: DefaultImages, why: "a container engine answers"},
		{name: "auto spelled out, engine absent", mode: "auto", engine: down, lane: LaneLocal,
			why: "no container engine answers (Cannot connect to the Docker daemon)"},
		{name: "local despite an engine", mode: "local", engine: up, lane: LaneLocal, why: LaneEnv + "=local"},
		{name: "containers asked for, engine present", mode: "containers", engine: up, lane: LaneContainers, images_: DefaultImages},
		{name: "containers asked for, engine absent", mode: "containers", engine: down, lane: LaneContainers,
			images_: DefaultImages, err: "no container engine answers"},
		{name: "images narrowed", mode: "auto", images: " redis:8.0.2 , valkey/valkey:8.0.2,", engine: up,
			lane: LaneContainers, images_: []string{"redis:8.0.2", "valkey/valkey:8.0.2"}},
		{name: "images empty list", mode: "auto", images: " , ", engine: up, err: "names no image"},
		{name: "unknown mode", mode: "docker", engine: up, err: "want local, containers or auto"},
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
			if sel.lane != tc.lane {
				t.Errorf("lane %q, want %q", sel.lane, tc.lane)
			}
			if tc.lane == LaneContainers && !slices.Equal(sel.images, tc.images_) {
				t.Errorf("images %q, want %q", sel.images, tc.images_)
			}
			if tc.why != "" && sel.why != tc.why {
				t.Errorf("why %q, want %q", sel.why, tc.why)
			}
			if tc.mode == "local" && asked {
				t.Error("the engine was probed although the local lane was asked for")
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

// TestLane prints which lane this machine's Redis tests run on and against
// which servers: `make test` ends with this line.
func TestLane(t *testing.T) {
	d := Describe(t)
	if !strings.HasPrefix(d, "redis lane: ") {
		t.Fatalf("Describe = %q", d)
	}
	t.Log(d)
}

// TestMatrixStart starts a server of every image of the lane's matrix (the
// installed redis-server on the local lane), runs a command on it and kills
// and restarts it: each image works with the harness's arguments.
func TestMatrixStart(t *testing.T) {
	for _, image := range MatrixImages(t) {
		name := image
		if name == "" {
			name = "installed"
		}
		t.Run(name, func(t *testing.T) {
			s := Standalone(t, Local(), WithImage(image))
			if got := s.MustDo("SET", "k", "v"); got != "OK" {
				t.Fatalf("SET answered %v", got)
			}
			info, ok := s.MustDo("INFO", "server").(string)
			if !ok || !strings.Contains(info, "_version:") {
				t.Fatalf("INFO server answered %v", info)
			}
			for _, line := range strings.Split(info, "\r\n") {
				if strings.HasPrefix(line, "redis_version:") || strings.HasPrefix(line, "valkey_version:") {
					t.Log(name, line)
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
