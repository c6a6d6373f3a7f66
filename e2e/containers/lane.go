package containers

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
)

// LaneEnv decides whether the container lane runs: auto (the default) runs
// it when a container engine answers and skips its tests otherwise;
// containers requires an engine and fails the tests without one; local
// skips them. CI=true does not turn a missing engine into a failure: CI
// machines have none.
const LaneEnv = "ENVOY_RLS_TEST_REDIS"

// ImagesEnv narrows the lane's images to a comma-separated list (each one
// of DefaultImages, or any image that ships redis-server or valkey-server).
const ImagesEnv = "ENVOY_RLS_TEST_REDIS_IMAGES"

// DefaultImages are the lane's images, pinned: the suite runs on the first,
// the matrix on all of them.
var DefaultImages = []string{"redis:7.4.1", "redis:7.2.5", "redis:8.0.2", "valkey/valkey:8.0.2"}

// selection is whether the lane runs, on which images, and why.
type selection struct {
	run    bool
	images []string
	why    string
	err    error // the lane was asked for and cannot run, or is misconfigured
}

// selectLane decides from the value of LaneEnv (mode), the value of
// ImagesEnv and engine, which reports whether a container engine answers
// (asked only when the choice depends on it).
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
			return selection{err: fmt.Errorf("%s=%q names no image", ImagesEnv, images)}
		}
	}
	switch strings.TrimSpace(mode) {
	case "local":
		return selection{why: LaneEnv + "=local"}
	case "containers":
		if err := engine(); err != nil {
			return selection{err: fmt.Errorf("%s=containers, but no container engine answers: %w", LaneEnv, err)}
		}
		return selection{run: true, images: imgs, why: LaneEnv + "=containers"}
	case "", "auto":
		if err := engine(); err != nil {
			return selection{why: "no container engine answers (" + firstLine(err.Error()) + ")"}
		}
		return selection{run: true, images: imgs, why: "a container engine answers"}
	default:
		return selection{err: fmt.Errorf("%s=%q: want auto, containers or local", LaneEnv, mode)}
	}
}

// firstLine keeps an error message to one line.
func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// lane is this test process's selection: the engine is probed once per
// process, not per test.
var lane = sync.OnceValue(func() selection {
	return selectLane(os.Getenv(LaneEnv), os.Getenv(ImagesEnv), EngineAnswers)
})

// Images returns the lane's images. When the lane does not run it skips t
// with the reason; when it was asked for and cannot run it fails t.
func Images(t testing.TB) []string {
	t.Helper()
	sel := lane()
	if sel.err != nil {
		t.Fatalf("containers: %v", sel.err)
	}
	if !sel.run {
		t.Skipf("container lane not run: %s", sel.why)
	}
	return sel.images
}

// Describe says in one line whether the lane runs and on which images, for
// the summary `make test` ends with.
func Describe() string {
	sel := lane()
	switch {
	case sel.err != nil:
		return "container lane: cannot run: " + firstLine(sel.err.Error())
	case !sel.run:
		return "container lane: not run: " + sel.why
	}
	return fmt.Sprintf("container lane: %s (%s); the suite on %s, the matrix on each", strings.Join(sel.images, ", "), sel.why, sel.images[0])
}
