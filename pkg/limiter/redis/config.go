package redis

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// Mode says how the Addrs are to be understood.
type Mode string

const (
	// ModeAuto asks the first reachable address: a Cluster node makes a
	// Cluster client, anything else a standalone client (a single address
	// only). With SentinelMaster set, auto means sentinel.
	ModeAuto Mode = "auto"
	// ModeStandalone: one Redis server (or a proxy that behaves like one).
	ModeStandalone Mode = "standalone"
	// ModeCluster: Addrs are seeds of a Redis Cluster.
	ModeCluster Mode = "cluster"
	// ModeSentinel: Addrs are sentinels monitoring SentinelMaster.
	ModeSentinel Mode = "sentinel"
)

// parseMode parses auto|standalone|cluster|sentinel ("" is auto).
func parseMode(s string) (Mode, error) {
	switch Mode(s) {
	case "", ModeAuto:
		return ModeAuto, nil
	case ModeStandalone, ModeCluster, ModeSentinel:
		return Mode(s), nil
	}
	return "", fmt.Errorf("redis store: mode %q is not one of auto, standalone, cluster, sentinel", s)
}

// Defaults for Config fields left zero.
const (
	// DefaultTimeout bounds one Evaluate call when the caller's deadline is
	// later (or absent).
	DefaultTimeout = 500 * time.Millisecond
	// defaultDialTimeout bounds establishing one connection (TCP, TLS, HELLO).
	defaultDialTimeout = 2 * time.Second
	// DefaultPoolSize is the number of pipelined connections per Redis node.
	// One: every concurrent call of a replica shares it, so commands that
	// arrive together leave in one write (see DefaultMaxFlushDelay). Redis
	// runs commands one at a time anyway.
	DefaultPoolSize = 1
	// MaxPoolSize is the largest PoolSize (rueidis multiplexes at most 2^8
	// connections per node).
	MaxPoolSize = 256
	// MaxTimeout bounds Timeout and DialTimeout.
	MaxTimeout = time.Minute
	// DefaultMaxFlushDelay is the MaxFlushDelay the envoy-rls binary uses
	// unless told otherwise: none. Group commit already gathers concurrent
	// calls into one command; a delay would only hold back the second run
	// of a slot in flight (rueidis delays a write while another command
	// waits on the connection, up to this long after its previous write),
	// which costs throughput at low concurrency (docs/performance.md,
	// "Redis pool size and flush delay").
	DefaultMaxFlushDelay = 0
	// flushDelayLimit bounds MaxFlushDelay: it adds up to that much to
	// every round trip.
	flushDelayLimit = time.Millisecond
	// connBuffer is the read and write buffer of each connection. rueidis
	// defaults to 0.5 MiB each; a batch program call is a few hundred
	// bytes, so 64 KiB holds hundreds of pipelined calls and keeps the
	// resident size small.
	connBuffer = 64 << 10
	// DefaultRetryAfter is the retry hint of Unavailable and Indeterminate
	// outcomes.
	DefaultRetryAfter = time.Second
	// sentinelRefresh is how often a sentinel client reconciles its master
	// with the sentinels, besides reacting to +switch-master events.
	sentinelRefresh = 2 * time.Second
)

