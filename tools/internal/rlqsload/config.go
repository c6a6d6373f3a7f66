// Package rlqsload is the RLQS side of the load tools: a fleet of
// simulated Envoy proxies (internal/rlqstest) reporting bucket usage to an
// RLQS server (envoy.service.rate_limit_quota.v3), and what that costs the
// server and its store per bucket report, with the time a new assignment
// takes to reach every proxy. tools/cmd/rlqs-load prints its Result;
// tools/scripts/bench.sh --mode rlqs starts the server and Redis for it.
package rlqsload

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/envoy-rls/envoy-rls/tools/internal/loadgen"
)

// Defaults of Config.
const (
	DefaultDomain   = "bench"
	DefaultKey      = "tenant"
	DefaultProxies  = 20
	DefaultBuckets  = 500
	DefaultInterval = time.Second
	DefaultRate     = 1.0
	// DefaultRamp keeps a proxy's new-bucket reports (one message each, as
	// Envoy sends them) and its periodic ones under the server's bound of
	// 20 messages a second per stream (burst 40).
	DefaultRamp     = 15.0
	DefaultWarmup   = 2 * time.Second
	DefaultDuration = 10 * time.Second
	DefaultTick     = time.Second
	DefaultProbes   = 5
)

// Hard caps: the tool is bounded in time, memory and connections whatever
// the flags say.
const (
	MaxProxies = 200 // one connection and one stream each
	// MaxBuckets bounds Buckets plus Probes: the server's default bound on
	// the usages of one report, since a proxy reports every bucket it
	// holds in one message.
	MaxBuckets  = 1000
	MaxRate     = 1000.0
	MinInterval = 100 * time.Millisecond
	MaxInterval = time.Minute
	MaxDuration = 10 * time.Minute
	MaxWarmup   = time.Minute
	MaxProbes   = 100
	MinTick     = 100 * time.Millisecond
	MaxTick     = 10 * time.Second
)

// ErrInvalidConfig is wrapped by every validation error of Config.
var ErrInvalidConfig = errors.New("rlqsload: invalid config")

// Config describes one fleet run. Validate it (Run does) before use.
type Config struct {
	Addr        string // (Required) host:port of the RLQS server
	AllowRemote bool   // (Optional) permit a non-loopback Addr
	Domain      string // (Required) the reports' domain
	// Key is the bucket ID's one entry, {Key: "t<k>"}; the rule set must
	// limit it. (Required)
	Key     string
	Proxies int // (Required) simulated proxies, one stream each
	Buckets int // (Required) buckets each proxy reports
	// Disjoint gives each proxy buckets of its own ("t<p>-<k>"); by default
	// every proxy reports the same Buckets bucket IDs, so the server
	// divides each bucket's limit among every proxy.
	Disjoint bool
	Interval time.Duration // (Required) the proxies' reporting interval
	Rate     float64       // (Required) requests per second per bucket at each proxy
	// Ramp is how many new buckets a proxy makes a second, at most; each
	// new bucket is reported at once in a message of its own. (Required)
	Ramp float64
	// Warmup is the unmeasured phase after every bucket holds an
	// assignment. (Optional)
	Warmup   time.Duration
	Duration time.Duration // (Required) measured phase
	// Tick is the server's --rlqs-tick: assignments are revised at its
	// whole multiples since the Unix epoch. (Required)
	Tick time.Duration
	// Probes is how many times, after the measured phase, every proxy
	// requests a bucket it never used and the tool times its first
	// assignment. (Optional)
	Probes    int
	ServerPID int            // (Optional) the server's PID: its CPU per report
	AuxPIDs   map[string]int // (Optional) other processes' (e.g. "redis")
	Label     string         // (Optional) copied into the result
}

// Validate checks every field against its bounds.
func (c *Config) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, a...))
	}
	switch {
	case c.Addr == "":
		return bad("addr is required")
	case c.Domain == "" || c.Key == "":
		return bad("domain and key are required")
	case c.Proxies < 1 || c.Proxies > MaxProxies:
		return bad("proxies %d not in [1, %d]", c.Proxies, MaxProxies)
	case c.Buckets < 1 || c.Buckets+max(c.Probes, 0) > MaxBuckets:
		return bad("buckets %d not in [1, %d - probes %d]", c.Buckets, MaxBuckets, c.Probes)
	case c.Interval < MinInterval || c.Interval > MaxInterval:
		return bad("interval %v not in [%v, %v]", c.Interval, MinInterval, MaxInterval)
	case !(c.Rate > 0 && c.Rate <= MaxRate):
		return bad("rate %v not in (0, %v]", c.Rate, MaxRate)
	case !(c.Ramp > 0 && c.Ramp <= MaxRate):
		return bad("ramp %v not in (0, %v]", c.Ramp, MaxRate)
	case c.Warmup < 0 || c.Warmup > MaxWarmup:
		return bad("warmup %v not in [0, %v]", c.Warmup, MaxWarmup)
	case c.Duration <= 0 || c.Duration > MaxDuration:
		return bad("duration %v not in (0, %v]", c.Duration, MaxDuration)
	case c.Tick < MinTick || c.Tick > MaxTick:
		return bad("tick %v not in [%v, %v]", c.Tick, MinTick, MaxTick)
	case c.Probes < 0 || c.Probes > MaxProbes:
		return bad("probes %d not in [0, %d]", c.Probes, MaxProbes)
	case c.ServerPID < 0:
		return bad("server pid %d is negative", c.ServerPID)
	}
	for name, pid := range c.AuxPIDs {
		if name == "" || pid <= 0 {
			return bad("aux pid %q=%d: want a name and a positive pid", name, pid)
		}
	}
	if !c.AllowRemote {
		if err := loadgen.CheckLoopback(c.Addr); err != nil {
			return err
		}
	}
	return nil
}

// BucketID is the id of bucket k of proxy p: {Key: "t<k>"}, or with
// Disjoint {Key: "t<p>-<k>"}.
func (c *Config) BucketID(p, k int) map[string]string {
	v := "t" + strconv.Itoa(k)
	if c.Disjoint {
		v = "t" + strconv.Itoa(p) + "-" + strconv.Itoa(k)
	}
	return map[string]string{c.Key: v}
}

// ProbeID is the id of probe j at proxy p, a bucket no proxy used before:
// {Key: "probe-<j>"}, or with Disjoint {Key: "probe-<j>-<p>"}.
func (c *Config) ProbeID(p, j int) map[string]string {
	v := "probe-" + strconv.Itoa(j)
	if c.Disjoint {
		v += "-" + strconv.Itoa(p)
	}
	return map[string]string{c.Key: v}
}
