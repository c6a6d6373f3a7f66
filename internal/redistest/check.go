package redistest

import (
	"context"
	"testing"
	"time"
)

// CheckServers is the harness's own suite, run on the servers opts start
// (redis-server processes, or a Runner's): a standalone server killed,
// restarted, paused and resumed; a TLS-only server; a Cluster with three
// masters; a Sentinel set whose sentinels name the master. The local
// processes run it in this package's tests, the container lane on its
// images.
func CheckServers(t *testing.T, opts ...Option) {
	t.Run("kill restart pause", func(t *testing.T) { checkFaults(t, opts) })
	t.Run("tls", func(t *testing.T) { checkTLS(t, opts) })
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		if testing.Short() {
			t.Skip("topologies are slow; skipped with -short")
		}
		checkCluster(t, opts)
	})
	t.Run("sentinel", func(t *testing.T) {
		t.Parallel()
		if testing.Short() {
			t.Skip("topologies are slow; skipped with -short")
		}
		checkSentinel(t, opts)
	})
}

func checkFaults(t *testing.T, opts []Option) {
	s := Standalone(t, append([]Option{Local()}, opts...)...)
	if got := s.MustDo("SET", "k", "v"); got != "OK" {
		t.Fatalf("SET answered %v", got)
	}
	if s.PID() == 0 {
		t.Fatal("no PID for a running server")
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
	if s.PID() != 0 {
		t.Fatal("a PID after Kill")
	}
	if _, err := Do(context.Background(), s.Addr(), nil, "PING"); err == nil {
		t.Fatal("a killed server answered PING")
	}
	s.Restart()
	if got := s.MustDo("EXISTS", "k"); got != int64(0) {
		t.Fatalf("state survived a restart without persistence: EXISTS = %v", got)
	}
}

func checkTLS(t *testing.T, opts []Option) {
	if newOptions(opts).runner == nil {
		RequireTLS(t)
	}
	files := GenerateTLS(t)
	s := Standalone(t, append([]Option{WithTLS(files, files.ClientConfig(t))}, opts...)...)
	if got := s.MustDo("PING"); got != "PONG" {
		t.Fatalf("PING over TLS answered %v", got)
	}
	if _, err := Do(context.Background(), s.Addr(), nil, "PING"); err == nil {
		t.Fatal("a TLS-only server answered plain-text PING")
	}
}

func checkCluster(t *testing.T, opts []Option) {
	c := StartCluster(t, opts...)
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
}

func checkSentinel(t *testing.T, opts []Option) {
	set := StartSentinel(t, opts...)
	addr, err := set.MasterAddr()
	if err != nil {
		t.Fatal(err)
	}
	if addr != set.Master.Addr() {
		t.Fatalf("sentinel says master %s, want %s", addr, set.Master.Addr())
	}
}