// Config configures a Store. The zero value is not usable: Addrs is required.
type Config struct {
	// Addrs are host:port seeds: the server (standalone), any cluster nodes
	// (cluster) or the sentinels (sentinel). An absolute path is the Unix
	// socket of a standalone server (the only address, mode standalone or
	// auto). (Required)
	Addrs []string
	// Mode: auto, standalone, cluster or sentinel. (Optional, default auto)
	Mode Mode
	// SentinelMaster is the master set name the sentinels monitor.
	// (Required for ModeSentinel)
	SentinelMaster string
	// Username and Password authenticate to Redis (ACL user; Password alone
	// is the legacy requirepass). (Optional)
	Username string
	Password string
	// SentinelUsername and SentinelPassword authenticate to the sentinels,
	// which usually have credentials of their own. (Optional)
	SentinelUsername string
	SentinelPassword string
	// TLS, when not nil, is used for every connection, to Redis and to the
	// sentinels. (Optional)
	TLS *tls.Config
	// Timeout bounds one Evaluate call: the earlier of the caller's deadline
	// and now+Timeout ends it. Connections that do not answer within 4x
	// Timeout (at least 1s) are closed. (Optional, default DefaultTimeout)
	Timeout time.Duration
	// DialTimeout bounds establishing a connection. (Optional, default
	// DefaultDialTimeout)
	DialTimeout time.Duration
	// PoolSize is the number of auto-pipelined connections per Redis node,
	// rounded down to a power of two, 1..MaxPoolSize. (Optional, default
	// DefaultPoolSize)
	PoolSize int
	// MaxFlushDelay is how long a connection's writer may wait for more
	// commands before it flushes them in one write (rueidis
	// ClientOption.MaxFlushDelay); 0 flushes as soon as the writer is free.
	// (Optional, default 0; negative is refused; the binary uses
	// DefaultMaxFlushDelay)
	MaxFlushDelay time.Duration
	// GroupMaxKeys bounds the keys (the limits of all its calls) of one
	// group run of concurrent calls (commit.go); a call with more runs
	// alone; 1 sends every call alone. (Optional, default
	// DefaultGroupMaxKeys, at most MaxGroupMaxKeys)
	GroupMaxKeys int
	// GroupInFlight is how many group runs of one slot may be in progress
	// at once. (Optional, default DefaultGroupInFlight, at most
	// MaxGroupInFlight)
	GroupInFlight int
	// Metrics, when not nil, records each group run's size and each call's
	// wait (NewMetrics). (Optional)
	Metrics *Metrics
	// TracerProvider, when not nil, makes a span per program run (a child
	// of the span in the caller's context) that records the group size,
	// the policy IDs and the outcome, never a key or an argument.
	// (Optional, default nil: no spans, no tracing work)
	TracerProvider trace.TracerProvider
	// OnFallback, when set, is called once when Redis refuses FCALL or
	// FUNCTION LOAD (an ACL without them, a proxy or a service without
	// Redis functions) and the store runs rate-batch-v2.lua by EVALSHA from
	// then on (function.go), with the refusal's kind: no Redis error text,
	// which may quote the command's arguments.
	OnFallback func(reason string)
}

// FieldError is a Config value that Validate refuses. Field is the Config
// field (Addrs, Mode, SentinelMaster, Timeout, DialTimeout, PoolSize,
// MaxFlushDelay, GroupMaxKeys, GroupInFlight), Value the refused value as text ("" when it is missing)
// and Want what the field accepts, worded to follow "must be".
type FieldError struct {
	Field string
	Value string
	Want  string
}

func (e *FieldError) Error() string {
	name := fieldNames[e.Field]
	if name == "" {
		name = e.Field
	}
	return fmt.Sprintf("redis store: %s %q: must be %s", name, e.Value, e.Want)
}

// fieldNames are the Config fields as error messages spell them. Read only.
var fieldNames = map[string]string{
	"Addrs": "addrs", "Mode": "mode", "SentinelMaster": "sentinel_master",
	"Timeout": "timeout", "DialTimeout": "dial timeout", "PoolSize": "pool size",
	"MaxFlushDelay": "max flush delay", "GroupMaxKeys": "group max keys", "GroupInFlight": "group in flight",
}

// What each value accepts, as FieldError.Want says it.
var (
	wantTimeout    = fmt.Sprintf("a duration between 1ms and %v", MaxTimeout)
	wantPoolSize   = fmt.Sprintf("an integer between 1 and %d", MaxPoolSize)
	wantFlushDelay = fmt.Sprintf("a duration between 0 and %v", flushDelayLimit)
	wantMode       = "auto, standalone, cluster or sentinel"
	wantGroupKeys  = fmt.Sprintf("an integer between 1 and %d", MaxGroupMaxKeys)
	wantInFlight   = fmt.Sprintf("an integer between 1 and %d", MaxGroupInFlight)
)

