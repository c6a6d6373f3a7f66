//go:build containers

package compose_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go/modules/compose"

	"github.com/envoy-rls/envoy-rls/e2e/containers"
)

// TestComposeUp brings the demo up with testcontainers' compose module as
// docs/demo.md does with `docker compose up --build` (images built, every
// health check waited for), runs checkDemo against it and takes it down.
// `make test` builds this file (-tags containers) when a container engine
// answers; with the tag and no engine it skips with the engine's answer.
func TestComposeUp(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the image and starts the demo")
	}
	if err := containers.EngineAnswers(); err != nil {
		t.Skipf("the compose demo needs a container engine: %v", err)
	}
	stack, err := compose.NewDockerComposeWith(compose.WithStackFiles(filepath.Join(dir(t), "docker-compose.yaml")))
	if err != nil {
		t.Fatalf("compose stack: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	t.Cleanup(func() {
		dctx, dcancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer dcancel()
		if err := stack.Down(dctx, compose.RemoveOrphans(true), compose.RemoveVolumes(true)); err != nil {
			t.Errorf("compose down: %v", err)
		}
	})
	if err := stack.Up(ctx, compose.Wait(true)); err != nil {
		t.Fatalf("compose up: %v", err)
	}
	checkDemo(t, ctx)
}
