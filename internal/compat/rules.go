package compat

import (
	"net"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/envoy-rls/envoy-rls/internal/options"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/redis"
)

// Reference defaults that envoy-rls applies in compatibility mode when the
// setting is not given (else its own default holds).
const (
	refRuntimeRoot    = "/srv/runtime_data/current"
	refAppDirectory   = "config"
	refStatsdHost     = "localhost"
	refStatsdPort     = "8125"
	refXDSServerURL   = "localhost:18000"
	refLogLevel       = "warn"
	refHeadersNone    = "none"
	refBackendRedis   = "redis"
	refHeaderLimit    = "RateLimit-Limit"
	refHeaderRemain   = "RateLimit-Remaining"
	refHeaderReset    = "RateLimit-Reset"
	refPrometheusAddr = ":9090"
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
	{[]string{"RESPONSE_DYNAMIC_METADATA"}, func(r *refEnv) {
		if r.boolean("RESPONSE_DYNAMIC_METADATA", false) {
			r.set("response-dynamic-metadata", "true", "RESPONSE_DYNAMIC_METADATA")
		}
	}},
	{[]string{"USE_STATSD", "STATSD_HOST", "STATSD_PORT", "STATSD_PROTOCOL", "EXTRA_TAGS", "DISABLE_STATS", "STATS_FLUSH_INTERVAL", "NEAR_LIMIT_RATIO",
		"USE_DOG_STATSD", "USE_DOG_STATSD_MOGRIFIERS"}, statsdEnv},
	{[]string{"USE_PROMETHEUS", "PROMETHEUS_ADDR", "PROMETHEUS_PATH", "PROMETHEUS_MAPPER_YAML"}, prometheusEnv},
	{[]string{"LIMIT_RESPONSE_HEADERS_ENABLED", "LIMIT_LIMIT_HEADER", "LIMIT_REMAINING_HEADER", "LIMIT_RESET_HEADER"}, responseHeaders},
	// The reference counts the hits of a request over its limit unless
	// told to stop: charge: always for every rule (what post-paid budgets,
	// such as LLM tokens charged at stream end, rely on), or today's
	// counting with true.
	{[]string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT"}, func(r *refEnv) {
		switch _, set := r.get("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT"); {
		case !set:
			r.def("default-charge", "always", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT unset: the reference counts the hits of denied requests")
		case r.boolean("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", false):
			r.set("default-charge", "allowed", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT")
		default:
			r.set("default-charge", "always", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT")
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
	// Read by the tracing setup (internal/tracing) from the environment
	// itself.
	{[]string{"TRACING_ENABLED", "TRACING_SERVICE_NAME", "TRACING_SERVICE_NAMESPACE", "TRACING_SERVICE_INSTANCE_ID",
		"TRACING_EXPORTER_PROTOCOL", "TRACING_SAMPLING_RATE"}, func(*refEnv) {}},
}

// configSource maps CONFIG_TYPE and the rule directory or the xDS client.
func configSource(r *refEnv) {
	typ, _ := r.get("CONFIG_TYPE")
	switch strings.ToUpper(typ) {
	case "", "FILE":
		root, rootSet := r.getOr("RUNTIME_ROOT", refRuntimeRoot)
		sub, subSet := r.get("RUNTIME_SUBDIRECTORY")
		app, appSet := r.getOr("RUNTIME_APPDIRECTORY", refAppDirectory)
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
		r.set("config-source", options.SourceXDS, "CONFIG_TYPE")
		if url, ok := r.get("CONFIG_GRPC_XDS_SERVER_URL"); ok {
			r.set("xds-server", url, "CONFIG_GRPC_XDS_SERVER_URL")
		} else {
			r.def("xds-server", refXDSServerURL, "CONFIG_GRPC_XDS_SERVER_URL unset (the reference's default "+refXDSServerURL+")")
		}
		for _, m := range []struct{ env, flag string }{
			{"CONFIG_GRPC_XDS_NODE_ID", "xds-node-id"}, {"CONFIG_GRPC_XDS_NODE_METADATA", "xds-node-metadata"},
			{"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "xds-retry-interval"},
			{"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "xds-retry-interval"}, {"XDS_CLIENT_BACKOFF_MAX_INTERVAL", "xds-retry-max-interval"},
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
		if s := r.getenv(options.EnvName("store")); s != "" && s != "redis" {
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
			r.o.RedisPassword = pass
		} else {
			r.o.RedisPassword = auth
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
		r.warn("REDIS_POOL_SIZE", "envoy-rls pipelines every call over a few connections per node (ENVOY_RLS_REDIS_POOL_SIZE, default "+strconv.Itoa(redis.DefaultPoolSize)+")")
	}
	for _, n := range []string{"REDIS_PIPELINE_WINDOW", "REDIS_PIPELINE_LIMIT"} {
		if v, ok := r.get(n); ok && v != "0" && v != "0s" {
			r.warn(n, "envoy-rls pipelines automatically: calls that arrive together share one write (ENVOY_RLS_REDIS_MAX_FLUSH_DELAY bounds the wait)")
		}
	}
	if r.boolean("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", false) {
		// The reference has one health state, which its HTTP probe and its
		// gRPC health answer: with this setting it fails while Redis is
		// down. Its probe here is /healthcheck; /readyz follows too, so
		// that a deployment moved to the native probes keeps the meaning.
		r.set("healthcheck-requires-store", "true", "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION")
		r.set("readiness", options.ReadinessStore, "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION")
	}
}

// redisAddress maps REDIS_SOCKET_TYPE, REDIS_TYPE and REDIS_URL.
func redisAddress(r *refEnv) {
	url, ok := r.get("REDIS_URL")
	if !ok {
		if r.getenv(options.EnvName("redis-addr")) == "" {
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

// statsdEnv maps the statsd settings.
func statsdEnv(r *refEnv) {
	if r.boolean("USE_DOG_STATSD", false) {
		r.refuse("USE_DOG_STATSD", "envoy-rls sends plain statsd (the reference's USE_STATSD names); unset it")
	}
	if _, ok := r.get("USE_DOG_STATSD_MOGRIFIERS"); ok {
		r.warn("USE_DOG_STATSD_MOGRIFIERS", "there is no DogStatsD output to rewrite")
	}
	if v, ok := r.get("NEAR_LIMIT_RATIO"); ok {
		r.set("near-limit-ratio", v, "NEAR_LIMIT_RATIO")
	}
	// The reference's stats library reads STATSD_PROTOCOL (tcp or udp).
	if v, ok := r.get("STATSD_PROTOCOL"); ok {
		if v = strings.ToLower(v); v != "tcp" && v != "udp" {
			r.refuse("STATSD_PROTOCOL", "must be tcp or udp")
		} else {
			r.set("statsd-protocol", v, "STATSD_PROTOCOL")
		}
	}
	disabled := r.boolean("DISABLE_STATS", false)
	use := r.boolean("USE_STATSD", true)
	if disabled || !use {
		// Set, these switch statsd off whatever ENVOY_RLS_STATSD_ADDR says.
		r.set("statsd-addr", "", "USE_STATSD", "DISABLE_STATS")
		return
	}
	host, hostSet := r.getOr("STATSD_HOST", refStatsdHost)
	port, portSet := r.getOr("STATSD_PORT", refStatsdPort)
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

// prometheusEnv maps USE_PROMETHEUS and the settings the reference reads
// with it: the listener of its Prometheus metrics, their path and mapping.
func prometheusEnv(r *refEnv) {
	if !r.boolean("USE_PROMETHEUS", false) {
		return // the reference reads the others only with it on
	}
	if v, _ := r.get("DISABLE_STATS"); v != "" {
		if off, err := strconv.ParseBool(v); err == nil && off {
			return // DISABLE_STATS=true turns every stats sink off (statsdEnv reads it too)
		}
	}
	addr, set := r.getOr("PROMETHEUS_ADDR", refPrometheusAddr)
	if set {
		r.set("reference-metrics-addr", addr, "PROMETHEUS_ADDR")
	} else {
		r.set("reference-metrics-addr", addr, "USE_PROMETHEUS")
	}
	if v, ok := r.get("PROMETHEUS_PATH"); ok {
		r.set("reference-metrics-path", v, "PROMETHEUS_PATH")
	}
	if v, ok := r.get("PROMETHEUS_MAPPER_YAML"); ok {
		r.set("reference-metrics-mapping", v, "PROMETHEUS_MAPPER_YAML")
	}
	// The reference takes one stats sink and refuses USE_STATSD=true with
	// USE_PROMETHEUS=true, while its USE_STATSD defaults to true: its
	// deployments with USE_PROMETHEUS set USE_STATSD=false. Left unset here,
	// statsd stays off (read here as well as by statsdEnv, which runs first).
	if _, set := r.get("USE_STATSD"); !set {
		r.def("statsd-addr", "", "USE_STATSD unset with USE_PROMETHEUS=true (the reference sends to one stats sink)")
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
