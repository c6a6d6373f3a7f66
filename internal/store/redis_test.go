package store

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/redis"
)

func TestRedisFlagsConfig(t *testing.T) {
	dir := t.TempDir()
	pw := writeFile(t, dir, "pw", "hunter2\r\n")
	empty := writeFile(t, dir, "empty", "")
	notPEM := writeFile(t, dir, "ca.pem", "not a certificate")
	c, err := (&Flags{RedisAddr: " 10.0.0.1:6379, 10.0.0.2:6379 ,", RedisMode: "cluster", RedisUsername: "u", RedisPasswordFile: pw, RedisTLS: true, RedisTimeout: time.Second, RedisPoolSize: 8}).RedisConfig()
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Addrs) != 2 || c.Addrs[1] != "10.0.0.2:6379" || c.Mode != redis.ModeCluster || c.Username != "u" || c.Password != "hunter2" || c.TLS == nil || c.TLS.RootCAs != nil || c.PoolSize != 8 {
		t.Fatalf("config = %+v", c)
	}
	bad := []struct {
		f    Flags
		want string
	}{
		{Flags{}, "--redis-addr"},
		{Flags{RedisAddr: "a:1", RedisMode: "x"}, "--redis-mode"},
		{Flags{RedisAddr: "a:1", RedisPasswordFile: filepath.Join(dir, "missing")}, "--redis-password-file"},
		{Flags{RedisAddr: "a:1", RedisPasswordFile: empty}, "empty"},
		{Flags{RedisAddr: "a:1", RedisTLSCA: notPEM}, "--redis-tls-ca"},
		{Flags{RedisAddr: "a:1", RedisTLSCert: notPEM}, "together"},
		{Flags{RedisAddr: "a:1", RedisTLSCert: notPEM, RedisTLSKey: notPEM}, "--redis-tls-cert"},
		{Flags{RedisAddr: "a:1", RedisMode: "sentinel"}, "--redis-sentinel-master"},
	}
	for _, b := range bad {
		if _, err := b.f.RedisConfig(); err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%+v: error %v, want one mentioning %q", b.f, err, b.want)
		}
	}
}

// check refuses what config would, without reading files, naming the flag
// and saying what the redis package accepts.
func TestRedisFlagsCheck(t *testing.T) {
	ok := Flags{RedisAddr: "a:1", RedisMode: "auto", RedisTimeout: redis.DefaultTimeout, RedisPoolSize: redis.DefaultPoolSize, RedisMaxFlushDelay: redis.DefaultMaxFlushDelay,
		RedisPasswordFile: "/nonexistent/pw", RedisTLSCA: "/nonexistent/ca", RedisTLSCert: "/nonexistent/c", RedisTLSKey: "/nonexistent/k"}
	if err := ok.redisCheck(); err != nil {
		t.Fatalf("check read files or refused good flags: %v", err)
	}
	// Zero is the default, as in a Config.
	if err := (&Flags{RedisAddr: "a:1"}).redisCheck(); err != nil {
		t.Fatalf("check of zero values: %v", err)
	}
	tests := []struct {
		name        string
		edit        func(*Flags)
		flag, value string
		valuesToo   bool // checkValues refuses it as well
	}{
		{"no address", func(f *Flags) { f.RedisAddr = " , " }, "redis-addr", "", false},
		{"no port", func(f *Flags) { f.RedisAddr = "a:1,b" }, "redis-addr", "b", false},
		{"bad mode", func(f *Flags) { f.RedisMode = "ring" }, "redis-mode", "ring", true},
		{"sentinel without master", func(f *Flags) { f.RedisMode = "sentinel" }, "redis-sentinel-master", "", false},
		{"master in cluster mode", func(f *Flags) { f.RedisMode, f.RedisSentinelMaster = "cluster", "m" }, "redis-sentinel-master", "m", false},
		{"standalone, two addresses", func(f *Flags) { f.RedisMode, f.RedisAddr = "standalone", "a:1,b:2" }, "redis-addr", "a:1,b:2", false},
		{"timeout too small", func(f *Flags) { f.RedisTimeout = time.Microsecond }, "redis-timeout", "1µs", true},
		{"timeout too large", func(f *Flags) { f.RedisTimeout = 2 * time.Minute }, "redis-timeout", "2m0s", true},
		{"flush delay negative", func(f *Flags) { f.RedisMaxFlushDelay = -time.Millisecond }, "redis-max-flush-delay", "-1ms", true},
		{"flush delay too large", func(f *Flags) { f.RedisMaxFlushDelay = 2 * time.Millisecond }, "redis-max-flush-delay", "2ms", true},
		{"pool size negative", func(f *Flags) { f.RedisPoolSize = -1 }, "redis-pool-size", "-1", true},
		{"pool size too large", func(f *Flags) { f.RedisPoolSize = redis.MaxPoolSize + 1 }, "redis-pool-size", "257", true},
		{"cert without key", func(f *Flags) { f.RedisTLSKey = "" }, "redis-tls-key", "", false},
		{"key without cert", func(f *Flags) { f.RedisTLSCert = "" }, "redis-tls-cert", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rf := ok
			tt.edit(&rf)
			var fe *flagError
			if err := rf.redisCheck(); !errors.As(err, &fe) || fe.Flag != tt.flag || fe.Value != tt.value || fe.Want == "" {
				t.Fatalf("check: %v (%+v), want a flagError for --%s %q", err, fe, tt.flag, tt.value)
			}
			if _, err := rf.RedisConfig(); err == nil || err.Error() != fe.Error() {
				t.Errorf("config: %v, want check's %v", err, fe)
			}
			err := rf.redisCheckValues()
			if tt.valuesToo != (err != nil) {
				t.Errorf("checkValues: %v, refusal wanted: %v", err, tt.valuesToo)
			}
			// What the flag accepts is the redis package's own word for
			// the field.
			var re *redis.FieldError
			if _, err := rf.redisValues().Validate(); errors.As(err, &re) && re.Want != fe.Want {
				t.Errorf("want %q, the redis package says %q", fe.Want, re.Want)
			}
		})
	}
}

