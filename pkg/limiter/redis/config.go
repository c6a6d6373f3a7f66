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

// FieldError is a Config (or Flags) value that is refused. Field is the
// Config field (Addrs, Mode, SentinelMaster, Timeout, DialTimeout,
// PoolSize, MaxFlushDelay); Flag, set by the Flags methods, is the binary's
// flag for it without dashes (redis-timeout); Value is the refused value as
// text and Want says what is accepted.
type FieldError struct {
	Field string
	Flag  string
	Value string
	Want  string
}

func (e *FieldError) Error() string {
	if e.Flag != "" {
		return fmt.Sprintf("--%s %q: must be %s", e.Flag, e.Value, e.Want)
	}
	return fmt.Sprintf("redis store: %s %q: must be %s", fieldNames[e.Field], e.Value, e.Want)
}

// fieldNames are the Config fields as error messages spell them.
var fieldNames = map[string]string{
	"Addrs": "addrs", "Mode": "mode", "SentinelMaster": "sentinel_master",
	"Timeout": "timeout", "DialTimeout": "dial timeout", "PoolSize": "pool size",
	"MaxFlushDelay": "max flush delay",
}

// flagNames are the binary's flags of the Config fields.
var flagNames = map[string]string{
	"Addrs": "redis-addr", "Mode": "redis-mode", "SentinelMaster": "redis-sentinel-master",
	"Timeout": "redis-timeout", "PoolSize": "redis-pool-size", "MaxFlushDelay": "redis-max-flush-delay",
}

// What each value accepts, as FieldError.Want says it.
var (
	wantTimeout    = fmt.Sprintf("a duration between 1ms and %v", MaxTimeout)
	wantPoolSize   = fmt.Sprintf("an integer between 1 and %d", MaxPoolSize)
	wantFlushDelay = fmt.Sprintf("a duration between 0 and %v", MaxMaxFlushDelay)
	wantMode       = "auto, standalone, cluster or sentinel"
)

// validated returns c with defaults filled, or a *FieldError naming the
// field.
func (c Config) validated() (Config, error) {
	if len(c.Addrs) == 0 {
		return c, &FieldError{Field: "Addrs", Want: "at least one host:port"}
	}
	for _, a := range c.Addrs {
		if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
			return c, &FieldError{Field: "Addrs", Value: a, Want: "host:port (several separated by commas)"}
		}
	}
	c, err := c.validValues()
	if err != nil {
		return c, err
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

// validValues checks the values that do not depend on each other or on the
// addresses, and fills their defaults.
func (c Config) validValues() (Config, error) {
	m, err := ParseMode(string(c.Mode))
	if err != nil {
		return c, &FieldError{Field: "Mode", Value: string(c.Mode), Want: wantMode}
	}
	c.Mode = m
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.Timeout < time.Millisecond || c.Timeout > MaxTimeout {
		return c, &FieldError{Field: "Timeout", Value: c.Timeout.String(), Want: wantTimeout}
	}
	if c.DialTimeout < time.Millisecond || c.DialTimeout > MaxTimeout {
		return c, &FieldError{Field: "DialTimeout", Value: c.DialTimeout.String(), Want: wantTimeout}
	}
	if c.MaxFlushDelay < 0 || c.MaxFlushDelay > MaxMaxFlushDelay {
		return c, &FieldError{Field: "MaxFlushDelay", Value: c.MaxFlushDelay.String(), Want: wantFlushDelay}
	}
	if c.PoolSize == 0 {
		c.PoolSize = DefaultPoolSize
	}
	if c.PoolSize < 1 || c.PoolSize > MaxPoolSize {
		return c, &FieldError{Field: "PoolSize", Value: fmt.Sprint(c.PoolSize), Want: wantPoolSize}
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

// Check returns what Config would refuse without reading any file: a
// *FieldError naming the flag (Flag set) for a malformed, out-of-range or
// inconsistent value. The binary runs it before it starts.
func (f Flags) Check() error {
	_, err := f.plain()
	return err
}

// CheckValues is Check for a binary that does not use Redis: it refuses
// malformed or out-of-range values but requires no address.
func (f Flags) CheckValues() error {
	_, err := f.values().validValues()
	return withFlag(err)
}

// withFlag sets the flag of a *FieldError. Its Value is already the flag's:
// the Config takes the flag values as they are, and a zero that becomes a
// default is never refused.
func withFlag(err error) error {
	var fe *FieldError
	if errors.As(err, &fe) {
		fe.Flag = flagNames[fe.Field]
	}
	return err
}

// values is the Config of the flag values alone, not validated: no file
// read, defaults not filled.
func (f Flags) values() Config {
	var c Config
	for _, a := range strings.Split(f.Addr, ",") {
		if a = strings.TrimSpace(a); a != "" {
			c.Addrs = append(c.Addrs, a)
		}
	}
	c.Mode, c.SentinelMaster, c.Username = Mode(f.Mode), f.SentinelMaster, f.Username
	c.Timeout, c.PoolSize, c.MaxFlushDelay = f.Timeout, f.PoolSize, f.MaxFlushDelay
	return c
}

// plain is the Config f describes before any file is read, validated.
func (f Flags) plain() (Config, error) {
	c := f.values()
	switch {
	case f.TLSCert != "" && f.TLSKey == "":
		return c, &FieldError{Flag: "redis-tls-key", Want: "given together with --redis-tls-cert (mutual TLS needs both)"}
	case f.TLSKey != "" && f.TLSCert == "":
		return c, &FieldError{Flag: "redis-tls-cert", Want: "given together with --redis-tls-key (mutual TLS needs both)"}
	}
	v, err := c.validated()
	if err != nil {
		return c, withFlag(err)
	}
	return v, nil
}

// Config reads the password and TLS files named by f and returns the Config
// they describe. TLS is on when f.TLS is set or any TLS file is given. The
// error names the flag at fault; it never contains the password.
func (f Flags) Config() (Config, error) {
	c, err := f.plain()
	if err != nil {
		return c, err
	}
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
		if f.TLSCert != "" {
			cert, err := tls.LoadX509KeyPair(f.TLSCert, f.TLSKey)
			if err != nil {
				return c, fmt.Errorf("--redis-tls-cert/--redis-tls-key: %w", err)
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		c.TLS = tc
	}
	return c, nil
}
