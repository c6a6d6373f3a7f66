package e2e_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/polltest"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
)

// failoverTimeout bounds waiting for a replica to be promoted and every
// subject to be decided by Redis again (cluster-node-timeout is 1s).
const failoverTimeout = 30 * time.Second

// TestRedisClusterMasterKilled: three replicas on a local six-node Redis
// Cluster (--redis-mode cluster); a master is killed under load. The keys it
// served are answered by their policies' failure modes (closed: OVER_LIMIT
// with Retry-After; open: OK) until its replica is promoted, no call outlives
// its deadline or fails, and then Redis decides every subject again.
func TestRedisClusterMasterKilled(t *testing.T) {
	binary(t)
	c := redistest.StartCluster(t)
	rs := startReplicas(t, 3, failureRules, replicaConfig{
		Store: "redis", RedisAddr: strings.Join(c.Addrs(), ","), RedisMode: "cluster",
	})
	// Enough subjects that every master serves some of them.
	const subjects = 48

	p := phased{partial: true}
	stopLoad := startLoad(func(stop <-chan struct{}) { p.run(rs, 12, subjects, stop) })
	defer stopLoad()

	waitCount(t, &p.healthy, 200, 20*time.Second, "calls while the cluster is healthy")
	var victim *redistest.Server
	for _, n := range c.Nodes {
		if role, err := c.Role(n); err == nil && role == "master" {
			victim = n
			break
		}
	}
	if victim == nil {
		t.Fatal("no master in the cluster")
	}
	p.phase.Store(phaseChanging)
	victim.Kill()
	p.phase.Store(phaseDown)
	t.Logf("master %s killed", victim.Addr())

	// Failure-mode answers while the slot range has no master.
	polltest.Eventually(t, failoverTimeout, 10*time.Millisecond, "closed-policy fallback answers during the failover", func() error {
		p.downClosed.mu.Lock()
		defer p.downClosed.mu.Unlock()
		if p.downClosed.over == 0 {
			return fmt.Errorf("none yet (%d OK)", p.downClosed.ok)
		}
		return nil
	})
	took := waitDecisions(t, rs, subjects, failoverTimeout)
	t.Logf("every subject decided by Redis on every replica %v after the kill was noticed", took)
	p.phase.Store(phaseBack)
	waitCount(t, &p.back, 200, 20*time.Second, "calls after the failover")
	stopLoad()
	checkPhased(t, &p)
	if p.downOpen.ok == 0 {
		t.Errorf("no open-policy call answered during the failover: %v", &p.downOpen)
	}
}
