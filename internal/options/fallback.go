package options

import (
	"flag"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
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

// Defaults of the readiness and failure mode flags.
const (
	DefaultReadiness   = ReadinessRules
	DefaultFailureMode = "closed"
)

// fallbackFlags adds the flags of readiness and of the rules' default
// failure mode.
func fallbackFlags(fs *flag.FlagSet, o *Options) {
	fs.StringVar(&o.Readiness, "readiness", DefaultReadiness, "what /readyz requires: rules (rules loaded and listeners up; a store outage is answered by each policy's failure mode) or store (also a store that answers, so that Envoy's failure_mode_deny decides during an outage); /healthz and /healthcheck never follow it")
	fs.StringVar(&o.DefaultFailureMode, "default-failure-mode", DefaultFailureMode, "failure mode of the rules that set no failure_mode: closed, open or local")
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
	return bad
}
