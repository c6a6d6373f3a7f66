package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

func TestConfigValidation(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr string
		mode    Mode
	}{
		{"defaults", Config{Addrs: []string{"127.0.0.1:6379"}}, "", ModeAuto},
		{"sentinel by master name", Config{Addrs: []string{"127.0.0.1:26379"}, SentinelMaster: "m"}, "", ModeSentinel},
		{"no addrs", Config{}, "addrs", ""},
		{"no port", Config{Addrs: []string{"127.0.0.1"}}, "host:port", ""},
		{"bad mode", Config{Addrs: []string{"a:1"}, Mode: "ring"}, "mode", ""},
		{"sentinel without master", Config{Addrs: []string{"a:1"}, Mode: ModeSentinel}, "sentinel_master", ""},
		{"master without sentinel", Config{Addrs: []string{"a:1"}, Mode: ModeCluster, SentinelMaster: "m"}, "sentinel_master", ""},
		{"standalone two addrs", Config{Addrs: []string{"a:1", "b:1"}, Mode: ModeStandalone}, "exactly one", ""},
		{"timeout too small", Config{Addrs: []string{"a:1"}, Timeout: time.Microsecond}, "timeout", ""},
		{"timeout too large", Config{Addrs: []string{"a:1"}, Timeout: time.Hour}, "timeout", ""},
		{"pool too large", Config{Addrs: []string{"a:1"}, PoolSize: 1000}, "pool size", ""},
		{"pool negative", Config{Addrs: []string{"a:1"}, PoolSize: -1}, "pool size", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.cfg.validated()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Mode != tt.mode || got.Timeout != DefaultTimeout || got.PoolSize != DefaultPoolSize || got.DialTimeout != DefaultDialTimeout {
				t.Fatalf("validated = %+v", got)
			}
		})
	}
	for size, want := range map[int]int{1: 0, 2: 1, 3: 1, 4: 2, 100: 6, 256: 8} {
		if got := (Config{PoolSize: size}).multiplex(); got != want {
			t.Errorf("multiplex(%d) = %d, want %d", size, got, want)
		}
	}
}

func TestFlagsConfig(t *testing.T) {
	dir := t.TempDir()
	pw := filepath.Join(dir, "pw")
	if err := os.WriteFile(pw, []byte("hunter2\r\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	notPEM := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Flags{Addr: " 10.0.0.1:6379, 10.0.0.2:6379 ,", Mode: "cluster", Username: "u", PasswordFile: pw, TLS: true, Timeout: time.Second, PoolSize: 8}.Config()
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Addrs) != 2 || c.Addrs[1] != "10.0.0.2:6379" || c.Mode != ModeCluster || c.Password != "hunter2" || c.TLS == nil || c.TLS.RootCAs != nil || c.PoolSize != 8 {
		t.Fatalf("Config = %+v", c)
	}
	bad := []struct {
		f    Flags
		want string
	}{
		{Flags{}, "--redis-addr"},
		{Flags{Addr: "a:1", Mode: "x"}, "--redis-mode"},
		{Flags{Addr: "a:1", PasswordFile: filepath.Join(dir, "missing")}, "--redis-password-file"},
		{Flags{Addr: "a:1", PasswordFile: empty}, "empty"},
		{Flags{Addr: "a:1", TLSCA: notPEM}, "--redis-tls-ca"},
		{Flags{Addr: "a:1", TLSCert: notPEM}, "together"},
		{Flags{Addr: "a:1", TLSCert: notPEM, TLSKey: notPEM}, "--redis-tls-cert"},
		{Flags{Addr: "a:1", Mode: "sentinel"}, "--redis-sentinel-master"},
	}
	for _, b := range bad {
		if _, err := b.f.Config(); err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%+v: error %v, want one mentioning %q", b.f, err, b.want)
		}
	}
}

