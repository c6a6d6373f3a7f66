// Package tools_test runs the bench scripts as `make bench-load` does.
package tools_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"image/png"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestBenchScriptFloor runs tools/scripts/bench.sh against the do-nothing
// floor, as `make bench-load` does, with short runs: it must build the
// tools, start and stop the server, append one JSON line per concurrency
// whose calls all succeeded, and draw the plot.
func TestBenchScriptFloor(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the tools and runs load: not in -short")
	}
	out := filepath.Join(t.TempDir(), "floor.jsonl")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "scripts/bench.sh", "--duration", "300ms", "--warmup", "100ms",
		"--concurrency", "2 4", "--subjects", "100", "--out", out)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("bench.sh: %v\n%s", err, stderr.String())
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var conc []int
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r struct {
			Label       string   `json:"label"`
			Concurrency int      `json:"concurrency"`
			Requests    uint64   `json:"requests"`
			OK          uint64   `json:"ok"`
			ErrorsTotal uint64   `json:"errors_total"`
			RPS         float64  `json:"rps"`
			P99Ms       float64  `json:"p99_ms"`
			ServerCPU   *float64 `json:"server_cpu_us_per_decision"`
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("%s: %v: %s", out, err, sc.Bytes())
		}
		if r.Label != "floor" || r.Requests == 0 || r.OK != r.Requests || r.ErrorsTotal != 0 ||
			r.RPS <= 0 || r.P99Ms <= 0 || r.ServerCPU == nil {
			t.Errorf("run at %d: %s", r.Concurrency, sc.Bytes())
		}
		conc = append(conc, r.Concurrency)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(conc) != 2 || conc[0] != 2 || conc[1] != 4 {
		t.Fatalf("runs at concurrency %v, want [2 4]", conc)
	}
	pf, err := os.Open(filepath.Join(filepath.Dir(out), "floor.png"))
	if err != nil {
		t.Fatalf("no plot: %v\n%s", err, stderr.String())
	}
	defer pf.Close()
	if _, err := png.Decode(pf); err != nil {
		t.Fatalf("plot: %v", err)
	}
	if !bytes.Contains(stderr.Bytes(), []byte("bench.sh: stopped pid")) {
		t.Errorf("bench.sh did not report stopping the server:\n%s", stderr.String())
	}
}

// TestBenchLoadRedis runs `make bench-load BENCH_ARGS="--target envoy-rls
// --store redis"` with short runs: the default rules match the load, so
// every answer carries a limit (no run is unmatched, and rls-load warns of
// nothing): the runs measure decisions made in Redis.
func TestBenchLoadRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the tools and envoy-rls and runs load: not in -short")
	}
	out := filepath.Join(t.TempDir(), "redis.jsonl")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "make", "-C", "..", "bench-load", "BENCH_ARGS=--target envoy-rls --store redis "+
		"--duration 1s --warmup 100ms --concurrency 2 --subjects 100 --no-plot --out "+out)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("make bench-load: %v\n%s", err, stderr.String())
	}
	if bytes.Contains(stderr.Bytes(), []byte("warning")) {
		t.Errorf("make bench-load warned:\n%s", stderr.String())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Label     string             `json:"label"`
		Requests  uint64             `json:"requests"`
		OK        uint64             `json:"ok"`
		Unmatched *uint64            `json:"unmatched"`
		Warning   string             `json:"warning"`
		Aux       map[string]float64 `json:"aux_cpu_us_per_decision"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(b), &r); err != nil {
		t.Fatalf("%s: %v: %s", out, err, b)
	}
	if r.Label != "envoy-rls redis" || r.Requests == 0 || r.OK != r.Requests || r.Unmatched == nil || *r.Unmatched != 0 ||
		r.Warning != "" || r.Aux["redis"] <= 0 {
		t.Errorf("run: %s\nwant every call answered OK under a limit, none unmatched, Redis busy", b)
	}
}

// TestBenchScriptRLQS runs tools/scripts/bench.sh --mode rlqs against
// envoy-rls on the memory store with a tiny fleet (2 proxies × 2 buckets,
// 2 s): the default rules match the buckets, so every bucket holds a quota
// and no request is denied; the one JSON line counts the reports, the
// server's CPU per report and every proxy's first assignment of each probe.
func TestBenchScriptRLQS(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the tools and envoy-rls and runs load: not in -short")
	}
	out := filepath.Join(t.TempDir(), "rlqs.jsonl")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "scripts/bench.sh", "--target", "envoy-rls", "--store", "memory", "--mode", "rlqs",
		"--fleet", "2x2", "--duration", "2s", "--warmup", "0s", "--probes", "2", "--out", out)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("bench.sh: %v\n%s", err, stderr.String())
	}
	if bytes.Contains(stderr.Bytes(), []byte("warning")) {
		t.Errorf("bench.sh warned:\n%s", stderr.String())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Label         string   `json:"label"`
		Proxies       int      `json:"proxies"`
		Buckets       int      `json:"buckets"`
		Reports       uint64   `json:"reports"`
		Messages      uint64   `json:"messages"`
		Requests      uint64   `json:"requests"`
		Denied        uint64   `json:"denied"`
		StreamsClosed int      `json:"streams_closed"`
		Warning       string   `json:"warning"`
		ServerCPU     *float64 `json:"server_cpu_us_per_report"`
		ProbeSamples  int      `json:"probe_samples"`
		AssignedMaxMs *float64 `json:"assigned_max_ms"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(b), &r); err != nil {
		t.Fatalf("%s: %v: %s", out, err, b)
	}
	if r.Label != "envoy-rls memory rlqs" || r.Proxies != 2 || r.Buckets != 2 || r.Messages == 0 ||
		r.Reports != 2*r.Messages || r.Requests == 0 || r.Denied != 0 || r.StreamsClosed != 0 || r.Warning != "" ||
		r.ServerCPU == nil || r.ProbeSamples != 4 || r.AssignedMaxMs == nil {
		t.Errorf("run: %s\nwant every bucket of both proxies reported under a quota, nothing denied, both probes assigned to both proxies", b)
	}
}
