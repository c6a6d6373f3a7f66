package main

import (
	"errors"
	"io"
	"reflect"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/tools/internal/loadgen"
	"github.com/envoy-rls/envoy-rls/tools/internal/rlqsload"
)

func TestParseFlagsDefaults(t *testing.T) {
	cfg, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := rlqsload.Config{Addr: "127.0.0.1:8081", Domain: "bench", Key: "tenant", Proxies: 20, Buckets: 500,
		Interval: time.Second, Rate: 1, Ramp: 15, Warmup: 2 * time.Second, Duration: 10 * time.Second,
		Tick: time.Second, Probes: 5}
	if !reflect.DeepEqual(cfg, want) {
		t.Fatalf("defaults: %+v, want %+v", cfg, want)
	}
}

func TestParseFlags(t *testing.T) {
	cfg, err := parseFlags([]string{"-proxies", "2", "-buckets", "3", "-disjoint", "-interval", "500ms", "-rate", "0.5",
		"-ramp", "4", "-warmup", "0s", "-duration", "2s", "-tick", "200ms", "-probes", "0", "-domain", "d", "-key", "k",
		"-server-pid", "12", "-aux-pid", "redis=34", "-label", "x"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Proxies != 2 || cfg.Buckets != 3 || !cfg.Disjoint || cfg.Interval != 500*time.Millisecond || cfg.Rate != 0.5 ||
		cfg.Ramp != 4 || cfg.Warmup != 0 || cfg.Duration != 2*time.Second || cfg.Tick != 200*time.Millisecond ||
		cfg.Probes != 0 || cfg.Domain != "d" || cfg.Key != "k" || cfg.ServerPID != 12 || cfg.AuxPIDs["redis"] != 34 || cfg.Label != "x" {
		t.Fatalf("parsed: %+v", cfg)
	}
}

func TestParseFlagsErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		is   error
	}{
		{name: "remote target", args: []string{"-addr", "10.0.0.8:8081"}, is: loadgen.ErrNotLoopback},
		{name: "too many buckets", args: []string{"-buckets", "996"}, is: rlqsload.ErrInvalidConfig},
		{name: "no proxies", args: []string{"-proxies", "0"}, is: rlqsload.ErrInvalidConfig},
		{name: "short interval", args: []string{"-interval", "10ms"}, is: rlqsload.ErrInvalidConfig},
		{name: "duration cap", args: []string{"-duration", "11m"}, is: rlqsload.ErrInvalidConfig},
		{name: "stray arg", args: []string{"extra"}},
		{name: "bad aux pid", args: []string{"-aux-pid", "redis"}},
		{name: "unknown flag", args: []string{"-concurrency", "4"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseFlags(tc.args, io.Discard)
			if err == nil || (tc.is != nil && !errors.Is(err, tc.is)) {
				t.Fatalf("err = %v, want %v", err, tc.is)
			}
		})
	}
	if _, err := parseFlags([]string{"-addr", "10.0.0.8:8081", "-allow-remote"}, io.Discard); err != nil {
		t.Fatalf("-allow-remote: %v", err)
	}
}
