package redistest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/polltest"
)

// ClusterNodeTimeoutMillis is the cluster-node-timeout of test clusters: small,
// so that a killed master is failed over in a few seconds.
const ClusterNodeTimeoutMillis = 1000

// Cluster is a six-node Redis Cluster: three masters, one replica each.
type Cluster struct {
	t     testing.TB
	Nodes []*Server
}

// Addrs returns every node's address.
func (c *Cluster) Addrs() []string { return addrs(c.Nodes) }

// addrs returns the servers' addresses in order.
func addrs(servers []*Server) []string {
	out := make([]string, len(servers))
	for i, n := range servers {
		out[i] = n.Addr()
	}
	return out
}

// StartCluster starts six servers in cluster mode (redis-server processes,
// or on the runner of opts: WithRunner), joins them with `redis-cli --cluster
// create --cluster-replicas 1` and waits until every node reports
// cluster_state:ok and every master has a connected replica.
func StartCluster(t testing.TB, opts ...Option) *Cluster {
	t.Helper()
	o := newOptions(opts)
	if o.runner == nil {
		RequireServer(t)
		if _, err := exec.LookPath("redis-cli"); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("redistest: redis-cli is not on PATH and CI=true")
			}
			t.Skip("redistest: redis-cli is not on PATH (needed to create a cluster)")
		}
	}
	c := &Cluster{t: t}
	for i := 0; i < 6; i++ {
		c.Nodes = append(c.Nodes, start(t, options{runner: o.runner}, func(port int, dir string) ([]string, error) {
			return append(baseArgs(port, dir, options{}),
				"--cluster-enabled", "yes",
				"--cluster-config-file", "nodes.conf",
				"--cluster-node-timeout", strconv.Itoa(ClusterNodeTimeoutMillis),
				// Let a replica that lost its master for a while still be promoted.
				"--cluster-replica-validity-factor", "0",
				"--cluster-require-full-coverage", "no",
			), nil
		}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), TopologyTimeout)
	defer cancel()
	args := []string{"--cluster", "create"}
	args = append(args, c.Addrs()...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	// The first node's client creates the cluster: a runner's image brings
	// its own, the host may have none.
	if out, err := c.Nodes[0].proc.CLI(ctx, args...); err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	c.WaitHealthy(TopologyTimeout)
	return c
}

// WaitHealthy waits until every running node reports cluster_state:ok and
// agrees on three masters, each with a connected replica among live nodes
// (when both are alive).
func (c *Cluster) WaitHealthy(timeout time.Duration) {
	c.t.Helper()
	polltest.Eventually(c.t, timeout, 100*time.Millisecond, "cluster healthy", func() error {
		for _, n := range c.Nodes {
			if n.PID() == 0 {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			v, err := n.Do(ctx, "CLUSTER", "INFO")
			cancel()
			if err != nil {
				return err
			}
			s, _ := v.(string)
			if !strings.Contains(s, "cluster_state:ok") {
				return fmt.Errorf("%s: cluster_state not ok", n.Addr())
			}
		}
		return nil
	})
}

// Role returns "master" or "slave" as the node reports itself.
func (c *Cluster) Role(n *Server) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	v, err := n.Do(ctx, "ROLE")
	if err != nil {
		return "", err
	}
	a, ok := v.([]any)
	if !ok || len(a) == 0 {
		return "", fmt.Errorf("ROLE answered %v", v)
	}
	r, _ := a[0].(string)
	return r, nil
}

// MasterFor returns the node currently serving key's slot as master.
func (c *Cluster) MasterFor(key string) *Server {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var slot int64 = -1
	for _, n := range c.Nodes {
		if n.PID() == 0 {
			continue
		}
		v, err := n.Do(ctx, "CLUSTER", "KEYSLOT", key)
		if err != nil {
			c.t.Fatalf("redistest: CLUSTER KEYSLOT: %v", err)
		}
		slot = v.(int64)
		break
	}
	for _, n := range c.Nodes {
		if n.PID() == 0 {
			continue
		}
		if r, err := c.Role(n); err != nil || r != "master" {
			continue
		}
		// The "myself" line of CLUSTER NODES lists the slot ranges it serves.
		nodes, err := n.Do(ctx, "CLUSTER", "NODES")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(nodes.(string), "\n") {
			f := strings.Fields(line)
			if len(f) < 9 || !strings.Contains(f[2], "myself") {
				continue
			}
			for _, r := range f[8:] {
				lo, hi, ok := slotRange(r)
				if ok && int64(lo) <= slot && slot <= int64(hi) {
					return n
				}
			}
		}
	}
	c.t.Fatalf("redistest: no live master serves slot %d", slot)
	return nil
}

func slotRange(r string) (int, int, bool) {
	if strings.HasPrefix(r, "[") {
		return 0, 0, false // a slot being migrated
	}
	a, b, found := strings.Cut(r, "-")
	lo, err := strconv.Atoi(a)
	if err != nil {
		return 0, 0, false
	}
	if !found {
		return lo, lo, true
	}
	hi, err := strconv.Atoi(b)
	if err != nil {
		return 0, 0, false
	}
	return lo, hi, true
}
