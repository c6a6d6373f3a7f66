package redistest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// The lanes a test binary can run its Redis servers on.
const (
	// LaneLocal runs redis-server processes from PATH.
	LaneLocal = "local"
	// LaneContainers runs each server in a container of a pinned image
	// (testcontainers-go), with the host's network.
	LaneContainers = "containers"
)

// LaneEnv selects the lane: local, containers or auto (the default:
// containers when a Docker-compatible engine answers, else local).
const LaneEnv = "ENVOY_RLS_TEST_REDIS"

// ImagesEnv narrows the container lane's image matrix to a comma-separated
// list of images (each must be one of DefaultImages, or any image that
// ships redis-server or valkey-server).
const ImagesEnv = "ENVOY_RLS_TEST_REDIS_IMAGES"

// DefaultImages is the container lane's matrix, pinned: Standalone, Cluster
// and Sentinel run on the first; MatrixImages walks them all.
var DefaultImages = []string{"redis:7.4.1", "redis:7.2.5", "redis:8.0.2", "valkey/valkey:8.0.2"}

// engineProbeTimeout bounds asking the container engine whether it answers.
const engineProbeTimeout = 10 * time.Second

// selection is the lane a test binary uses and why.
type selection struct {
	lane   string
	images []string
	why    string
	err    error // a lane that was asked for and cannot run
}

// selectLane decides the lane from the environment value of LaneEnv, the
// images value of ImagesEnv and engine, which reports whether a container
// engine answers (asked only when the choice depends on it).
func selectLane(mode, images string, engine func() error) selection {
	imgs := DefaultImages
	if images = strings.TrimSpace(images); images != "" {
		imgs = nil
		for _, im := range strings.Split(images, ",") {
			if im = strings.TrimSpace(im); im != "" {
				imgs = append(imgs, im)
			}
		}
		if len(imgs) == 0 {
			return selection{lane: LaneLocal, err: fmt.Errorf("%s=%q names no image", ImagesEnv, images)}
		}
	}
	switch strings.TrimSpace(mode) {
	case LaneLocal:
		return selection{lane: LaneLocal, why: LaneEnv + "=local"}
	case LaneContainers:
		if err := engine(); err != nil {
			return selection{lane: LaneContainers, images: imgs,
				err: fmt.Errorf("%s=containers, but no container engine answers: %w", LaneEnv, err)}
		}
		return selection{lane: LaneContainers, images: imgs, why: LaneEnv + "=containers"}
	case "", "auto":
		if err := engine(); err != nil {
			return selection{lane: LaneLocal, why: "no container engine answers (" + firstLine(err.Error()) + ")"}
		}
		return selection{lane: LaneContainers, images: imgs, why: "a container engine answers"}
	default:
		return selection{lane: LaneLocal, err: fmt.Errorf("%s=%q: want local, containers or auto", LaneEnv, mode)}
	}
}

// firstLine keeps an error message to one line.
func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// laneOnce holds the lane of this test binary: probing the engine once per
// process, not per test.
var laneOnce = sync.OnceValue(func() selection {
	return selectLane(os.Getenv(LaneEnv), os.Getenv(ImagesEnv), EngineAnswers)
})

// lane returns the lane of this test binary, failing t when the one asked
// for cannot run.
func lane(t testing.TB) selection {
	t.Helper()
	sel := laneOnce()
	if sel.err != nil {
		t.Fatalf("redistest: %v", sel.err)
	}
	return sel
}

// Lane returns the lane Standalone, StartCluster and StartSentinel start
// servers on: LaneLocal or LaneContainers.
func Lane(t testing.TB) string { return lane(t).lane }

// MatrixImages returns the images of the container lane's matrix, or, on the
// local lane, one empty name: the installed redis-server. StandaloneImage
// starts a server of one of them.
func MatrixImages(t testing.TB) []string {
	t.Helper()
	sel := lane(t)
	if sel.lane == LaneLocal {
		return []string{""}
	}
	return sel.images
}

// Describe says which lane runs and against which servers, in one line, for
// the test log's summary.
func Describe(t testing.TB) string {
	t.Helper()
	sel := lane(t)
	if sel.lane == LaneContainers {
		return fmt.Sprintf("redis lane: containers (%s); images %s; Standalone, Cluster and Sentinel on %s",
			sel.why, strings.Join(sel.images, ", "), sel.images[0])
	}
	version := "redis-server not on PATH"
	if _, err := exec.LookPath("redis-server"); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), engineProbeTimeout)
		defer cancel()
		out, err := exec.CommandContext(ctx, "redis-server", "--version").Output()
		if err != nil {
			version = "redis-server --version: " + err.Error()
		} else {
			version = strings.TrimSpace(string(out))
		}
	}
	return fmt.Sprintf("redis lane: local processes (%s); the matrix is the installed server only: %s", sel.why, version)
}
