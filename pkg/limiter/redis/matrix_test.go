package redis

import (
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
)

// TestVersionMatrix runs the programs' differential tests against every
// image of the container lane's matrix but its first, on which every other
// test of this package runs (redistest.DefaultImages, narrowed by
// ENVOY_RLS_TEST_REDIS_IMAGES). On the local lane the matrix is the
// installed redis-server, which the rest of the package covers.
func TestVersionMatrix(t *testing.T) {
	images := redistest.MatrixImages(t)
	if redistest.Lane(t) == redistest.LaneLocal {
		t.Skip("local lane: the matrix is the installed redis-server, which every other test of this package runs on")
	}
	for _, image := range images[1:] {
		t.Run(image, func(t *testing.T) {
			e := newEnv(t, redistest.WithImage(image))
			t.Run("programs", func(t *testing.T) { programsAgainstApply(t, e) })
			t.Run("random", func(t *testing.T) { randomDifferential(t, e) })
			t.Run("batches", func(t *testing.T) { batchProgramAgainstApply(t, e, 1, 6) })
		})
	}
}
