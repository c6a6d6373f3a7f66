package options

import (
	"flag"
	"fmt"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/failover"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/memory"
)

// Readiness modes (--readiness).
const (
	// ReadinessRules: ready once the rules are loaded and the listeners
	// are up, whatever the store's state; a store outage is answered by
	// each policy's failure mode.
	ReadinessRules = "rules"
	// ReadinessStore: also unready while the store does not answer its
	// ping, so that Envoy's failure_mode_deny decides during an outage.
	// Only /readyz follows it: the liveness endpoints never do.
	ReadinessStore = "store"
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
	fs.StringVar(&o.Readiness, "readiness", DefaultReadiness, "what /readyz requires: rules (rules loaded and listeners up; a store outage is answered by each policy's failure mode) or store (also a store that answers, so that Envoy's failure_mode_deny decides during an outage); /healthz and /healthcheck never follow it")
	fs.StringVar(&o.DefaultFailureMode, "default-failure-mode", DefaultFailureMode, "failure mode of the rules that set no failure_mode: closed, open or local")
	fs.IntVar(&o.ReplicasHint, "replicas-hint", DefaultReplicasHint, fmt.Sprintf("replicas sharing each limit: failure_mode local limits admit limit/replicas-hint (rounded down, at least 1) per replica while the store fails; 1–%d", failover.MaxReplicas))
	fs.IntVar(&o.LocalFallbackMaxEntries, "local-fallback-max-entries", DefaultLocalFallbackMaxEntries, fmt.Sprintf("failure_mode local: the most subjects this replica's local limiter holds exactly; a policy's new subjects beyond are limited by an overflow sketch that never admits more than the share (answered closed when more than %d policies are in overflow at once)", memory.DefaultMaxSketches))
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

// FailoverConfig is the failover.Config of the flags; the caller sets the
// clock and the observer.
func (o *Options) FailoverConfig() failover.Config {
	return failover.Config{Replicas: o.ReplicasHint, MaxEntries: o.LocalFallbackMaxEntries}
}
