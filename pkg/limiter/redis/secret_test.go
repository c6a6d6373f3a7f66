package redis

import (
	"bytes"
	"context"
	"net"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
)

func TestSharedSecretFirstStoredWins(t *testing.T) {
	srv := redistest.Standalone(t)
	cfg := Config{Addrs: []string{srv.Addr()}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	key := "test:shared-secret:" + t.Name() + time.Now().Format(time.RFC3339Nano)
	a := bytes.Repeat([]byte{'a'}, 32)
	b := bytes.Repeat([]byte{'b'}, 32)
	got, err := SharedSecret(ctx, cfg, key, a)
	if err != nil || !bytes.Equal(got, a) {
		t.Fatalf("first call: %q, %v; want its own candidate", got, err)
	}
	got, err = SharedSecret(ctx, cfg, key, b)
	if err != nil || !bytes.Equal(got, a) {
		t.Fatalf("second call: %q, %v; want the first candidate", got, err)
	}
	if _, err := SharedSecret(ctx, cfg, key, nil); err == nil {
		t.Error("empty candidate accepted")
	}
}

func TestSharedSecretUnreachable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// A port nothing listens on: a closed listener's.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	if _, err := SharedSecret(ctx, Config{Addrs: []string{addr}}, "k", []byte("x")); err == nil {
		t.Error("no error from an unreachable Redis")
	}
}
