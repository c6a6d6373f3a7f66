package rlqsload

import (
	"errors"
	"maps"
	"math"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/tools/internal/loadgen"
)

func validConfig() Config {
	return Config{Addr: "127.0.0.1:8081", Domain: "bench", Key: "tenant", Proxies: 20, Buckets: 500,
		Interval: time.Second, Rate: 1, Ramp: 15, Duration: 10 * time.Second, Tick: time.Second, Probes: 5}
}

func TestValidate(t *testing.T) {
	if cfg := validConfig(); cfg.Validate() != nil {
		t.Fatalf("valid config refused: %v", cfg.Validate())
	}
	tests := []struct {
		name string
		mod  func(*Config)
		is   error
	}{
		{"no addr", func(c *Config) { c.Addr = "" }, ErrInvalidConfig},
		{"remote", func(c *Config) { c.Addr = "10.0.0.8:8081" }, loadgen.ErrNotLoopback},
		{"no domain", func(c *Config) { c.Domain = "" }, ErrInvalidConfig},
		{"no key", func(c *Config) { c.Key = "" }, ErrInvalidConfig},
		{"no proxies", func(c *Config) { c.Proxies = 0 }, ErrInvalidConfig},
		{"too many proxies", func(c *Config) { c.Proxies = MaxProxies + 1 }, ErrInvalidConfig},
		{"no buckets", func(c *Config) { c.Buckets = 0 }, ErrInvalidConfig},
		{"more buckets than a report holds", func(c *Config) { c.Buckets = MaxBuckets + 1 }, ErrInvalidConfig},
		{"more buckets and probes than a report holds", func(c *Config) { c.Buckets, c.Probes = MaxBuckets, 1 }, ErrInvalidConfig},
		{"interval under Envoy's least", func(c *Config) { c.Interval = 99 * time.Millisecond }, ErrInvalidConfig},
		{"no rate", func(c *Config) { c.Rate = 0 }, ErrInvalidConfig},
		{"rate not a number", func(c *Config) { c.Rate = math.NaN() }, ErrInvalidConfig},
		{"no ramp", func(c *Config) { c.Ramp = 0 }, ErrInvalidConfig},
		{"negative warmup", func(c *Config) { c.Warmup = -time.Second }, ErrInvalidConfig},
		{"no duration", func(c *Config) { c.Duration = 0 }, ErrInvalidConfig},
		{"duration cap", func(c *Config) { c.Duration = MaxDuration + 1 }, ErrInvalidConfig},
		{"tick under the server's least", func(c *Config) { c.Tick = 50 * time.Millisecond }, ErrInvalidConfig},
		{"negative probes", func(c *Config) { c.Probes = -1 }, ErrInvalidConfig},
		{"negative server pid", func(c *Config) { c.ServerPID = -1 }, ErrInvalidConfig},
		{"bad aux pid", func(c *Config) { c.AuxPIDs = map[string]int{"redis": 0} }, ErrInvalidConfig},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := validConfig()
			tc.mod(&cfg)
			if err := cfg.Validate(); !errors.Is(err, tc.is) {
				t.Fatalf("err = %v, want %v", err, tc.is)
			}
		})
	}
	cfg := validConfig()
	cfg.Addr, cfg.AllowRemote = "10.0.0.8:8081", true
	if err := cfg.Validate(); err != nil {
		t.Fatalf("AllowRemote: %v", err)
	}
}

func TestBucketIDs(t *testing.T) {
	shared := validConfig()
	disjoint := validConfig()
	disjoint.Disjoint = true
	for _, tc := range []struct {
		got, want map[string]string
	}{
		{shared.BucketID(3, 7), map[string]string{"tenant": "t7"}},
		{shared.BucketID(4, 7), map[string]string{"tenant": "t7"}},
		{disjoint.BucketID(3, 7), map[string]string{"tenant": "t3-7"}},
		{shared.ProbeID(3, 1), map[string]string{"tenant": "probe-1"}},
		{disjoint.ProbeID(3, 1), map[string]string{"tenant": "probe-1-3"}},
	} {
		if !maps.Equal(tc.got, tc.want) {
			t.Errorf("got %v, want %v", tc.got, tc.want)
		}
	}
}

func TestQuantileMs(t *testing.T) {
	if quantileMs(nil, 0.5) != nil {
		t.Fatal("a quantile of nothing")
	}
	ds := []time.Duration{40 * time.Millisecond, 10 * time.Millisecond, 30 * time.Millisecond, 20 * time.Millisecond}
	for _, tc := range []struct {
		q    float64
		want float64
	}{{0.5, 20}, {1, 40}, {0.75, 30}, {0, 10}} {
		if got := quantileMs(ds, tc.q); got == nil || *got != tc.want {
			t.Errorf("q%v = %v, want %v", tc.q, got, tc.want)
		}
	}
}
