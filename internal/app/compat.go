package app

import (
	"errors"
	"strconv"

	"github.com/envoy-rls/envoy-rls/internal/options"
)

// DefaultHMACSecretRedisKey is the Redis key under which, in compatibility
// mode with no configured secret, replicas share their HMAC secret
// (compatsecret.go). CACHE_KEY_PREFIX is put in front of it.
const DefaultHMACSecretRedisKey = "envoy-rls:hmac-secret"

// translateRefEnv maps the reference service's environment onto flag
// values (presets), the warnings to log at start, and the settings refused.
func translateRefEnv(o *options.Options, getenv func(string) string) ([]options.Preset, error) {
	r := &refEnv{getenv: getenv, o: o}
	for _, rule := range refRules {
		rule.apply(r)
	}
	o.CompatWarnings = r.warnings
	if len(r.errs) > 0 {
		return r.presets, &options.RefusedError{Err: errors.Join(r.errs...)}
	}
	return r.presets, nil
}

// compatPresets are the serve flags' presets: the translation when
// --env-compat (or ENVOY_RLS_ENV_COMPAT) is on.
func compatPresets(getenv func(string) string) options.Presets {
	return func(o *options.Options, seen map[string]options.Given) ([]options.Preset, error) {
		on := o.EnvCompat
		if _, given := seen["env-compat"]; !given {
			on, _ = strconv.ParseBool(getenv(options.EnvName("env-compat")))
		}
		if !on {
			return nil, nil
		}
		return translateRefEnv(o, getenv)
	}
}

// startCompat logs the reference settings accepted and ignored.
func (s *server) startCompat() error {
	for _, w := range s.opts.CompatWarnings {
		s.log.Warn("reference setting " + w)
	}
	return nil
}
