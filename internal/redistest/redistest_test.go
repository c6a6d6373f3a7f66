package redistest

import (
	"context"
	"testing"
	"time"
)

func TestStandaloneKillRestartPause(t *testing.T) {
	s := Standalone(t, Local())
	if got := s.MustDo("SET", "k", "v"); got != "OK" {
		t.Fatalf("SET answered %v", got)
	}
	s.Pause()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	_, err := s.Do(ctx, "PING")
	cancel()
	if err == nil {
		t.Fatal("a paused server answered PING")
	}
	s.Resume()
	if got := s.MustDo("PING"); got != "PONG" {
		t.Fatalf("PING after resume answered %v", got)
	}
	s.Kill()
	if _, err := Do(context.Background(), s.Addr(), nil, "PING"); err == nil {
		t.Fatal("a killed server answered PING")
	}
	s.Restart()
	if got := s.MustDo("EXISTS", "k"); got != int64(0) {
		t.Fatalf("state survived a restart without persistence: EXISTS = %v", got)
	}
}

func TestTLSServer(t *testing.T) {
	RequireTLS(t)
	files := GenerateTLS(t)
	s := Standalone(t, WithTLS(files, files.ClientConfig(t)))
	if got := s.MustDo("PING"); got != "PONG" {
		t.Fatalf("PING over TLS answered %v", got)
	}
	if _, err := Do(context.Background(), s.Addr(), nil, "PING"); err == nil {
		t.Fatal("a TLS-only server answered plain-text PING")
	}
}

func TestClusterAndSentinel(t *testing.T) {
	if testing.Short() {
		t.Skip("topologies are slow; skipped with -short")
	}
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		c := StartCluster(t)
		masters := 0
		for _, n := range c.Nodes {
			if r, err := c.Role(n); err == nil && r == "master" {
				masters++
			}
		}
		if masters != 3 {
			t.Fatalf("%d masters, want 3", masters)
		}
		if m := c.MasterFor("rate:{abc}:x"); m == nil {
			t.Fatal("no master for key")
		}
	})
	t.Run("sentinel", func(t *testing.T) {
		t.Parallel()
		set := StartSentinel(t)
		addr, err := set.MasterAddr()
		if err != nil {
			t.Fatal(err)
		}
		if addr != set.Master.Addr() {
			t.Fatalf("sentinel says master %s, want %s", addr, set.Master.Addr())
		}
	})
}
