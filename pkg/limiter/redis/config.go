package redis

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"
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

// ParseMode parses auto|standalone|cluster|sentinel ("" is auto).
func ParseMode(s string) (Mode, error) {
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
	// DefaultDialTimeout bounds establishing one connection (TCP, TLS, HELLO).
	DefaultDialTimeout = 2 * time.Second
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
	// DefaultMaxFlushDelay is the binary's --redis-max-flush-delay. rueidis
	// delays a write only while other calls wait on the connection, and only
	// until this long after its previous write, so a lone call is never held
	// back. Measured under load (docs/performance.md), one connection with
	// 500µs against four with 20µs: the server's write syscalls per
	// decision 1.1 → 0.45 (gRPC's included) and Redis's reads 0.20 → 0.11,
	// 5–6 % less server CPU and 3–8 % less Redis CPU per decision at 16 and
	// 64 concurrent calls, p50 unchanged within noise.
	DefaultMaxFlushDelay = 500 * time.Microsecond
	// MaxMaxFlushDelay bounds MaxFlushDelay: it adds up to that much to
	// every round trip.
	MaxMaxFlushDelay = time.Millisecond
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
	// (cluster) or the sentinels (sentinel). (Required)
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
}

// validated returns c with defaults filled, or an error naming the field.
func (c Config) validated() (Config, error) {
	if len(c.Addrs) == 0 {
		return c, errors.New("redis store: addrs: at least one host:port is required")
	}
	for _, a := range c.Addrs {
		if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
			return c, fmt.Errorf("redis store: addrs: %q is not host:port", a)
		}
	}
	m, err := ParseMode(string(c.Mode))
	if err != nil {
		return c, err
	}
	c.Mode = m
	if c.Mode == ModeAuto && c.SentinelMaster != "" {
		c.Mode = ModeSentinel
	}
	switch {
	case c.Mode == ModeSentinel && c.SentinelMaster == "":
		return c, errors.New("redis store: sentinel_master is required in sentinel mode")
	case c.Mode != ModeSentinel && c.SentinelMaster != "":
		return c, fmt.Errorf("redis store: sentinel_master is set but mode is %s", c.Mode)
	case c.Mode == ModeStandalone && len(c.Addrs) != 1:
		return c, fmt.Errorf("redis store: standalone mode takes exactly one address, got %d", len(c.Addrs))
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.Timeout < time.Millisecond || c.Timeout > MaxTimeout {
		return c, fmt.Errorf("redis store: timeout %v is outside [1ms, %v]", c.Timeout, MaxTimeout)
	}
	if c.DialTimeout < time.Millisecond || c.DialTimeout > MaxTimeout {
		return c, fmt.Errorf("redis store: dial timeout %v is outside [1ms, %v]", c.DialTimeout, MaxTimeout)
	}
	if c.MaxFlushDelay < 0 || c.MaxFlushDelay > MaxMaxFlushDelay {
		return c, fmt.Errorf("redis store: max flush delay %v is outside [0, %v]", c.MaxFlushDelay, MaxMaxFlushDelay)
	}
	if c.PoolSize == 0 {
		c.PoolSize = DefaultPoolSize
	}
	if c.PoolSize < 1 || c.PoolSize > MaxPoolSize {
		return c, fmt.Errorf("redis store: pool size %d is outside [1, %d]", c.PoolSize, MaxPoolSize)
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

// Flags holds the command-line values of the binary's --redis-* flags (and
// their ENVOY_RLS_REDIS_* environment variables), before files are read.
type Flags struct {
	Addr           string        // --redis-addr: comma-separated host:port seeds
	Mode           string        // --redis-mode: auto|standalone|cluster|sentinel
	SentinelMaster string        // --redis-sentinel-master
	Username       string        // --redis-username
	PasswordFile   string        // --redis-password-file: the password, one line
	TLS            bool          // --redis-tls
	TLSCA          string        // --redis-tls-ca: PEM CA bundle (default: system roots)
	TLSCert        string        // --redis-tls-cert: client certificate (mutual TLS)
	TLSKey         string        // --redis-tls-key: its private key
	Timeout        time.Duration // --redis-timeout
	PoolSize       int           // --redis-pool-size
	MaxFlushDelay  time.Duration // --redis-max-flush-delay
}

// Config reads the password and TLS files named by f and returns the Config
// they describe. TLS is on when f.TLS is set or any TLS file is given. The
// error names the flag at fault; it never contains the password.
func (f Flags) Config() (Config, error) {
	var c Config
	for _, a := range strings.Split(f.Addr, ",") {
		if a = strings.TrimSpace(a); a != "" {
			c.Addrs = append(c.Addrs, a)
		}
	}
	if len(c.Addrs) == 0 {
		return c, errors.New("--redis-addr: at least one host:port is required")
	}
	m, err := ParseMode(f.Mode)
	if err != nil {
		return c, fmt.Errorf("--redis-mode: %w", err)
	}
	c.Mode, c.SentinelMaster, c.Username = m, f.SentinelMaster, f.Username
	c.Timeout, c.PoolSize, c.MaxFlushDelay = f.Timeout, f.PoolSize, f.MaxFlushDelay
	if f.PasswordFile != "" {
		b, err := os.ReadFile(f.PasswordFile)
		if err != nil {
			return c, fmt.Errorf("--redis-password-file: %w", err)
		}
		c.Password = strings.TrimRight(string(b), "\r\n")
		if c.Password == "" {
			return c, fmt.Errorf("--redis-password-file: %s is empty", f.PasswordFile)
		}
	}
	if f.TLS || f.TLSCA != "" || f.TLSCert != "" || f.TLSKey != "" {
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if f.TLSCA != "" {
			pem, err := os.ReadFile(f.TLSCA)
			if err != nil {
				return c, fmt.Errorf("--redis-tls-ca: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return c, fmt.Errorf("--redis-tls-ca: no PEM certificate in %s", f.TLSCA)
			}
			tc.RootCAs = pool
		}
		if (f.TLSCert == "") != (f.TLSKey == "") {
			return c, errors.New("--redis-tls-cert and --redis-tls-key must be given together")
		}
		if f.TLSCert != "" {
			cert, err := tls.LoadX509KeyPair(f.TLSCert, f.TLSKey)
			if err != nil {
				return c, fmt.Errorf("--redis-tls-cert/--redis-tls-key: %w", err)
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		c.TLS = tc
	}
	if _, err := c.validated(); err != nil {
		return c, err
	}
	return c, nil
}
