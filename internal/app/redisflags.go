package app

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter/redis"
)

// redisFlags holds the values of the --redis-* flags (and their
// ENVOY_RLS_REDIS_* variables), before any file is read.
type redisFlags struct {
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

// redisFlagOf is the flag, without dashes, that sets each redis.Config
// field a redis.FieldError can name. Read only.
var redisFlagOf = map[string]string{
	"Addrs": "redis-addr", "Mode": "redis-mode", "SentinelMaster": "redis-sentinel-master",
	"Timeout": "redis-timeout", "PoolSize": "redis-pool-size", "MaxFlushDelay": "redis-max-flush-delay",
}

// flagError is a --redis-* value the binary refuses: Flag is the flag
// without dashes, Value the refused value as text and Want what the flag
// accepts, worded to follow "must be".
type flagError struct {
	Flag  string
	Value string
	Want  string
}

func (e *flagError) Error() string {
	return fmt.Sprintf("--%s %q: must be %s", e.Flag, e.Value, e.Want)
}

// asFlagError names the flag of a *redis.FieldError. Its Value is already
// the flag's: the Config takes the flag values as they are, and a zero
// that becomes a default is never refused. Any other error is returned as
// it is.
func asFlagError(err error) error {
	var fe *redis.FieldError
	if errors.As(err, &fe) {
		if name, ok := redisFlagOf[fe.Field]; ok {
			return &flagError{Flag: name, Value: fe.Value, Want: fe.Want}
		}
	}
	return err
}

// redisWant is what the redis package accepts in the one field c sets out
// of range: the Want of its refusal, so that the binary's message for a
// --redis-* value that does not parse, or is zero (a default to the
// package, a mistake on the command line), says what the package says for
// any other value it refuses.
func redisWant(c redis.Config) string {
	var fe *redis.FieldError
	if _, err := c.ValidateValues(); errors.As(err, &fe) {
		return fe.Want
	}
	return ""
}

// check returns what config would refuse without reading any file: a
// *flagError for a malformed, out-of-range or inconsistent value. The
// binary runs it before it starts.
func (f redisFlags) check() error {
	_, err := f.plain()
	return err
}

// checkValues is check for a binary that does not use Redis: it refuses
// malformed or out-of-range values but requires no address.
func (f redisFlags) checkValues() error {
	_, err := f.values().ValidateValues()
	return asFlagError(err)
}

// values is the Config of the flag values alone, not validated: no file
// read, defaults not filled.
func (f redisFlags) values() redis.Config {
	var c redis.Config
	for _, a := range strings.Split(f.Addr, ",") {
		if a = strings.TrimSpace(a); a != "" {
			c.Addrs = append(c.Addrs, a)
		}
	}
	c.Mode, c.SentinelMaster, c.Username = redis.Mode(f.Mode), f.SentinelMaster, f.Username
	c.Timeout, c.PoolSize, c.MaxFlushDelay = f.Timeout, f.PoolSize, f.MaxFlushDelay
	return c
}

// plain is the Config f describes before any file is read, validated.
func (f redisFlags) plain() (redis.Config, error) {
	c := f.values()
	switch {
	case f.TLSCert != "" && f.TLSKey == "":
		return c, &flagError{Flag: "redis-tls-key", Want: "given together with --redis-tls-cert (mutual TLS needs both)"}
	case f.TLSKey != "" && f.TLSCert == "":
		return c, &flagError{Flag: "redis-tls-cert", Want: "given together with --redis-tls-key (mutual TLS needs both)"}
	}
	v, err := c.Validate()
	if err != nil {
		return c, asFlagError(err)
	}
	return v, nil
}

// config reads the password and TLS files named by f and returns the
// Config they describe. TLS is on when f.TLS is set or any TLS file is
// given. The error names the flag at fault; it never contains the
// password.
func (f redisFlags) config() (redis.Config, error) {
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

// redisFlags are the --redis-* options.
func (o *Options) redisFlags() redisFlags {
	return redisFlags{
		Addr:           o.RedisAddr,
		Mode:           o.RedisMode,
		SentinelMaster: o.RedisSentinelMaster,
		Username:       o.RedisUsername,
		PasswordFile:   o.RedisPasswordFile,
		TLS:            o.RedisTLS,
		TLSCA:          o.RedisTLSCA,
		TLSCert:        o.RedisTLSCert,
		TLSKey:         o.RedisTLSKey,
		Timeout:        o.RedisTimeout,
		PoolSize:       o.RedisPoolSize,
		MaxFlushDelay:  o.RedisMaxFlushDelay,
	}
}
