package loadgen

import (
	"errors"
	"testing"
	"time"
)

func validConfig(addr string) Config {
	return Config{
		Addr:        addr,
		Concurrency: 4,
		Connections: 2,
		Duration:    time.Second,
		Domain:      "bench",
		Descriptors: []DescriptorSpec{{{Key: "remote_address"}}},
		Subjects:    100,
		Dist:        DistUniform,
		Timeout:     time.Second,
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantErr bool
	}{
		{name: "valid", mutate: func(*Config) {}},
		{name: "no addr", mutate: func(c *Config) { c.Addr = "" }, wantErr: true},
		{name: "zero concurrency", mutate: func(c *Config) { c.Concurrency = 0 }, wantErr: true},
		{name: "too much concurrency", mutate: func(c *Config) { c.Concurrency = MaxConcurrency + 1 }, wantErr: true},
		{name: "zero connections", mutate: func(c *Config) { c.Connections = 0 }, wantErr: true},
		{name: "too many connections", mutate: func(c *Config) { c.Connections = MaxConnections + 1 }, wantErr: true},
		{name: "zero duration", mutate: func(c *Config) { c.Duration = 0 }, wantErr: true},
		{name: "duration over cap", mutate: func(c *Config) { c.Duration = MaxDuration + time.Second }, wantErr: true},
		{name: "duration at cap", mutate: func(c *Config) { c.Duration = MaxDuration }},
		{name: "negative warmup", mutate: func(c *Config) { c.Warmup = -1 }, wantErr: true},
		{name: "warmup over cap", mutate: func(c *Config) { c.Warmup = MaxWarmup + 1 }, wantErr: true},
		{name: "zero timeout", mutate: func(c *Config) { c.Timeout = 0 }, wantErr: true},
		{name: "no domain", mutate: func(c *Config) { c.Domain = "" }, wantErr: true},
		{name: "no descriptors", mutate: func(c *Config) { c.Descriptors = nil }, wantErr: true},
		{name: "zero subjects", mutate: func(c *Config) { c.Subjects = 0 }, wantErr: true},
		{name: "bad dist", mutate: func(c *Config) { c.Dist = "pareto" }, wantErr: true},
		{name: "negative pid", mutate: func(c *Config) { c.ServerPID = -1 }, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig("127.0.0.1:8081")
			tc.mutate(&c)
			err := c.Validate()
			if tc.wantErr != (err != nil) {
				t.Fatalf("Validate() = %v, wantErr %v", err, tc.wantErr)
			}
			if err != nil && !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("error %v does not wrap ErrInvalidConfig", err)
			}
		})
	}
}