// Check refuses what Config would, without reading files, naming the flag.
func TestFlagsCheck(t *testing.T) {
	ok := Flags{Addr: "a:1", Mode: "auto", Timeout: DefaultTimeout, PoolSize: DefaultPoolSize, MaxFlushDelay: DefaultMaxFlushDelay,
		PasswordFile: "/nonexistent/pw", TLSCA: "/nonexistent/ca", TLSCert: "/nonexistent/c", TLSKey: "/nonexistent/k"}
	if err := ok.Check(); err != nil {
		t.Fatalf("Check read files or refused good flags: %v", err)
	}
	// Zero is the default, as in a Config.
	if err := (Flags{Addr: "a:1"}).Check(); err != nil {
		t.Fatalf("Check of zero values: %v", err)
	}
	tests := []struct {
		name        string
		edit        func(*Flags)
		flag, value string
		valuesToo   bool // CheckValues refuses it as well
	}{
		{"no address", func(f *Flags) { f.Addr = " , " }, "redis-addr", "", false},
		{"no port", func(f *Flags) { f.Addr = "a:1,b" }, "redis-addr", "b", false},
		{"bad mode", func(f *Flags) { f.Mode = "ring" }, "redis-mode", "ring", true},
		{"sentinel without master", func(f *Flags) { f.Mode = "sentinel" }, "redis-sentinel-master", "", false},
		{"master in cluster mode", func(f *Flags) { f.Mode, f.SentinelMaster = "cluster", "m" }, "redis-sentinel-master", "m", false},
		{"standalone, two addresses", func(f *Flags) { f.Mode, f.Addr = "standalone", "a:1,b:2" }, "redis-addr", "a:1,b:2", false},
		{"timeout too small", func(f *Flags) { f.Timeout = time.Microsecond }, "redis-timeout", "1µs", true},
		{"timeout too large", func(f *Flags) { f.Timeout = 2 * time.Minute }, "redis-timeout", "2m0s", true},
		{"flush delay negative", func(f *Flags) { f.MaxFlushDelay = -time.Millisecond }, "redis-max-flush-delay", "-1ms", true},
		{"flush delay too large", func(f *Flags) { f.MaxFlushDelay = 2 * time.Millisecond }, "redis-max-flush-delay", "2ms", true},
		{"pool size negative", func(f *Flags) { f.PoolSize = -1 }, "redis-pool-size", "-1", true},
		{"pool size too large", func(f *Flags) { f.PoolSize = MaxPoolSize + 1 }, "redis-pool-size", "257", true},
		{"cert without key", func(f *Flags) { f.TLSKey = "" }, "redis-tls-key", "", false},
		{"key without cert", func(f *Flags) { f.TLSCert = "" }, "redis-tls-cert", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := ok
			tt.edit(&f)
			var fe *FieldError
			if err := f.Check(); !errors.As(err, &fe) || fe.Flag != tt.flag || fe.Value != tt.value || fe.Want == "" {
				t.Fatalf("Check: %v (%+v), want a FieldError for --%s %q", err, fe, tt.flag, tt.value)
			}
			if _, err := f.Config(); err == nil || err.Error() != fe.Error() {
				t.Errorf("Config: %v, want Check's %v", err, fe)
			}
			err := f.CheckValues()
			if tt.valuesToo != (err != nil) {
				t.Errorf("CheckValues: %v, refusal wanted: %v", err, tt.valuesToo)
			}
		})
	}
}

func TestNewUnreachable(t *testing.T) {
	// A port nobody listens on: New fails fast with the address in the error.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if s, err := New(ctx, Config{Addrs: []string{addr}}); err == nil {
		s.Close()
		t.Fatal("New succeeded against a closed port")
	} else if !strings.Contains(err.Error(), addr) {
		t.Fatalf("error %v does not name %s", err, addr)
	}
	if _, err := New(ctx, Config{}); err == nil {
		t.Fatal("New accepted an empty config")
	}
}

func TestClassify(t *testing.T) {
	p := fixed(t, "classify", 1, time.Second)
	dialErr := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	tests := []struct {
		name     string
		err      error
		kind     limiter.OutcomeKind
		category string
	}{
		{"dial refused", dialErr, limiter.Unavailable, limiter.CategoryNotConnected},
		{"wrapped dial", fmt.Errorf("x: %w", dialErr), limiter.Unavailable, limiter.CategoryNotConnected},
		{"no slot", rueidis.ErrNoSlot, limiter.Unavailable, limiter.CategoryNotConnected},
		{"closing (may have been sent)", rueidis.ErrClosing, limiter.Indeterminate, ""},
		{"deadline after send", context.DeadlineExceeded, limiter.Indeterminate, ""},
		{"read reset", &net.OpError{Op: "read", Err: errors.New("connection reset by peer")}, limiter.Indeterminate, ""},
		{"eof", errors.New("EOF"), limiter.Indeterminate, ""},
	}
	for _, tt := range tests {
		o := classify(p, tt.err)
		if o.Kind != tt.kind || o.Category != tt.category {
			t.Errorf("%s: %v/%s, want %v/%s", tt.name, o.Kind, o.Category, tt.kind, tt.category)
		}
		if o.Kind == limiter.Evaluated {
			t.Errorf("%s: an error became a decision", tt.name)
		}
	}
}
