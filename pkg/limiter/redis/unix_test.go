package redis

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// TestUnixSocket: a standalone server reached over its Unix socket, as the
// reference service's default (REDIS_SOCKET_TYPE=unix) reaches it.
func TestUnixSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "redis.sock")
	redistest.Standalone(t, redistest.Local(), redistest.WithArgs("--unixsocket", sock, "--unixsocketperm", "700"))
	for _, mode := range []Mode{ModeAuto, ModeStandalone} {
		s := newStore(t, Config{Addrs: []string{sock}, Mode: mode})
		p := fixed(t, "unix", 2, farWindow)
		sub := subjectOf("unix-" + string(mode))
		for i, want := range []bool{true, true, false} {
			out := make([]limiter.Outcome, 1)
			s.Evaluate(context.Background(), []limiter.Request{{Policy: p, Subject: sub, Cost: 1}}, out)
			if out[0].Kind != limiter.Evaluated || out[0].Decision.Allowed != want {
				t.Fatalf("mode %s, call %d: %v %+v (%v), want allowed=%v", mode, i+1, out[0].Kind, out[0].Decision, out[0].Err, want)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := SharedSecret(ctx, Config{Addrs: []string{sock}}, "k", []byte("0123456789abcdef")); err != nil {
		t.Errorf("SharedSecret over the socket: %v", err)
	}
}

func TestUnixSocketRefused(t *testing.T) {
	for _, c := range []Config{
		{Addrs: []string{"/run/redis.sock", "127.0.0.1:6379"}},
		{Addrs: []string{"/run/redis.sock"}, Mode: ModeCluster},
		{Addrs: []string{"/run/redis.sock"}, Mode: ModeSentinel, SentinelMaster: "m"},
	} {
		if _, err := c.Validate(); !wantError(t, err, "a Unix socket path only as the one address of a standalone server") {
			t.Errorf("%+v: %v", c, err)
		}
	}
	c, err := Config{Addrs: []string{"/run/redis.sock"}}.Validate()
	if err != nil || c.Mode != ModeStandalone {
		t.Errorf("auto with a socket: mode %s, %v; want standalone", c.Mode, err)
	}
}