// The flags that take a number say, when their value does not parse or
// is zero, what the redis package says when it refuses one.
func TestRedisWant(t *testing.T) {
	for flag, want := range map[string]string{
		"redis-timeout":         "a duration between 1ms and 1m0s",
		"redis-pool-size":       "an integer between 1 and 256",
		"redis-max-flush-delay": "a duration between 0 and 1ms",
	} {
		if got := parseAccepts[flag]; got != want {
			t.Errorf("parseAccepts[%q] = %q, want %q", flag, got, want)
		}
	}
}

// The password file's content, without its line end, is what
// authenticates to Redis.
func TestRedisFlagsPasswordFile(t *testing.T) {
	redistest.RedisLane(t)
	srv := redistest.Standalone(t, redistest.Local())
	srv.MustDo("ACL", "SETUSER", "envoy-rls", "on", ">s3cret-pw", "~*", "+@all")
	dir := t.TempDir()
	for _, c := range []struct {
		name, content string
		ok            bool
	}{
		{"the password and a newline", "s3cret-pw\n", true},
		{"another password", "wrong-pw\n", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			pw := writeFile(t, dir, "pw", c.content)
			cfg, err := (&Flags{RedisAddr: srv.Addr(), RedisUsername: "envoy-rls", RedisPasswordFile: pw}).RedisConfig()
			if err != nil {
				t.Fatal(err)
			}
			pingRedis(t, cfg, c.ok)
		})
	}
}

// The TLS flags' files verify the server and authenticate the client; TLS
// without a CA uses the system roots, which do not know the test CA.
func TestRedisFlagsTLSFiles(t *testing.T) {
	redistest.RedisLane(t)
	redistest.RequireTLS(t)
	files := redistest.GenerateTLS(t)
	srv := redistest.Standalone(t, redistest.WithTLS(files, files.ClientConfig(t)))
	cfg, err := (&Flags{RedisAddr: srv.Addr(), RedisMode: "standalone", RedisTLSCA: files.CA, RedisTLSCert: files.ClientCert, RedisTLSKey: files.ClientKey}).RedisConfig()
	if err != nil {
		t.Fatal(err)
	}
	pingRedis(t, cfg, true)
	noCA, err := (&Flags{RedisAddr: srv.Addr(), RedisMode: "standalone", RedisTLS: true}).RedisConfig()
	if err != nil {
		t.Fatal(err)
	}
	pingRedis(t, noCA, false)

	// The certificate names 127.0.0.1, not localhost: the name check fails
	// unless skipped; the chain is still verified.
	_, port, _ := net.SplitHostPort(srv.Addr())
	byName := Flags{RedisAddr: "localhost:" + port, RedisMode: "standalone", RedisTLSCA: files.CA, RedisTLSCert: files.ClientCert, RedisTLSKey: files.ClientKey}
	named, err := byName.RedisConfig()
	if err != nil {
		t.Fatal(err)
	}
	pingRedis(t, named, false)
	byName.RedisTLSSkipHostname = true
	skipped, err := byName.RedisConfig()
	if err != nil {
		t.Fatal(err)
	}
	pingRedis(t, skipped, true)
	otherCA := redistest.GenerateTLS(t)
	byName.RedisTLSCA = otherCA.CA
	wrongCA, err := byName.RedisConfig()
	if err != nil {
		t.Fatal(err)
	}
	pingRedis(t, wrongCA, false)
}

// pingRedis connects with cfg and pings; ok says whether that must work.
func pingRedis(t *testing.T, cfg redis.Config, ok bool) {
	t.Helper()
	cfg.DialTimeout = time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := redis.New(ctx, cfg)
	if err == nil {
		defer s.Close()
		err = s.Ping(ctx)
	}
	if ok != (err == nil) {
		t.Fatalf("connect and ping: %v, success wanted: %v", err, ok)
	}
}

// writeFile writes content to the file name in dir and returns its path.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
