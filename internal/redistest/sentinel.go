package redistest

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/polltest"
)

// SentinelMasterName is the master set name the test sentinels monitor.
const SentinelMasterName = "envoy-rls-test"

// SentinelDownAfterMillis is the sentinels' down-after-milliseconds: small, so
// that a killed master is failed over within a few seconds.
const SentinelDownAfterMillis = 1000

// SentinelSet is a master, one replica and three sentinels (quorum 2).
type SentinelSet struct {
	t         testing.TB
	Master    *Server
	Replica   *Server
	Sentinels []*Server
}

// SentinelAddrs returns the sentinels' addresses.
func (s *SentinelSet) SentinelAddrs() []string { return addrs(s.Sentinels) }

// StartSentinel starts a master, a replica of it and three sentinels
// (redis-server processes, or on the runner of opts: WithRunner), and waits
// until the replica is in sync and every sentinel knows the replica and the
// two other sentinels.
func StartSentinel(t testing.TB, opts ...Option) *SentinelSet {
	t.Helper()
	o := newOptions(opts)
	if o.runner == nil {
		RequireServer(t)
	}
	on := options{runner: o.runner}
	set := &SentinelSet{t: t}
	set.Master = start(t, on, func(port int, dir string) ([]string, error) {
		return baseArgs(port, dir, options{}), nil
	})
	set.Replica = start(t, on, func(port int, dir string) ([]string, error) {
		return append(baseArgs(port, dir, options{}),
			"--replicaof", "127.0.0.1", strconv.Itoa(set.Master.Port())), nil
	})
	for i := 0; i < 3; i++ {
		set.Sentinels = append(set.Sentinels, start(t, on, func(port int, dir string) ([]string, error) {
			// Sentinels rewrite their configuration file, so they need one.
			conf, err := writeConfig(dir, "sentinel.conf", []string{
				"port " + strconv.Itoa(port),
				"bind 127.0.0.1",
				"dir " + dir,
				"logfile " + dir + "/redis.log",
				"sentinel monitor " + SentinelMasterName + " 127.0.0.1 " + strconv.Itoa(set.Master.Port()) + " 2",
				"sentinel down-after-milliseconds " + SentinelMasterName + " " + strconv.Itoa(SentinelDownAfterMillis),
				"sentinel failover-timeout " + SentinelMasterName + " 10000",
				"sentinel parallel-syncs " + SentinelMasterName + " 1",
			})
			if err != nil {
				return nil, err
			}
			return []string{conf, "--sentinel"}, nil
		}))
	}
	polltest.Eventually(t, TopologyTimeout, 100*time.Millisecond, "replica in sync", func() error {
		return replicaUp(set.Replica)
	})
	polltest.Eventually(t, TopologyTimeout, 100*time.Millisecond, "sentinels discovered", func() error {
		for _, s := range set.Sentinels {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			reps, err := s.Do(ctx, "SENTINEL", "REPLICAS", SentinelMasterName)
			if err != nil {
				cancel()
				return err
			}
			sens, err := s.Do(ctx, "SENTINEL", "SENTINELS", SentinelMasterName)
			cancel()
			if err != nil {
				return err
			}
			if r, _ := reps.([]any); len(r) < 1 {
				return fmt.Errorf("%s knows no replica yet", s.Addr())
			}
			if o, _ := sens.([]any); len(o) < 2 {
				return fmt.Errorf("%s knows %d other sentinels", s.Addr(), len(o))
			}
		}
		return nil
	})
	return set
}

// MasterAddr asks the first live sentinel for the current master address.
func (s *SentinelSet) MasterAddr() (string, error) {
	var lastErr error
	for _, n := range s.Sentinels {
		if n.PID() == 0 {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		v, err := n.Do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SentinelMasterName)
		cancel()
		if err != nil {
			lastErr = err
			continue
		}
		a, _ := v.([]any)
		if len(a) != 2 {
			lastErr = fmt.Errorf("GET-MASTER-ADDR-BY-NAME answered %v", v)
			continue
		}
		return fmt.Sprintf("%v:%v", a[0], a[1]), nil
	}
	return "", fmt.Errorf("redistest: no sentinel answered: %v", lastErr)
}

func replicaUp(r *Server) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	v, err := r.Do(ctx, "ROLE")
	if err != nil {
		return err
	}
	a, _ := v.([]any)
	if len(a) < 4 || a[0] != "slave" || a[3] != "connected" {
		return fmt.Errorf("replica %s ROLE %v", r.Addr(), v)
	}
	return nil
}
