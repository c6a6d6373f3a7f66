package compose_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/envoy-rls/envoy-rls/internal/polltest"
)

// checkDemo runs what docs/demo.md shows against the running demo: the
// docs' curl loop against Envoy (200 200 200 429 429, each 429 with a
// Retry-After), the health of envoy-rls' published gRPC port, and both
// scrape jobs up in Prometheus. It uses the demo's fixed host ports (10000,
// 8080, 8081, 9090, 9901).
func checkDemo(t *testing.T, ctx context.Context) {
	t.Helper()
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
		if resp.StatusCode == http.StatusTooManyRequests {
			if ra := resp.Header.Get("Retry-After"); ra == "" {
				t.Errorf("a 429 on /limited without Retry-After: %v", resp.Header)
			}
		}
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
	polltest.Eventually(t, 90*time.Second, time.Second, "Prometheus up{job} 1 for envoy-rls and envoy", func() error {
		if up := promUp(t, client); up["envoy-rls"] != "1" || up["envoy"] != "1" {
			return fmt.Errorf("up{job} %v", up)
		}
		return nil
	})
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
