package loadgen

import (
	"errors"
	"testing"
)

func TestCheckLoopback(t *testing.T) {
	tests := []struct {
		addr       string
		ok         bool
		notLoopbck bool // else a parse error
	}{
		{addr: "127.0.0.1:8081", ok: true},
		{addr: "127.1.2.3:1", ok: true},
		{addr: "localhost:8081", ok: true},
		{addr: "LocalHost:8081", ok: true},
		{addr: "[::1]:8081", ok: true},
		{addr: "[::ffff:127.0.0.1]:8081", ok: true},
		{addr: "10.0.0.1:8081", notLoopbck: true},
		{addr: "192.168.1.10:8081", notLoopbck: true},
		{addr: "0.0.0.0:8081", notLoopbck: true},
		{addr: "[::]:8081", notLoopbck: true},
		{addr: "8.8.8.8:53", notLoopbck: true},
		{addr: "example.com:80", notLoopbck: true},
		{addr: "localhost.example.com:80", notLoopbck: true},
		{addr: "128.0.0.1:80", notLoopbck: true},
		{addr: "127.0.0.1"},
		{addr: "127.0.0.1:"},
		{addr: ""},
	}
	for _, tc := range tests {
		err := CheckLoopback(tc.addr)
		switch {
		case tc.ok && err != nil:
			t.Errorf("CheckLoopback(%q) = %v, want nil", tc.addr, err)
		case !tc.ok && err == nil:
			t.Errorf("CheckLoopback(%q) = nil, want error", tc.addr)
		case tc.notLoopbck && !errors.Is(err, ErrNotLoopback):
			t.Errorf("CheckLoopback(%q) = %v, want ErrNotLoopback", tc.addr, err)
		}
	}
}

func TestConfigRefusesRemoteUnlessAllowed(t *testing.T) {
	cfg := validConfig("10.1.2.3:8081")
	if err := cfg.Validate(); !errors.Is(err, ErrNotLoopback) {
		t.Fatalf("Validate = %v, want ErrNotLoopback", err)
	}
	cfg.AllowRemote = true
	if err := cfg.Validate(); err != nil {
		t.Fatalf("with AllowRemote: %v", err)
	}
}
