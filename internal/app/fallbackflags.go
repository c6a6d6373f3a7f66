package app

import (
	"flag"
	"fmt"

	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/failover"
)

// Defaults of the readiness and local fallback flags.
const (
	DefaultReadiness               = ReadinessRules
	DefaultFailureMode             = "closed"
	DefaultReplicasHint            = 1
	DefaultLocalFallbackMaxEntries = failover.DefaultMaxEntries
)

// fallbackFlags adds the flags of readiness and of failure_mode: local.
func fallbackFlags(fs *flag.FlagSet, o *Options) {
	fs.StringVar(&o.Readiness, "readiness", DefaultReadiness, "what /readyz requires: rules (rules loaded and listeners up; a store outage is answered by each policy's failure mode) or store (also a store that answers, so that Envoy's failure_mode_deny decides during an outage)")
	fs.StringVar(&o.DefaultFailureMode, "default-failure-mode", DefaultFailureMode, "failure mode of the rules that set no failure_mode: closed, open or local")
	fs.IntVar(&o.ReplicasHint, "replicas-hint", DefaultReplicasHint, fmt.Sprintf("replicas sharing each limit: failure_mode local limits admit limit/replicas-hint (rounded down, at least 1) per replica while the store fails; 1–%d", failover.MaxReplicas))
	fs.IntVar(&o.LocalFallbackMaxEntries, "local-fallback-max-entries", DefaultLocalFallbackMaxEntries, "failure_mode local: the most subjects this replica's local limiter holds at once (new ones beyond are denied)")
}

// fallbackCheck returns the names of the flags of fallbackFlags whose
// values are refused.
func (o *Options) fallbackCheck() []string {
	var bad []string
	if o.Readiness != ReadinessRules && o.Readiness != ReadinessStore {
		bad = append(bad, "readiness")
	}
	if _, err := limiter.ParseFailureMode(o.DefaultFailureMode); err != nil {
		bad = append(bad, "default-failure-mode")
	}
	if o.ReplicasHint < 1 || o.ReplicasHint > failover.MaxReplicas {
		bad = append(bad, "replicas-hint")
	}
	if o.LocalFallbackMaxEntries < 1 {
		bad = append(bad, "local-fallback-max-entries")
	}
	return bad
}

// failoverConfig is the failover.Config of the flags: the local limiter
// runs on the store's clock and its transitions are logged.
func (s *server) failoverConfig() failover.Config {
	return failover.Config{Replicas: s.opts.ReplicasHint, MaxEntries: s.opts.LocalFallbackMaxEntries,
		Clock: s.clock, Observer: localLog{s.log.Named("rls")}}
}

// Log messages of the local fallback.
const (
	msgLocalStarted = "store failed: deciding failure_mode local limits with this replica's share"
	msgLocalDropped = "store decides again: local fallback state dropped"
)

// localLog logs the failover store's local limiter transitions.
type localLog struct{ log *zap.Logger }

func (l localLog) LocalStarted(replicas int) {
	l.log.Warn(msgLocalStarted, zap.Int("replicas_hint", replicas))
}
func (l localLog) LocalDropped() { l.log.Info(msgLocalDropped) }
