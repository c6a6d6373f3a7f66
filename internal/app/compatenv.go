package app

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/envoy-rls/envoy-rls/internal/options"
)

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
// one rule (TestCompatCoversEveryReferenceSetting), and docs/migration.md
// names each (TestCompatSettingsDocumented). Read only.
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
		if r.getenv(options.SecretEnv) != "" || r.getenv(options.EnvName("hmac-secret-file")) != "" {
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
	{[]string{"USE_STATSD", "STATSD_HOST", "STATSD_PORT", "STATSD_PROTOCOL", "EXTRA_TAGS", "DISABLE_STATS", "STATS_FLUSH_INTERVAL", "NEAR_LIMIT_RATIO",
		"USE_DOG_STATSD", "USE_DOG_STATSD_MOGRIFIERS"}, statsdEnv},
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
