package compose_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// dockerEngine reports why the demo cannot be started here, or "" when a
// Docker engine answers and the compose plugin is installed.
func dockerEngine() string {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		return fmt.Sprintf("no Docker engine (docker info: %v: %s)", err, out)
	}
	if out, err := exec.CommandContext(ctx, "docker", "compose", "version").CombinedOutput(); err != nil {
		return fmt.Sprintf("no docker compose plugin (%v: %s)", err, out)
	}
	return ""
}

// TestComposeUp needs a Docker engine with the compose plugin: it starts the
// demo as docs/demo.md says (up --build, waiting for every health check),
// then runs the docs' curl loop against Envoy (200 200 200 429 429), asks
// envoy-rls' published gRPC port for its health, and waits for Prometheus to
// report both scrape jobs up. It publishes the demo's fixed host ports, so
// nothing else may hold 10000, 8080, 8081, 9090 or 9901. Without an engine it
// is skipped; the other tests in this package check the same files
// statically and on the real binary.
func TestComposeUp(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the image and starts the demo")
	}
	if why := dockerEngine(); why != "" {
		t.Skip(why)
	}
	file := filepath.Join(dir(t), "docker-compose.yaml")
	compose := func(ctx context.Context, args ...string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, "docker", append([]string{"compose", "-f", file}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("docker compose %v: %v\n%s", args, err, out)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	t.Cleanup(func() {
		dctx, dcancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer dcancel()
		if t.Failed() {
			out, _ := exec.CommandContext(dctx, "docker", "compose", "-f", file, "logs", "--no-color").CombinedOutput()
			t.Logf("docker compose logs:\n%s", out)
		}
		out, err := exec.CommandContext(dctx, "docker", "compose", "-f", file, "down", "--volumes").CombinedOutput()
		if err != nil {
			t.Errorf("docker compose down: %v\n%s", err, out)
		}
	})
	compose(ctx, "up", "--build", "--detach", "--wait", "--wait-timeout", "300")

	// The docs' curl loop: per-client limit of 3 a minute on /limited.
	client := &http.Client{Timeout: 10 * time.Second}
	var codes []int
	for range 5 {
		resp, err := client.Get("http://127.0.0.1:10000/limited")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		codes = append(codes, resp.StatusCode)
	}
	if want := []int{200, 200, 200, 429, 429}; !slices.Equal(codes, want) {
		t.Errorf("curl loop on /limited: %v, want %v", codes, want)
	}

	// The published gRPC port answers.
	conn, err := grpc.NewClient("127.0.0.1:8081", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hctx, hcancel := context.WithTimeout(ctx, 5*time.Second)
	defer hcancel()
	hr, err := healthpb.NewHealthClient(conn).Check(hctx, &healthpb.HealthCheckRequest{})
	if err != nil || hr.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("gRPC health on 127.0.0.1:8081: %v %v, want SERVING", hr.GetStatus(), err)
	}

	// Prometheus scrapes both jobs (every 5 s): poll its query API.
	deadline := time.Now().Add(90 * time.Second)
	var up map[string]string
	for time.Now().Before(deadline) {
		up = promUp(t, client)
		if up["envoy-rls"] == "1" && up["envoy"] == "1" {
			return
		}
		time.Sleep(time.Second)
	}
	t.Errorf("Prometheus up{job} after 90s: %v, want envoy-rls and envoy at 1", up)
}

// promUp returns the value of `up` per job from the demo's Prometheus, or
// an empty map while it has not scraped yet.
func promUp(t *testing.T, client *http.Client) map[string]string {
	t.Helper()
	resp, err := client.Get("http://127.0.0.1:9090/api/v1/query?query=" + url.QueryEscape("up"))
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var body struct {
		Data struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Value  []any             `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("Prometheus query API: %v", err)
	}
	out := map[string]string{}
	for _, r := range body.Data.Result {
		if len(r.Value) == 2 {
			out[r.Metric["job"]], _ = r.Value[1].(string)
		}
	}
	return out
}
