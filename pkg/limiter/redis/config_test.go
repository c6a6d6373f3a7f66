package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
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
			got, err := tt.cfg.Validate()
			if wantError(t, err, tt.wantErr) {
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Mode != tt.mode || got.Timeout != DefaultTimeout || got.PoolSize != DefaultPoolSize || got.DialTimeout != defaultDialTimeout {
				t.Fatalf("Validate = %+v", got)
			}
		})
	}
	for size, want := range map[int]int{1: 0, 2: 1, 3: 1, 4: 2, 100: 6, 256: 8} {
		if got := (Config{PoolSize: size}).multiplex(); got != want {
			t.Errorf("multiplex(%d) = %d, want %d", size, got, want)
		}
	}
}

// FieldError names the Config field, in the words of the package's other
// errors, and says what it accepts.
func TestFieldErrorMessage(t *testing.T) {
	tests := []struct {
		cfg  Config
		want string
	}{
		{Config{}, `redis store: addrs "": must be at least one host:port`},
		{Config{Addrs: []string{"a:1"}, Timeout: time.Microsecond}, `redis store: timeout "1µs": must be a duration between 1ms and 1m0s`},
		{Config{Addrs: []string{"a:1"}, DialTimeout: time.Hour}, `redis store: dial timeout "1h0m0s": must be a duration between 1ms and 1m0s`},
		{Config{Addrs: []string{"a:1"}, PoolSize: 257}, `redis store: pool size "257": must be an integer between 1 and 256`},
		{Config{Addrs: []string{"a:1"}, MaxFlushDelay: -time.Millisecond}, `redis store: max flush delay "-1ms": must be a duration between 0 and 1ms`},
		{Config{Addrs: []string{"a:1"}, Mode: "ring"}, `redis store: mode "ring": must be auto, standalone, cluster or sentinel`},
		{Config{Addrs: []string{"a:1"}, Mode: ModeCluster, SentinelMaster: "m"}, `redis store: sentinel_master "m": must be empty unless the mode is sentinel or auto (it is cluster)`},
	}
	for _, tt := range tests {
		_, err := tt.cfg.Validate()
		var fe *FieldError
		if !errors.As(err, &fe) || err.Error() != tt.want {
			t.Errorf("%+v: error %v, want the FieldError %q", tt.cfg, err, tt.want)
		}
	}
}

// ValidateValues refuses what Validate refuses in each value on its own,
// with the same FieldError, and requires no address.
func TestValidateValues(t *testing.T) {
	got, err := Config{}.ValidateValues()
	if err != nil {
		t.Fatalf("ValidateValues of the zero Config: %v", err)
	}
	if got.Mode != ModeAuto || got.Timeout != DefaultTimeout || got.DialTimeout != defaultDialTimeout || got.PoolSize != DefaultPoolSize || got.MaxFlushDelay != 0 {
		t.Fatalf("ValidateValues filled %+v", got)
	}
	tests := []struct {
		name  string
		cfg   Config
		field string
	}{
		{"bad mode", Config{Mode: "ring"}, "Mode"},
		{"timeout too small", Config{Timeout: time.Microsecond}, "Timeout"},
		{"timeout too large", Config{Timeout: 2 * time.Minute}, "Timeout"},
		{"dial timeout negative", Config{DialTimeout: -time.Second}, "DialTimeout"},
		{"flush delay negative", Config{MaxFlushDelay: -time.Millisecond}, "MaxFlushDelay"},
		{"flush delay too large", Config{MaxFlushDelay: 2 * time.Millisecond}, "MaxFlushDelay"},
		{"pool size negative", Config{PoolSize: -1}, "PoolSize"},
		{"pool size too large", Config{PoolSize: MaxPoolSize + 1}, "PoolSize"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.cfg.ValidateValues()
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tt.field || fe.Want == "" {
				t.Fatalf("ValidateValues: %v (%+v), want a FieldError for %s", err, fe, tt.field)
			}
			withAddr := tt.cfg
			withAddr.Addrs = []string{"a:1"}
			if _, err := withAddr.Validate(); err == nil || err.Error() != fe.Error() {
				t.Errorf("Validate: %v, want ValidateValues' %v", err, fe)
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
	if err := newFails(t, Config{Addrs: []string{addr}}, "New succeeded against a closed port"); !strings.Contains(err.Error(), addr) {
		t.Fatalf("error %v does not name %s", err, addr)
	}
	newFails(t, Config{}, "New accepted an empty config")
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
