package options

import (
	"flag"
	"strings"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
)

// CompatName is the name under which the binary reads the reference
// service's (envoyproxy/ratelimit's) environment: started as ratelimit (a
// link to the binary, as /bin/ratelimit in the image), it serves as
// `envoy-rls serve --env-compat`.
const CompatName = "ratelimit"

// referenceOptions are the flags that carry the reference service's
// settings (part of Options).
type referenceOptions struct {
	// EnvCompat reads the reference service's environment variables.
	EnvCompat bool
	// HMACSecretRedisKey, with the Redis store and no configured secret,
	// shares one random secret between replicas under this key.
	HMACSecretRedisKey string
	// HealthcheckRequiresRules makes /healthcheck fail until rules are
	// loaded.
	HealthcheckRequiresRules bool
	// HealthcheckRequiresStore makes /healthcheck fail while the store
	// does not answer its ping.
	HealthcheckRequiresStore bool
	// ShadowAll puts every rule in shadow mode.
	ShadowAll bool
	// DefaultCharge is the charge of the rate limits that set none:
	// allowed or always (limiter.ParseCharge).
	DefaultCharge string
	// Names of the rate-limit headers (rls.HeaderNames).
	LimitHeader, RemainingHeader, ResetHeader string
	// ResponseDynamicMetadata sets every response's dynamic metadata
	// (rls.Config.DynamicMetadata).
	ResponseDynamicMetadata bool
}

// referenceFlags adds the flags of the reference's settings to fs.
func referenceFlags(fs *flag.FlagSet, o *referenceOptions) {
	fs.BoolVar(&o.EnvCompat, "env-compat", false, "also read the environment variables of envoyproxy/ratelimit (docs/migration.md); on when the binary is started as "+CompatName)
	fs.StringVar(&o.HMACSecretRedisKey, "hmac-secret-redis-key", "", "with --store redis and no HMAC secret given: share one random secret between the replicas under this Redis key (created once with SETNX, announced under KEY:in-use; docs/deploy.md, The shared HMAC secret); see docs/migration.md for the risk")
	fs.BoolVar(&o.HealthcheckRequiresRules, "healthcheck-requires-rules", false, "GET /healthcheck answers 500 until rules are loaded (it always does while draining)")
	fs.BoolVar(&o.HealthcheckRequiresStore, "healthcheck-requires-store", false, "GET /healthcheck answers 500 while the store does not answer its ping, as the reference's REDIS_HEALTH_CHECK_ACTIVE_CONNECTION; without it a store outage never fails /healthcheck, whatever --readiness says (a liveness probe on it then restarts every replica during a Redis outage)")
	fs.StringVar(&o.DefaultCharge, "default-charge", limiter.ChargeAllowed.String(), "charge of the rate limits that set none: allowed (a denied request records nothing) or always (its hits are recorded past the limit, up to twice it: post-paid usage such as LLM tokens; the reference's counting, docs/migration.md)")
	fs.BoolVar(&o.ShadowAll, "shadow-mode", false, "every rule in shadow mode, as if each set shadow_mode: true: counted, logged and reported, never denying")
	headers := rls.DefaultHeaderNames()
	fs.StringVar(&o.LimitHeader, "limit-header", headers.Limit, "name of the response header that carries the limit")
	fs.StringVar(&o.RemainingHeader, "remaining-header", headers.Remaining, "name of the response header that carries the remaining quota")
	fs.StringVar(&o.ResetHeader, "reset-header", headers.Reset, "name of the response header that carries the seconds until reset")
	fs.BoolVar(&o.ResponseDynamicMetadata, "response-dynamic-metadata", false, "return in every response's dynamic metadata the domain, each descriptor's entries (request values, which Envoy's access log may write) and what decided it: code, policy, limit name, remaining, reset (docs/envoy.md, Which limit denied a request)")
}

// check refuses every value that cannot do.
func (o *referenceOptions) check(r *refusals) {
	_, err := limiter.ParseCharge(o.DefaultCharge)
	r.check("default-charge", err == nil, "must be allowed or always")
	names := map[string]string{}
	for _, h := range []struct{ flag, value string }{{"limit-header", o.LimitHeader}, {"remaining-header", o.RemainingHeader}, {"reset-header", o.ResetHeader}} {
		prev, dup := names[strings.ToLower(h.value)]
		valid := rls.ValidHeaderName(h.value)
		r.check(h.flag, valid, "must be an HTTP header name (letters, digits and !#$%&'*+-.^_`|~, at most 128)")
		r.check(h.flag, !valid || !dup, "must differ from --"+prev)
		names[strings.ToLower(h.value)] = h.flag
	}
}

// HeaderNames are the rls.HeaderNames of the options.
func (o *referenceOptions) HeaderNames() rls.HeaderNames {
	return rls.HeaderNames{Limit: o.LimitHeader, Remaining: o.RemainingHeader, Reset: o.ResetHeader}
}
