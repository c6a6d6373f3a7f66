// Package compat translates the environment of the reference service
// (envoyproxy/ratelimit) into serve's options: a table of rules, one per
// group of reference settings, each setting a flag, warning that a setting
// is accepted and ignored, or refusing it; and, with the Redis store and
// no configured secret, the HMAC secret the replicas share through Redis.
package compat

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/envoy-rls/envoy-rls/internal/options"
	"github.com/envoy-rls/envoy-rls/internal/redact"
)

// DefaultHMACSecretRedisKey is the Redis key under which, in compatibility
// mode with no configured secret, replicas share their HMAC secret
// (secret.go). CACHE_KEY_PREFIX is put in front of it.
const DefaultHMACSecretRedisKey = "envoy-rls:hmac-secret"

// translate maps the reference service's environment onto flag values
// (presets), the warnings to log at start, and the settings refused.
func translate(o *options.Options, getenv func(string) string) ([]options.Preset, error) {
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

// Presets are the serve flags' presets (options.Serve): the translation of
// the reference service's environment when --env-compat (or
// ENVOY_RLS_ENV_COMPAT) is on.
func Presets(getenv func(string) string) options.Presets {
	return func(o *options.Options, seen map[string]options.Given) ([]options.Preset, error) {
		on := o.EnvCompat
		if _, given := seen["env-compat"]; !given {
			on, _ = strconv.ParseBool(getenv(options.EnvName("env-compat")))
		}
		if !on {
			return nil, nil
		}
		return translate(o, getenv)
	}
}

// refEnv translates the reference service's environment into flag values.
type refEnv struct {
	getenv   func(string) string
	o        *options.Options
	presets  []options.Preset
	warnings []string
	errs     []error
}

// refRule maps a group of reference variables (vars, each read by this
// rule only) onto envoy-rls's options.
type refRule struct {
	vars  []string
	apply func(r *refEnv)
}

// get is a variable's value, trimmed; ok is false when it is unset or empty
// (the reference treats empty as unset).
func (r *refEnv) get(name string) (string, bool) {
	v := strings.TrimSpace(r.getenv(name))
	return v, v != ""
}

// getOr is get with def in place of an unset value; set says whether the
// variable was set.
func (r *refEnv) getOr(name, def string) (v string, set bool) {
	if v, set = r.get(name); !set {
		v = def
	}
	return v, set
}

// quote is how errors and warnings spell a variable as the user set it,
// without the credentials it carries (redact.Setting).
func (r *refEnv) quote(names ...string) string {
	var parts []string
	for _, n := range names {
		if v, ok := r.get(n); ok {
			parts = append(parts, fmt.Sprintf("%s=%q", n, redact.Setting(n, v)))
		}
	}
	return strings.Join(parts, " ")
}

// set gives flag the value, translated from the named variables.
func (r *refEnv) set(flag, value string, from ...string) {
	r.presets = append(r.presets, options.Preset{Flag: flag, Value: value, From: r.quote(from...)})
}

// def gives flag the reference's default value unless its ENVOY_RLS_*
// variable is set; why says which reference setting it is the default of.
func (r *refEnv) def(flag, value, why string) {
	r.presets = append(r.presets, options.Preset{Flag: flag, Value: value, From: why, Fallback: true})
}

// warn records a setting accepted and ignored, with the reason it is
// harmless.
func (r *refEnv) warn(name, why string) {
	r.warnings = append(r.warnings, r.quote(name)+": ignored: "+why)
}

// refuse records a setting that stops the start.
func (r *refEnv) refuse(name, why string) {
	q := r.quote(name)
	if q == "" {
		q = name + " is not set"
	}
	r.errs = append(r.errs, fmt.Errorf("%s: %s", q, why))
}

// boolean reads a boolean variable; def when unset. A value that is not a
// boolean is refused.
func (r *refEnv) boolean(name string, def bool) bool {
	v, ok := r.get(name)
	if !ok {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		r.refuse(name, "must be true or false")
		return def
	}
	return b
}

// explicitFalse is true when name is set to a false boolean.
func (r *refEnv) explicitFalse(name string) bool {
	_, ok := r.get(name)
	return ok && !r.boolean(name, true)
}

// address joins the host and port variables of a listener, the reference's
// defaults filling the one not set.
func (r *refEnv) address(hostVar, portVar, defHost, defPort string) (string, bool) {
	host, hostSet := r.getOr(hostVar, defHost)
	port, portSet := r.getOr(portVar, defPort)
	if !hostSet && !portSet {
		return "", false
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		r.refuse(portVar, "must be a port number between 0 and 65535")
		return "", false
	}
	return net.JoinHostPort(host, port), true
}
