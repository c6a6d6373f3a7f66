package app

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/redis"
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
	XDS    xdsOptions
	Statsd statsdOptions

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
	xdsFlags(fs, &o.XDS)
	statsdFlags(fs, &o.Statsd)
}

// check returns one error per compatibility value refused.
func (o *compatOptions) check(given map[string]given) []error {
	errs := []error{o.grpcTLSOptions.check(given), o.XDS.check(given), o.Statsd.check(given)}
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

// refEnv translates the reference service's environment into flag values.
type refEnv struct {
	getenv   func(string) string
	o        *Options
	presets  []preset
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

// quote is how errors and warnings spell a variable as the user set it.
func (r *refEnv) quote(names ...string) string {
	var parts []string
	for _, n := range names {
		if v, ok := r.get(n); ok {
			parts = append(parts, fmt.Sprintf("%s=%q", n, v))
		}
	}
	return strings.Join(parts, " ")
}

// set gives flag the value, translated from the named variables.
func (r *refEnv) set(flag, value string, from ...string) {
	r.presets = append(r.presets, preset{flag: flag, value: value, from: r.quote(from...)})
}

// def gives flag the reference's default value unless its ENVOY_RLS_*
// variable is set; why says which reference setting it is the default of.
func (r *refEnv) def(flag, value, why string) {
	r.presets = append(r.presets, preset{flag: flag, value: value, from: why, fallback: true})
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
	host, hostSet := r.get(hostVar)
	port, portSet := r.get(portVar)
	if !hostSet && !portSet {
		return "", false
	}
	if !hostSet {
		host = defHost
	}
	if !portSet {
		port = defPort
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		r.refuse(portVar, "must be a port number between 0 and 65535")
		return "", false
	}
	return net.JoinHostPort(host, port), true
}

// Reference defaults that envoy-rls applies in compatibility mode when the
// setting is not given (else its own default holds).
const (
	refRuntimeRoot   = "/srv/runtime_data/current"
	refAppDirectory  = "config"
	refStatsdHost    = "localhost"
	refStatsdPort    = "8125"
	refXDSServerURL  = "localhost:18000"
	refLogLevel      = "warn"
	refHeadersNone   = "none"
	refBackendRedis  = "redis"
	refHeaderLimit   = "RateLimit-Limit"
	refHeaderRemain  = "RateLimit-Remaining"
	refHeaderReset   = "RateLimit-Reset"
	whyNoMetricsPort = "envoy-rls serves its Prometheus metrics at /metrics on the admin port (HOST:PORT), under its own metric names"
)

// refRules is the whole translation, one entry per group of reference
// settings. Every variable of the reference's settings appears in exactly
// one rule (the table test checks it against docs/migration.md). Read only.
var refRules = []refRule{
	{[]string{"PROTO"}, func(r *refEnv) {
		if v, ok := r.get("PROTO"); ok && !strings.EqualFold(v, "tcp") {
			r.refuse("PROTO", "envoy-rls serves its HTTP port over tcp only")
		}
	}},
	{[]string{"HOST", "PORT"}, func(r *refEnv) {
		if a, ok := r.address("HOST", "PORT", "0.0.0.0", "8080"); ok {
			r.set("admin-addr", a, "HOST", "PORT")
		}
	}},
	{[]string{"DEBUG_HOST", "DEBUG_PORT"}, func(r *refEnv) {
		for _, n := range []string{"DEBUG_HOST", "DEBUG_PORT"} {
			if _, ok := r.get(n); ok {
				r.warn(n, "envoy-rls has no separate debug port: profiles are served on the admin port (HOST:PORT) with ENVOY_RLS_PPROF=true, and its metrics at /metrics there")
			}
		}
	}},
	{[]string{"GRPC_HOST", "GRPC_PORT", "GRPC_UDS"}, func(r *refEnv) {
		if p, ok := r.get("GRPC_UDS"); ok {
			r.set("grpc-addr", "unix:"+p, "GRPC_UDS")
			return
		}
		if a, ok := r.address("GRPC_HOST", "GRPC_PORT", "0.0.0.0", "8081"); ok {
			r.set("grpc-addr", a, "GRPC_HOST", "GRPC_PORT")
		}
	}},
	{[]string{"GRPC_MAX_CONNECTION_AGE", "GRPC_MAX_CONNECTION_AGE_GRACE"}, func(r *refEnv) {
		if v, ok := r.get("GRPC_MAX_CONNECTION_AGE"); ok {
			r.set("grpc-max-connection-age", v, "GRPC_MAX_CONNECTION_AGE")
		}
		if v, ok := r.get("GRPC_MAX_CONNECTION_AGE_GRACE"); ok {
			r.set("grpc-max-connection-age-grace", v, "GRPC_MAX_CONNECTION_AGE_GRACE")
		}
	}},
	{[]string{"GRPC_SERVER_USE_TLS", "GRPC_SERVER_TLS_CERT", "GRPC_SERVER_TLS_KEY", "GRPC_CLIENT_TLS_CACERT", "GRPC_CLIENT_TLS_SAN"}, func(r *refEnv) {
		if !r.boolean("GRPC_SERVER_USE_TLS", false) {
			return // the reference reads the files only with TLS on
		}
		for _, m := range []struct{ env, flag string }{
			{"GRPC_SERVER_TLS_CERT", "grpc-tls-cert"}, {"GRPC_SERVER_TLS_KEY", "grpc-tls-key"},
			{"GRPC_CLIENT_TLS_CACERT", "grpc-tls-client-ca"}, {"GRPC_CLIENT_TLS_SAN", "grpc-tls-client-san"},
		} {
			v, ok := r.get(m.env)
			switch {
			case ok:
				r.set(m.flag, v, m.env)
			case m.flag == "grpc-tls-cert" || m.flag == "grpc-tls-key":
				r.refuse(m.env, "GRPC_SERVER_USE_TLS=true needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY (PEM files)")
			}
		}
	}},
	{[]string{"LOG_LEVEL"}, func(r *refEnv) {
		v, ok := r.get("LOG_LEVEL")
		if !ok {
			r.def("log-level", refLogLevel, "LOG_LEVEL unset (the reference's default WARN)")
			return
		}
		levels := map[string]string{"trace": "debug", "debug": "debug", "info": "info", "warn": "warn", "warning": "warn", "error": "error", "fatal": "error", "panic": "error"}
		l, known := levels[strings.ToLower(v)]
		if !known {
			r.refuse("LOG_LEVEL", "must be trace, debug, info, warn, warning, error, fatal or panic (any case)")
			return
		}
		r.set("log-level", l, "LOG_LEVEL")
	}},
	{[]string{"LOG_FORMAT"}, func(r *refEnv) {
		switch v, _ := r.get("LOG_FORMAT"); strings.ToLower(v) {
		case "", "json":
		case "text":
			r.warn("LOG_FORMAT", "envoy-rls writes one JSON object per log line")
		default:
			r.refuse("LOG_FORMAT", "must be text or json")
		}
	}},
	{[]string{"CONFIG_TYPE", "RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_APPDIRECTORY", "RUNTIME_WATCH_ROOT", "RUNTIME_IGNOREDOTFILES",
		"FORCE_START_WITHOUT_INITIAL_CONFIG", "CONFIG_GRPC_XDS_NODE_ID", "CONFIG_GRPC_XDS_NODE_METADATA", "CONFIG_GRPC_XDS_SERVER_URL",
		"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "CONFIG_GRPC_XDS_SERVER_USE_TLS",
		"CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "CONFIG_GRPC_XDS_SERVER_TLS_SAN",
		"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "XDS_CLIENT_BACKOFF_MAX_INTERVAL", "XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "XDS_CLIENT_BACKOFF_JITTER"},
		configSource},
	{[]string{"BACKEND_TYPE", "REDIS_SOCKET_TYPE", "REDIS_TYPE", "REDIS_URL", "REDIS_AUTH", "REDIS_TLS", "REDIS_TLS_CLIENT_CERT",
		"REDIS_TLS_CLIENT_KEY", "REDIS_TLS_CACERT", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "REDIS_POOL_SIZE", "REDIS_PIPELINE_WINDOW",
		"REDIS_PIPELINE_LIMIT", "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "MEMCACHE_HOST_PORT", "MEMCACHE_MAX_IDLE_CONNS", "MEMCACHE_SRV",
		"MEMCACHE_SRV_REFRESH", "MEMCACHE_TLS"},
		backend},
	{[]string{"REDIS_PERSECOND", "REDIS_PERSECOND_SOCKET_TYPE", "REDIS_PERSECOND_TYPE", "REDIS_PERSECOND_URL", "REDIS_PERSECOND_POOL_SIZE",
		"REDIS_PERSECOND_AUTH", "REDIS_PERSECOND_TLS", "REDIS_PERSECOND_PIPELINE_WINDOW", "REDIS_PERSECOND_PIPELINE_LIMIT"}, func(r *refEnv) {
		if r.boolean("REDIS_PERSECOND", false) {
			r.refuse("REDIS_PERSECOND", "envoy-rls keeps every limit in one Redis deployment: unset it and point REDIS_URL at that deployment (the per-second limits then live there too)")
		}
	}},
	{[]string{"CACHE_KEY_PREFIX"}, func(r *refEnv) {
		prefix, _ := r.get("CACHE_KEY_PREFIX")
		if r.getenv(SecretEnv) != "" || r.getenv(envName("hmac-secret-file")) != "" {
			if prefix != "" {
				r.warn("CACHE_KEY_PREFIX", "envoy-rls keys are HMAC digests under the configured secret; deployments sharing one Redis stay apart when their secrets differ")
			}
			return
		}
		// The prefix names the shared secret: deployments with different
		// prefixes get different secrets, hence disjoint keys.
		r.def("hmac-secret-redis-key", prefix+DefaultHMACSecretRedisKey, r.quote("CACHE_KEY_PREFIX"))
	}},
	{[]string{"LOCAL_CACHE_SIZE_IN_BYTES"}, func(r *refEnv) {
		v, ok := r.get("LOCAL_CACHE_SIZE_IN_BYTES")
		if !ok {
			return
		}
		n, err := strconv.ParseInt(v, 10, 64)
		switch {
		case err != nil || n < 0:
			r.refuse("LOCAL_CACHE_SIZE_IN_BYTES", "must be a size in bytes, 0 or more")
		case n > 0:
			r.set("local-cache", "true", "LOCAL_CACHE_SIZE_IN_BYTES")
		}
	}},
	{[]string{"SHADOW_MODE"}, func(r *refEnv) {
		if r.boolean("SHADOW_MODE", false) {
			r.set("shadow-mode", "true", "SHADOW_MODE")
		}
	}},
	{[]string{"USE_STATSD", "STATSD_HOST", "STATSD_PORT", "EXTRA_TAGS", "DISABLE_STATS", "STATS_FLUSH_INTERVAL", "NEAR_LIMIT_RATIO",
		"USE_DOG_STATSD", "USE_DOG_STATSD_MOGRIFIERS"}, statsd},
	{[]string{"USE_PROMETHEUS", "PROMETHEUS_ADDR", "PROMETHEUS_PATH", "PROMETHEUS_MAPPER_YAML"}, func(r *refEnv) {
		if r.boolean("USE_PROMETHEUS", false) {
			r.warn("USE_PROMETHEUS", whyNoMetricsPort+"; PROMETHEUS_ADDR, PROMETHEUS_PATH and PROMETHEUS_MAPPER_YAML are not used")
		}
	}},
	{[]string{"LIMIT_RESPONSE_HEADERS_ENABLED", "LIMIT_LIMIT_HEADER", "LIMIT_REMAINING_HEADER", "LIMIT_RESET_HEADER"}, responseHeaders},
	{[]string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT"}, func(r *refEnv) {
		if r.explicitFalse("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT") {
			r.warn("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "a denied request never consumes quota in envoy-rls (what true asks for)")
		}
	}},
	{[]string{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED"}, func(r *refEnv) {
		if r.boolean("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", false) {
			r.set("healthcheck-requires-rules", "true", "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED")
		}
	}},
	{[]string{"EXPIRATION_JITTER_MAX_SECONDS"}, func(r *refEnv) {
		if _, ok := r.get("EXPIRATION_JITTER_MAX_SECONDS"); ok {
			r.warn("EXPIRATION_JITTER_MAX_SECONDS", "envoy-rls gives each key a finite lifetime of its own; no jitter is needed")
		}
	}},
	{[]string{"MERGE_DOMAIN_CONFIG"}, func(r *refEnv) {
		if r.boolean("MERGE_DOMAIN_CONFIG", false) {
			r.warn("MERGE_DOMAIN_CONFIG", "envoy-rls does not merge: a domain defined in two rule files is refused at load, naming both files")
		}
	}},
	// Read by tracing.go (readTracing) from the environment itself.
	{[]string{"TRACING_ENABLED", "TRACING_SERVICE_NAME", "TRACING_SERVICE_NAMESPACE", "TRACING_SERVICE_INSTANCE_ID",
		"TRACING_EXPORTER_PROTOCOL", "TRACING_SAMPLING_RATE"}, func(*refEnv) {}},
}

// configSource maps CONFIG_TYPE and the rule directory or the xDS client.
func configSource(r *refEnv) {
	typ, _ := r.get("CONFIG_TYPE")
	switch strings.ToUpper(typ) {
	case "", "FILE":
		root, rootSet := r.get("RUNTIME_ROOT")
		sub, subSet := r.get("RUNTIME_SUBDIRECTORY")
		app, appSet := r.get("RUNTIME_APPDIRECTORY")
		if !rootSet {
			root = refRuntimeRoot
		}
		if !appSet {
			app = refAppDirectory
		}
		dir := filepath.Join(root, sub, app)
		if rootSet || subSet || appSet {
			r.set("config", dir, "RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_APPDIRECTORY")
		} else {
			r.def("config", dir, "RUNTIME_ROOT unset (the reference's default "+dir+")")
		}
		r.boolean("RUNTIME_WATCH_ROOT", true)
		if r.explicitFalse("RUNTIME_IGNOREDOTFILES") {
			r.warn("RUNTIME_IGNOREDOTFILES", "envoy-rls always skips files whose names start with a dot (editors' temporary files)")
		}
	case "GRPC_XDS_SOTW":
		r.set("config-source", ConfigSourceXDS, "CONFIG_TYPE")
		url, ok := r.get("CONFIG_GRPC_XDS_SERVER_URL")
		if !ok {
			url = refXDSServerURL
		}
		r.set("xds-server", url, "CONFIG_GRPC_XDS_SERVER_URL")
		for _, m := range []struct{ env, flag string }{
			{"CONFIG_GRPC_XDS_NODE_ID", "xds-node-id"}, {"CONFIG_GRPC_XDS_NODE_METADATA", "xds-node-metadata"},
			{"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "xds-retry-interval"},
			{"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "xds-backoff-initial"}, {"XDS_CLIENT_BACKOFF_MAX_INTERVAL", "xds-backoff-max"},
			{"FORCE_START_WITHOUT_INITIAL_CONFIG", "force-start-without-initial-config"},
		} {
			if v, ok := r.get(m.env); ok {
				r.set(m.flag, v, m.env)
			}
		}
		if v, ok := r.get("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS"); ok {
			for _, h := range strings.Split(v, ",") {
				if h = strings.TrimSpace(h); h != "" {
					r.set("xds-header", h, "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS")
				}
			}
		}
		if r.boolean("CONFIG_GRPC_XDS_SERVER_USE_TLS", false) {
			r.set("xds-tls", "true", "CONFIG_GRPC_XDS_SERVER_USE_TLS")
			for _, m := range []struct{ env, flag string }{
				{"CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "xds-tls-cert"}, {"CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "xds-tls-key"},
				{"CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "xds-tls-ca"}, {"CONFIG_GRPC_XDS_SERVER_TLS_SAN", "xds-tls-san"},
			} {
				if v, ok := r.get(m.env); ok {
					r.set(m.flag, v, m.env)
				}
			}
		}
		for _, n := range []string{"XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "XDS_CLIENT_BACKOFF_JITTER"} {
			if _, ok := r.get(n); ok {
				r.warn(n, "the xDS client always spreads its reconnection waits at random")
			}
		}
	default:
		r.refuse("CONFIG_TYPE", "must be FILE or GRPC_XDS_SOTW")
	}
}

// backend maps BACKEND_TYPE and the Redis settings.
func backend(r *refEnv) {
	bt, _ := r.get("BACKEND_TYPE")
	switch strings.ToLower(bt) {
	case "":
		r.def("store", refBackendRedis, "BACKEND_TYPE unset (the reference's default redis)")
		if s := r.getenv(envName("store")); s != "" && s != "redis" {
			return
		}
	case "redis":
		r.set("store", "redis", "BACKEND_TYPE")
	case "memcache":
		r.refuse("BACKEND_TYPE", "envoy-rls has no memcache backend; use redis (BACKEND_TYPE=redis with REDIS_URL)")
		return
	default:
		r.refuse("BACKEND_TYPE", "must be redis (envoy-rls has no memcache backend)")
		return
	}
	redisAddress(r)
	if auth := r.getenv("REDIS_AUTH"); auth != "" {
		// It replaces ENVOY_RLS_REDIS_PASSWORD_FILE (a command-line
		// --redis-password-file still wins).
		r.set("redis-password-file", "", "REDIS_AUTH")
		if user, pass, ok := strings.Cut(auth, ":"); ok {
			r.set("redis-username", user, "REDIS_AUTH")
			r.o.redisPassword = pass
		} else {
			r.o.redisPassword = auth
		}
	}
	if r.boolean("REDIS_TLS", false) {
		r.set("redis-tls", "true", "REDIS_TLS")
		for _, m := range []struct{ env, flag string }{
			{"REDIS_TLS_CLIENT_CERT", "redis-tls-cert"}, {"REDIS_TLS_CLIENT_KEY", "redis-tls-key"}, {"REDIS_TLS_CACERT", "redis-tls-ca"},
		} {
			if v, ok := r.get(m.env); ok {
				r.set(m.flag, v, m.env)
			}
		}
		if r.boolean("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", false) {
			r.set("redis-tls-skip-hostname-verification", "true", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION")
		}
	}
	if _, ok := r.get("REDIS_POOL_SIZE"); ok {
		r.warn("REDIS_POOL_SIZE", "envoy-rls pipelines every call over a few connections per node (ENVOY_RLS_REDIS_POOL_SIZE, default "+strconv.Itoa(DefaultRedisPoolSize)+")")
	}
	for _, n := range []string{"REDIS_PIPELINE_WINDOW", "REDIS_PIPELINE_LIMIT"} {
		if v, ok := r.get(n); ok && v != "0" && v != "0s" {
			r.warn(n, "envoy-rls pipelines automatically: calls that arrive together share one write (ENVOY_RLS_REDIS_MAX_FLUSH_DELAY bounds the wait)")
		}
	}
	if r.boolean("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", false) {
		r.set("readiness", ReadinessStore, "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION")
	}
}

// redisAddress maps REDIS_SOCKET_TYPE, REDIS_TYPE and REDIS_URL.
func redisAddress(r *refEnv) {
	url, ok := r.get("REDIS_URL")
	if !ok {
		if r.getenv(envName("redis-addr")) == "" {
			r.refuse("REDIS_URL", "envoy-rls needs the Redis address: host:port (REDIS_TYPE=SINGLE), seeds host:port,... (CLUSTER) or master,sentinel:port,... (SENTINEL)")
		}
		return
	}
	socket, socketSet := r.get("REDIS_SOCKET_TYPE")
	if !socketSet {
		// The reference's default is unix; a URL that is not a path is
		// what REDIS_SOCKET_TYPE=tcp reads.
		socket = "tcp"
		if strings.HasPrefix(url, "/") {
			socket = "unix"
		}
	}
	switch strings.ToLower(socket) {
	case "tcp":
	case "unix":
		if typ, _ := r.get("REDIS_TYPE"); typ != "" && !strings.EqualFold(typ, "single") {
			r.refuse("REDIS_TYPE", "a Unix socket (REDIS_SOCKET_TYPE=unix) reaches one server: REDIS_TYPE must be SINGLE")
			return
		}
		if !strings.HasPrefix(url, "/") {
			r.refuse("REDIS_URL", "REDIS_SOCKET_TYPE=unix takes the absolute path of the socket")
			return
		}
		r.set("redis-mode", "standalone", "REDIS_SOCKET_TYPE")
		r.set("redis-addr", url, "REDIS_URL")
		return
	default:
		r.refuse("REDIS_SOCKET_TYPE", "must be tcp or unix")
		return
	}
	var addrs []string
	for _, a := range strings.Split(url, ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	typ, _ := r.get("REDIS_TYPE")
	switch strings.ToLower(typ) {
	case "", "single":
		if len(addrs) != 1 {
			r.refuse("REDIS_URL", "REDIS_TYPE=SINGLE takes one host:port")
			return
		}
		r.set("redis-mode", "standalone", "REDIS_TYPE")
		r.set("redis-addr", addrs[0], "REDIS_URL")
	case "cluster":
		r.set("redis-mode", "cluster", "REDIS_TYPE")
		r.set("redis-addr", strings.Join(addrs, ","), "REDIS_URL")
	case "sentinel":
		if len(addrs) < 2 {
			r.refuse("REDIS_URL", "REDIS_TYPE=SENTINEL takes the master name, then the sentinels: master,host:port[,host:port...]")
			return
		}
		r.set("redis-mode", "sentinel", "REDIS_TYPE")
		r.set("redis-sentinel-master", addrs[0], "REDIS_URL")
		r.set("redis-addr", strings.Join(addrs[1:], ","), "REDIS_URL")
	default:
		r.refuse("REDIS_TYPE", "must be SINGLE, SENTINEL or CLUSTER (any case)")
	}
}

// statsd maps the statsd settings.
func statsd(r *refEnv) {
	if r.boolean("USE_DOG_STATSD", false) {
		r.refuse("USE_DOG_STATSD", "envoy-rls sends plain statsd (the reference's USE_STATSD names); unset it")
	}
	if _, ok := r.get("USE_DOG_STATSD_MOGRIFIERS"); ok {
		r.warn("USE_DOG_STATSD_MOGRIFIERS", "there is no DogStatsD output to rewrite")
	}
	if v, ok := r.get("NEAR_LIMIT_RATIO"); ok {
		r.set("statsd-near-limit-ratio", v, "NEAR_LIMIT_RATIO")
	}
	disabled := r.boolean("DISABLE_STATS", false)
	use := r.boolean("USE_STATSD", true)
	if disabled || !use {
		return
	}
	host, hostSet := r.get("STATSD_HOST")
	port, portSet := r.get("STATSD_PORT")
	if !hostSet {
		host = refStatsdHost
	}
	if !portSet {
		port = refStatsdPort
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		r.refuse("STATSD_PORT", "must be a port number between 1 and 65535")
	} else if _, useSet := r.get("USE_STATSD"); useSet || hostSet || portSet {
		r.set("statsd-addr", net.JoinHostPort(host, port), "USE_STATSD", "STATSD_HOST", "STATSD_PORT")
	} else {
		r.def("statsd-addr", net.JoinHostPort(host, port), "USE_STATSD unset (the reference's default true, to localhost:8125)")
	}
	if v, ok := r.get("EXTRA_TAGS"); ok {
		r.set("statsd-extra-tags", v, "EXTRA_TAGS")
	}
	if v, ok := r.get("STATS_FLUSH_INTERVAL"); ok {
		r.set("statsd-flush-interval", v, "STATS_FLUSH_INTERVAL")
	}
}

// responseHeaders maps LIMIT_RESPONSE_HEADERS_ENABLED and the header names.
func responseHeaders(r *refEnv) {
	_, set := r.get("LIMIT_RESPONSE_HEADERS_ENABLED")
	on := r.boolean("LIMIT_RESPONSE_HEADERS_ENABLED", false)
	switch {
	case !set:
		r.def("default-headers", refHeadersNone, "LIMIT_RESPONSE_HEADERS_ENABLED unset (the reference's default false: no headers)")
	case !on:
		r.set("default-headers", refHeadersNone, "LIMIT_RESPONSE_HEADERS_ENABLED")
	default:
		r.set("default-headers", "full", "LIMIT_RESPONSE_HEADERS_ENABLED")
	}
	if !on {
		return // the reference reads the names only with the headers on
	}
	for _, h := range []struct{ env, def, flag string }{
		{"LIMIT_LIMIT_HEADER", refHeaderLimit, "limit-header"}, {"LIMIT_REMAINING_HEADER", refHeaderRemain, "remaining-header"},
		{"LIMIT_RESET_HEADER", refHeaderReset, "reset-header"},
	} {
		if v, ok := r.get(h.env); ok {
			r.set(h.flag, v, h.env)
		} else {
			r.def(h.flag, h.def, h.env+" unset (the reference's default "+h.def+")")
		}
	}
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

// startCompat logs the reference settings accepted and ignored, and
// refuses the options this build parses but cannot serve yet.
func (s *server) startCompat() error {
	for _, w := range s.opts.compatWarnings {
		s.log.Warn("reference setting " + w)
	}
	if s.opts.XDS.ConfigSource == ConfigSourceXDS {
		return fmt.Errorf("%s: this build has no xDS client; serve rules from files (--config, or CONFIG_TYPE=FILE)", label("config-source", s.opts.given))
	}
	if s.opts.Statsd.StatsdAddr != "" {
		s.log.Warn("statsd output is not part of this build: " + label("statsd-addr", s.opts.given) + " is ignored")
	}
	return nil
}

// Waits between attempts to read the shared HMAC secret at start, and the
// period at which a running replica stores it again should Redis have lost
// it (a restart without persistence, a flush).
const (
	sharedSecretFirstWait = 100 * time.Millisecond
	sharedSecretMaxWait   = 5 * time.Second
	sharedSecretRecheck   = 30 * time.Second
	sharedSecretTimeout   = 5 * time.Second
)

// msgSharedSecret is the start-up warning of a secret shared through Redis.
const msgSharedSecret = "no HMAC secret configured: the replicas share a random secret stored in Redis under --hmac-secret-redis-key; " +
	"whoever can read that Redis can read the secret and test guesses of low-entropy descriptor values (IP addresses, user IDs) against the keys. " +
	"Configure a secret (ENVOY_RLS_HMAC_SECRET or --hmac-secret-file) to keep it out of Redis"

// usesSharedSecret reports whether the HMAC secret is shared through
// Redis: the Redis store, the key set and no secret configured.
func usesSharedSecret(o *Options, getenv func(string) string) bool {
	return o.Store == "redis" && o.HMACSecretRedisKey != "" && o.HMACSecretFile == "" && getenv(SecretEnv) == ""
}

// fetchSharedSecret returns the secret the replicas share under
// --hmac-secret-redis-key, offering a fresh random one. It retries until
// Redis answers or ctx ends: without the secret no key can be computed.
func (s *server) fetchSharedSecret(ctx context.Context) ([]byte, error) {
	cfg, err := s.opts.redisConfig()
	if err != nil {
		return nil, fmt.Errorf("redis store: %w", err)
	}
	candidate := make([]byte, 32)
	if _, err := rand.Read(candidate); err != nil {
		return nil, fmt.Errorf("generating a random HMAC secret: %w", err)
	}
	wait := sharedSecretFirstWait
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, sharedSecretTimeout)
		secret, err := redis.SharedSecret(actx, cfg, s.opts.HMACSecretRedisKey, candidate)
		cancel()
		if err == nil {
			if len(secret) < descriptors.MinSecretLength {
				return nil, fmt.Errorf("%s: the Redis key holds %d bytes, not a secret of at least %d: delete the key or configure a secret", label("hmac-secret-redis-key", s.opts.given), len(secret), descriptors.MinSecretLength)
			}
			return secret, nil
		}
		s.log.Warn("cannot read the shared HMAC secret from Redis yet; retrying", zap.Int("attempt", attempt), zap.Duration("retry_in", wait), zap.Error(err))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("stopped before the shared HMAC secret could be read from Redis: %w", context.Cause(ctx))
		case <-t.C:
		}
		wait = min(2*wait, sharedSecretMaxWait)
	}
}

// keepSharedSecret stores secret again under the key whenever Redis has
// lost it, so that a replica starting later gets the same one; it logs an
// error if the key holds another secret (the replicas then disagree and
// each keeps its own count until restarted).
func (s *server) keepSharedSecret(ctx context.Context, wg *sync.WaitGroup, secret []byte, period time.Duration) {
	cfg, err := s.opts.redisConfig()
	if err != nil {
		return // checked at start
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		every(ctx, period, func(time.Time) {
			actx, cancel := context.WithTimeout(ctx, sharedSecretTimeout)
			defer cancel()
			got, err := redis.SharedSecret(actx, cfg, s.opts.HMACSecretRedisKey, secret)
			switch {
			case err != nil:
				s.log.Warn("cannot check the shared HMAC secret in Redis", zap.Error(err))
			case !bytes.Equal(got, secret):
				s.log.Error("the shared HMAC secret in Redis is not this replica's: replicas started since Redis lost it count separately; restart the replicas (or configure a secret)",
					zap.String("key", s.opts.HMACSecretRedisKey))
			}
		})
	}()
}
