package loadgen

import (
	"errors"
	"fmt"
	"time"
)

// Defaults for the load tool's flags.
const (
	DefaultAddr        = "127.0.0.1:8081"
	DefaultConcurrency = 64
	DefaultConnections = 4
	DefaultDuration    = 10 * time.Second
	DefaultWarmup      = time.Second
	DefaultDomain      = "bench"
	DefaultDescriptors = "remote_address"
	DefaultSubjects    = 10000
	DefaultTimeout     = time.Second
)

// Hard caps: the tool is bounded in time, memory and connections whatever
// the flags say.
const (
	MaxDuration    = 10 * time.Minute
	MaxWarmup      = time.Minute
	MaxTimeout     = time.Minute
	MaxConcurrency = 1024 // each worker holds a ≈ 43 KiB histogram
	MaxConnections = 64
	MaxSubjects    = 10_000_000
	// ConnectTimeout bounds how long Run waits for every connection to be
	// ready before it gives up on an unreachable server.
	ConnectTimeout = 5 * time.Second
)

// ErrInvalidConfig is wrapped by every validation error of Config.
var ErrInvalidConfig = errors.New("loadgen: invalid config")

// Config describes one load run. Validate it (Run does) before use.
type Config struct {
	Addr        string        // (Required) host:port of an RLS v3 server
	AllowRemote bool          // (Optional) permit a non-loopback Addr
	Concurrency int           // (Required) closed-loop workers, one call in flight each
	Connections int           // (Required) gRPC client connections, used round-robin by worker
	Duration    time.Duration // (Required) measured phase, ≤ MaxDuration
	Warmup      time.Duration // (Optional) unmeasured phase before it, ≤ MaxWarmup
	MaxRequests uint64        // (Optional) stop the measured phase after this many calls; 0 = no bound
	Domain      string        // (Required) RateLimitRequest.domain
	Descriptors []DescriptorSpec
	Subjects    int    // (Required) number of distinct synthetic subjects
	Dist        Dist   // (Required) uniform or zipf
	Seed        uint64 // (Optional) seed of the subject draws
	Hits        uint32 // (Optional) hits_addend; 0 leaves it unset
	Timeout     time.Duration
	ServerPID   int // (Optional) read this process's CPU before and after the measured phase
	// AuxPIDs (Optional) names other processes whose CPU per decision is
	// reported the same way, e.g. {"redis": 1234}.
	AuxPIDs map[string]int
	Label   string // (Optional) copied into the result
}

// Validate checks every field against its bounds.
func (c *Config) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, a...))
	}
	switch {
	case c.Addr == "":
		return bad("addr is required")
	case c.Concurrency < 1 || c.Concurrency > MaxConcurrency:
		return bad("concurrency %d not in [1, %d]", c.Concurrency, MaxConcurrency)
	case c.Connections < 1 || c.Connections > MaxConnections:
		return bad("connections %d not in [1, %d]", c.Connections, MaxConnections)
	case c.Duration <= 0 || c.Duration > MaxDuration:
		return bad("duration %v not in (0, %v]", c.Duration, MaxDuration)
	case c.Warmup < 0 || c.Warmup > MaxWarmup:
		return bad("warmup %v not in [0, %v]", c.Warmup, MaxWarmup)
	case c.Timeout <= 0 || c.Timeout > MaxTimeout:
		return bad("timeout %v not in (0, %v]", c.Timeout, MaxTimeout)
	case c.Domain == "":
		return bad("domain is required")
	case len(c.Descriptors) == 0:
		return bad("at least one descriptor is required")
	case c.Subjects < 1 || c.Subjects > MaxSubjects:
		return bad("subjects %d not in [1, %d]", c.Subjects, MaxSubjects)
	case c.ServerPID < 0:
		return bad("server pid %d is negative", c.ServerPID)
	}
	for name, pid := range c.AuxPIDs {
		if name == "" || pid <= 0 {
			return bad("aux pid %q=%d: want a name and a positive pid", name, pid)
		}
	}
	if _, err := ParseDist(string(c.Dist)); err != nil {
		return bad("%v", err)
	}
	if !c.AllowRemote {
		if err := CheckLoopback(c.Addr); err != nil {
			return err
		}
	}
	return nil
}