// Validate returns c with its defaults filled and its mode resolved (auto
// with SentinelMaster set is sentinel), or a *FieldError naming the first
// field at fault. New and Connect call it; a caller may call it first to
// refuse a configuration before it starts anything.
func (c Config) Validate() (Config, error) {
	if len(c.Addrs) == 0 {
		return c, &FieldError{Field: "Addrs", Want: "at least one host:port"}
	}
	for _, a := range c.Addrs {
		if isUnixSocket(a) {
			if len(c.Addrs) != 1 || (c.Mode != ModeAuto && c.Mode != ModeStandalone && c.Mode != "") {
				return c, &FieldError{Field: "Addrs", Value: strings.Join(c.Addrs, ","), Want: "a Unix socket path only as the one address of a standalone server"}
			}
			continue
		}
		if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
			return c, &FieldError{Field: "Addrs", Value: a, Want: "host:port (several separated by commas) or the absolute path of a Unix socket"}
		}
	}
	c, err := c.ValidateValues()
	if err != nil {
		return c, err
	}
	if c.Mode == ModeAuto && isUnixSocket(c.Addrs[0]) {
		c.Mode = ModeStandalone
	}
	if c.Mode == ModeAuto && c.SentinelMaster != "" {
		c.Mode = ModeSentinel
	}
	switch {
	case c.Mode == ModeSentinel && c.SentinelMaster == "":
		return c, &FieldError{Field: "SentinelMaster", Want: "the master set name in sentinel mode"}
	case c.Mode != ModeSentinel && c.SentinelMaster != "":
		return c, &FieldError{Field: "SentinelMaster", Value: c.SentinelMaster, Want: fmt.Sprintf("empty unless the mode is sentinel or auto (it is %s)", c.Mode)}
	case c.Mode == ModeStandalone && len(c.Addrs) != 1:
		return c, &FieldError{Field: "Addrs", Value: strings.Join(c.Addrs, ","), Want: fmt.Sprintf("exactly one address in standalone mode (got %d)", len(c.Addrs))}
	}
	return c, nil
}

// ValidateValues is the part of Validate that needs no address: it checks
// Mode, Timeout, DialTimeout, MaxFlushDelay, PoolSize, GroupMaxKeys and
// GroupInFlight, each on its own,
// and fills their defaults. It returns a *FieldError like Validate.
func (c Config) ValidateValues() (Config, error) {
	m, err := parseMode(string(c.Mode))
	if err != nil {
		return c, &FieldError{Field: "Mode", Value: string(c.Mode), Want: wantMode}
	}
	c.Mode = m
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = defaultDialTimeout
	}
	if c.Timeout < time.Millisecond || c.Timeout > MaxTimeout {
		return c, &FieldError{Field: "Timeout", Value: c.Timeout.String(), Want: wantTimeout}
	}
	if c.DialTimeout < time.Millisecond || c.DialTimeout > MaxTimeout {
		return c, &FieldError{Field: "DialTimeout", Value: c.DialTimeout.String(), Want: wantTimeout}
	}
	if c.MaxFlushDelay < 0 || c.MaxFlushDelay > flushDelayLimit {
		return c, &FieldError{Field: "MaxFlushDelay", Value: c.MaxFlushDelay.String(), Want: wantFlushDelay}
	}
	if c.PoolSize == 0 {
		c.PoolSize = DefaultPoolSize
	}
	if c.PoolSize < 1 || c.PoolSize > MaxPoolSize {
		return c, &FieldError{Field: "PoolSize", Value: fmt.Sprint(c.PoolSize), Want: wantPoolSize}
	}
	if c.GroupMaxKeys == 0 {
		c.GroupMaxKeys = DefaultGroupMaxKeys
	}
	if c.GroupMaxKeys < 1 || c.GroupMaxKeys > MaxGroupMaxKeys {
		return c, &FieldError{Field: "GroupMaxKeys", Value: fmt.Sprint(c.GroupMaxKeys), Want: wantGroupKeys}
	}
	if c.GroupInFlight == 0 {
		c.GroupInFlight = DefaultGroupInFlight
	}
	if c.GroupInFlight < 1 || c.GroupInFlight > MaxGroupInFlight {
		return c, &FieldError{Field: "GroupInFlight", Value: fmt.Sprint(c.GroupInFlight), Want: wantInFlight}
	}
	return c, nil
}

// multiplex is log2 of the pool size, rounded down.
func (c Config) multiplex() int {
	n := 0
	for 1<<(n+1) <= c.PoolSize {
		n++
	}
	return n
}

// isUnixSocket reports whether addr names a Unix socket: an absolute path.
func isUnixSocket(addr string) bool { return strings.HasPrefix(addr, "/") }

// dial connects to dst over TCP, or to the Unix socket dst names, with TLS
// when tc is not nil.
func dial(ctx context.Context, dst string, d *net.Dialer, tc *tls.Config) (net.Conn, error) {
	network := "tcp"
	if isUnixSocket(dst) {
		network = "unix"
	}
	if tc != nil {
		return (&tls.Dialer{NetDialer: d, Config: tc}).DialContext(ctx, network, dst)
	}
	return d.DialContext(ctx, network, dst)
}
