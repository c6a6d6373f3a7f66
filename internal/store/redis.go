package store

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/envoy-rls/envoy-rls/internal/credfiles"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/redis"
)

// redisFlagOf is the flag, without dashes, that sets each redis.Config
// field a redis.FieldError can name. Read only.
var redisFlagOf = map[string]string{
	"Addrs": "redis-addr", "Mode": "redis-mode", "SentinelMaster": "redis-sentinel-master",
	"Timeout": "redis-timeout", "PoolSize": "redis-pool-size", "MaxFlushDelay": "redis-max-flush-delay",
	"GroupMaxKeys": "redis-group-max-keys", "GroupInFlight": "redis-group-in-flight",
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

// redisCheck returns what RedisConfig would refuse without reading any
// file: a *flagError for a malformed, out-of-range or inconsistent --redis-*
// value. The binary runs it before it starts.
func (f *Flags) redisCheck() error {
	_, err := f.redisPlain()
	return err
}

// redisCheckValues is redisCheck for a binary that does not use Redis: it
// refuses malformed or out-of-range values but requires no address.
func (f *Flags) redisCheckValues() error {
	_, err := f.redisValues().ValidateValues()
	return asFlagError(err)
}

// redisValues is the one conversion of the --redis-* flags to a
// redis.Config: the flag values alone, not validated, no file read,
// defaults not filled. redisPlain validates it and RedisConfig adds what
// the named files hold.
func (f *Flags) redisValues() redis.Config {
	var c redis.Config
	for _, a := range strings.Split(f.RedisAddr, ",") {
		if a = strings.TrimSpace(a); a != "" {
			c.Addrs = append(c.Addrs, a)
		}
	}
	c.Mode, c.SentinelMaster, c.Username = redis.Mode(f.RedisMode), f.RedisSentinelMaster, f.RedisUsername
	c.Timeout, c.PoolSize, c.MaxFlushDelay = f.RedisTimeout, f.RedisPoolSize, f.RedisMaxFlushDelay
	c.GroupMaxKeys, c.GroupInFlight = f.RedisGroupMaxKeys, f.RedisGroupInFlight
	return c
}

// redisPlain is the Config the options describe before any file is read,
// validated.
func (f *Flags) redisPlain() (redis.Config, error) {
	c := f.redisValues()
	switch {
	case f.RedisTLSCert != "" && f.RedisTLSKey == "":
		return c, &flagError{Flag: "redis-tls-key", Want: "given together with --redis-tls-cert (mutual TLS needs both)"}
	case f.RedisTLSKey != "" && f.RedisTLSCert == "":
		return c, &flagError{Flag: "redis-tls-cert", Want: "given together with --redis-tls-key (mutual TLS needs both)"}
	}
	v, err := c.Validate()
	if err != nil {
		return c, asFlagError(err)
	}
	return v, nil
}

// RedisConfig reads the password and TLS files named by the flags and
// returns the Config they describe. TLS is on when --redis-tls is set or
// any TLS file is given. The error names the flag at fault; it never
// contains the password.
func (f *Flags) RedisConfig() (redis.Config, error) {
	c, err := f.redisPlain()
	if err != nil {
		return c, err
	}
	if f.RedisPasswordFile != "" {
		b, err := os.ReadFile(f.RedisPasswordFile)
		if err != nil {
			return c, fmt.Errorf("--redis-password-file: %w", err)
		}
		c.Password = strings.TrimRight(string(b), "\r\n")
		if c.Password == "" {
			return c, fmt.Errorf("--redis-password-file: %s is empty", f.RedisPasswordFile)
		}
	}
	if f.RedisPasswordFile == "" && f.RedisPassword != "" {
		c.Password = f.RedisPassword
	}
	if f.RedisTLS || f.RedisTLSCA != "" || f.RedisTLSCert != "" || f.RedisTLSKey != "" {
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if f.RedisTLSCA != "" {
			pool, err := credfiles.ReadCAPool("redis-tls-ca", f.RedisTLSCA)
			if err != nil {
				return c, err
			}
			tc.RootCAs = pool
		}
		if f.RedisTLSSkipHostname {
			skipHostnameVerification(tc)
		}
		if f.RedisTLSCert != "" {
			cert, err := tls.LoadX509KeyPair(f.RedisTLSCert, f.RedisTLSKey)
			if err != nil {
				return c, fmt.Errorf("--redis-tls-cert/--redis-tls-key: %w", err)
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		c.TLS = tc
	}
	return c, nil
}

// skipHostnameVerification makes tc verify the server's certificate chain
// against tc.RootCAs (the system roots when nil) without checking that the
// certificate names the address dialled: Go's own verification is turned
// off and this one takes its place.
func skipHostnameVerification(tc *tls.Config) {
	tc.InsecureSkipVerify = true
	tc.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("redis TLS: the server sent no certificate")
		}
		inter := x509.NewCertPool()
		for _, c := range cs.PeerCertificates[1:] {
			inter.AddCert(c)
		}
		_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: tc.RootCAs, Intermediates: inter})
		if err != nil {
			return fmt.Errorf("redis TLS: %w", err)
		}
		return nil
	}
}
