package app

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/envoy-rls/envoy-rls/pkg/rls"
)

// CompatName is the name under which the binary reads the reference
// service's (envoyproxy/ratelimit's) environment: started as ratelimit (a
// link to the binary, as /bin/ratelimit in the image), it serves as
// `envoy-rls serve --env-compat`.
const CompatName = "ratelimit"

// DefaultHMACSecretRedisKey is the Redis key under which, in compatibility
// mode with no configured secret, replicas share their HMAC secret
// (compatsecret.go). CACHE_KEY_PREFIX is put in front of it.
const DefaultHMACSecretRedisKey = "envoy-rls:hmac-secret"

// compatOptions are the flags of compatibility with the reference
// service's deployments (part of Options).
type compatOptions struct {
	// EnvCompat reads the reference service's environment variables.
	EnvCompat bool
	// HMACSecretRedisKey, with the Redis store and no configured secret,
	// shares one random secret between replicas under this key.
	HMACSecretRedisKey string
	// HealthcheckRequiresRules makes /healthcheck fail until rules are
	// loaded.
	HealthcheckRequiresRules bool
	// ShadowAll puts every rule in shadow mode.
	ShadowAll bool
	// Names of the rate-limit headers (rls.HeaderNames).
	LimitHeader, RemainingHeader, ResetHeader string
	grpcTLSOptions

	// redisPassword is REDIS_AUTH's password (no flag: the flags take a
	// password file).
	redisPassword string
	// compatWarnings are the reference settings accepted and ignored,
	// logged once at start.
	compatWarnings []string
}

// compatFlags adds the compatibility flags to fs.
func compatFlags(fs *flag.FlagSet, o *compatOptions) {
	fs.BoolVar(&o.EnvCompat, "env-compat", false, "also read the environment variables of envoyproxy/ratelimit (docs/migration.md); on when the binary is started as "+CompatName)
	fs.StringVar(&o.HMACSecretRedisKey, "hmac-secret-redis-key", "", "with --store redis and no HMAC secret given: share one random secret between the replicas under this Redis key (created once with SET NX); see docs/migration.md for the risk")
	fs.BoolVar(&o.HealthcheckRequiresRules, "healthcheck-requires-rules", false, "GET /healthcheck answers 500 until rules are loaded (it always does while draining)")
	fs.BoolVar(&o.ShadowAll, "shadow-mode", false, "every rule in shadow mode, as if each set shadow_mode: true: counted, logged and reported, never denying")
	fs.StringVar(&o.LimitHeader, "limit-header", rls.HeaderLimit, "name of the response header that carries the limit")
	fs.StringVar(&o.RemainingHeader, "remaining-header", rls.HeaderRemaining, "name of the response header that carries the remaining quota")
	fs.StringVar(&o.ResetHeader, "reset-header", rls.HeaderReset, "name of the response header that carries the seconds until reset")
	grpcTLSFlags(fs, &o.grpcTLSOptions)
}

// check returns one error per compatibility value refused.
func (o *compatOptions) check(given map[string]given) []error {
	errs := []error{o.grpcTLSOptions.check(given)}
	names := map[string]string{}
	for _, h := range []struct{ flag, value string }{{"limit-header", o.LimitHeader}, {"remaining-header", o.RemainingHeader}, {"reset-header", o.ResetHeader}} {
		switch prev, dup := names[strings.ToLower(h.value)]; {
		case !rls.ValidHeaderName(h.value):
			errs = append(errs, fmt.Errorf("%s: must be an HTTP header name (letters, digits and !#$%%&'*+-.^_`|~, at most 128)", label(h.flag, given)))
		case dup:
			errs = append(errs, fmt.Errorf("%s: must differ from --%s", label(h.flag, given), prev))
		}
		names[strings.ToLower(h.value)] = h.flag
	}
	return errs
}

// headerNames are the rls.HeaderNames of the options.
func (o *compatOptions) headerNames() rls.HeaderNames {
	return rls.HeaderNames{Limit: o.LimitHeader, Remaining: o.RemainingHeader, Reset: o.ResetHeader}
}

// translateRefEnv maps the reference service's environment onto flag
// values (presets), the warnings to log at start, and the settings refused.
func translateRefEnv(o *Options, getenv func(string) string) ([]preset, error) {
	r := &refEnv{getenv: getenv, o: o}
	for _, rule := range refRules {
		rule.apply(r)
	}
	o.compatWarnings = r.warnings
	if len(r.errs) > 0 {
		return r.presets, refusedError{errors.Join(r.errs...)}
	}
	return r.presets, nil
}

// refusedError holds the reference settings refused. When there are any,
// serve reports them alone: the option checks would only repeat them in
// envoy-rls's terms (a missing address for a refused REDIS_URL).
type refusedError struct{ error }

func (e refusedError) Unwrap() error { return e.error }

// compatPresets is parseFlagsWith's presets function of the serve flags:
// the translation when --env-compat (or ENVOY_RLS_ENV_COMPAT) is on.
func compatPresets(o *Options, getenv func(string) string) func(map[string]given) ([]preset, error) {
	return func(seen map[string]given) ([]preset, error) {
		on := o.EnvCompat
		if _, given := seen["env-compat"]; !given {
			on, _ = strconv.ParseBool(getenv(envName("env-compat")))
		}
		if !on {
			return nil, nil
		}
		return translateRefEnv(o, getenv)
	}
}

// startCompat logs the reference settings accepted and ignored.
func (s *server) startCompat() error {
	for _, w := range s.opts.compatWarnings {
		s.log.Warn("reference setting " + w)
	}
	return nil
}
