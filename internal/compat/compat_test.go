package compat

import (
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/options"
	"github.com/envoy-rls/envoy-rls/internal/refmetrics"
	"github.com/envoy-rls/envoy-rls/internal/statsd"
	"github.com/envoy-rls/envoy-rls/internal/store"
	"github.com/envoy-rls/envoy-rls/internal/tracing"
	"github.com/envoy-rls/envoy-rls/internal/xdsrules"
)

// referenceSettings are the reference service's environment variables
// (envoyproxy/ratelimit src/settings/settings.go), every one of which the
// translation must handle.
var referenceSettings = strings.Fields(`PROTO HOST PORT DEBUG_HOST DEBUG_PORT GRPC_UDS GRPC_HOST GRPC_PORT
GRPC_MAX_CONNECTION_AGE GRPC_MAX_CONNECTION_AGE_GRACE GRPC_SERVER_USE_TLS GRPC_SERVER_TLS_CERT GRPC_SERVER_TLS_KEY
GRPC_CLIENT_TLS_CACERT GRPC_CLIENT_TLS_SAN LOG_LEVEL LOG_FORMAT CONFIG_TYPE FORCE_START_WITHOUT_INITIAL_CONFIG
CONFIG_GRPC_XDS_NODE_ID CONFIG_GRPC_XDS_NODE_METADATA CONFIG_GRPC_XDS_SERVER_URL CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL
CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS CONFIG_GRPC_XDS_SERVER_USE_TLS CONFIG_GRPC_XDS_CLIENT_TLS_CERT
CONFIG_GRPC_XDS_CLIENT_TLS_KEY CONFIG_GRPC_XDS_SERVER_TLS_CACERT CONFIG_GRPC_XDS_SERVER_TLS_SAN
XDS_CLIENT_BACKOFF_INITIAL_INTERVAL XDS_CLIENT_BACKOFF_MAX_INTERVAL XDS_CLIENT_BACKOFF_RANDOM_FACTOR XDS_CLIENT_BACKOFF_JITTER
USE_DOG_STATSD USE_DOG_STATSD_MOGRIFIERS USE_STATSD STATSD_HOST STATSD_PORT STATSD_PROTOCOL EXTRA_TAGS STATS_FLUSH_INTERVAL DISABLE_STATS
USE_PROMETHEUS PROMETHEUS_ADDR PROMETHEUS_PATH PROMETHEUS_MAPPER_YAML RUNTIME_ROOT RUNTIME_SUBDIRECTORY RUNTIME_APPDIRECTORY
RUNTIME_IGNOREDOTFILES RUNTIME_WATCH_ROOT EXPIRATION_JITTER_MAX_SECONDS LOCAL_CACHE_SIZE_IN_BYTES NEAR_LIMIT_RATIO
CACHE_KEY_PREFIX BACKEND_TYPE STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT LIMIT_RESPONSE_HEADERS_ENABLED LIMIT_LIMIT_HEADER
LIMIT_REMAINING_HEADER LIMIT_RESET_HEADER HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED REDIS_SOCKET_TYPE REDIS_TYPE REDIS_URL
REDIS_POOL_SIZE REDIS_AUTH REDIS_TLS REDIS_TLS_CLIENT_CERT REDIS_TLS_CLIENT_KEY REDIS_TLS_CACERT
REDIS_TLS_SKIP_HOSTNAME_VERIFICATION REDIS_PIPELINE_WINDOW REDIS_PIPELINE_LIMIT REDIS_PERSECOND REDIS_PERSECOND_SOCKET_TYPE
REDIS_PERSECOND_TYPE REDIS_PERSECOND_URL REDIS_PERSECOND_POOL_SIZE REDIS_PERSECOND_AUTH REDIS_PERSECOND_TLS
REDIS_PERSECOND_PIPELINE_WINDOW REDIS_PERSECOND_PIPELINE_LIMIT REDIS_HEALTH_CHECK_ACTIVE_CONNECTION MEMCACHE_HOST_PORT
MEMCACHE_MAX_IDLE_CONNS MEMCACHE_SRV MEMCACHE_SRV_REFRESH MEMCACHE_TLS SHADOW_MODE RESPONSE_DYNAMIC_METADATA MERGE_DOMAIN_CONFIG TRACING_ENABLED
TRACING_SERVICE_NAME TRACING_SERVICE_NAMESPACE TRACING_SERVICE_INSTANCE_ID TRACING_EXPORTER_PROTOCOL TRACING_SAMPLING_RATE`)

// envOf is a getenv over m.
func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// compatBase is the least environment that starts in compatibility mode:
// a Redis address (the reference's default backend is Redis).
func compatBase(extra map[string]string) map[string]string {
	m := map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "127.0.0.1:6379", "USE_STATSD": "false"}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

// parse parses and checks serve's options with the reference environment
// env, as `serve --env-compat args...`.
func parse(t *testing.T, env map[string]string, args ...string) (*settings, error) {
	t.Helper()
	return serveOptions(append([]string{"--env-compat"}, args...), envOf(env))
}

// settings are serve's options with the groups of flags of the packages it
// assembles, as internal/app parses them.
type settings struct {
	*options.Options
	tracing    tracing.Flags
	statsd     statsd.Flags
	refmetrics refmetrics.Flags
	xds        xdsrules.Flags
	store      store.Flags
}

// serveOptions is options.Serve with the translation and every group.
func serveOptions(args []string, getenv func(string) string) (*settings, error) {
	st := &settings{}
	st.tracing.Getenv = getenv
	o, _, err := options.Serve(args, getenv, Presets(getenv), &st.store, &st.xds, &st.statsd, &st.refmetrics, &st.tracing)
	st.Options = o
	st.store.RedisPassword = o.RedisPassword
	return st, err
}

func TestCompatCoversEveryReferenceSetting(t *testing.T) {
	seen := map[string]int{}
	for _, r := range refRules {
		for _, v := range r.vars {
			seen[v]++
		}
	}
	checkEachSettingOnce(t, seen, "rules of refRules")
}

func TestCompatHonoured(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		got  func(o *settings) []any // the options the environment sets
		want []any
	}{
		{"reference defaults", nil, func(o *settings) []any {
			return []any{o.Config, o.Store, o.store.RedisMode, o.store.RedisAddr, o.LogLevel, o.DefaultHeaders, o.HMACSecretRedisKey, o.AdminAddr, o.GRPCAddr}
		}, []any{"/srv/runtime_data/current/config", "redis", "standalone", "127.0.0.1:6379", "warn", "none", DefaultHMACSecretRedisKey, options.DefaultAdminAddr, options.DefaultGRPCAddr}},
		{"listeners", map[string]string{"HOST": "127.0.0.1", "PORT": "9080", "GRPC_PORT": "9081"}, func(o *settings) []any { return []any{o.AdminAddr, o.GRPCAddr} }, []any{"127.0.0.1:9080", "0.0.0.0:9081"}},
		{"grpc unix socket", map[string]string{"GRPC_UDS": "/run/rl.sock", "GRPC_PORT": "9081"}, func(o *settings) []any { return []any{o.GRPCAddr} }, []any{"unix:/run/rl.sock"}},
		{"connection age", map[string]string{"GRPC_MAX_CONNECTION_AGE": "24h", "GRPC_MAX_CONNECTION_AGE_GRACE": "1h"}, func(o *settings) []any { return []any{o.GRPC.MaxConnectionAge, o.GRPC.MaxConnectionAgeGrace} }, []any{24 * time.Hour, time.Hour}},
		{"grpc mutual TLS", map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "/c/tls.crt", "GRPC_SERVER_TLS_KEY": "/c/tls.key",
			"GRPC_CLIENT_TLS_CACERT": "/c/ca.crt", "GRPC_CLIENT_TLS_SAN": "envoy", "GRPC_SERVER_TLS_CA_CERT": "/c/other.crt"}, func(o *settings) []any {
			return []any{o.GRPCTLSCert, o.GRPCTLSKey, o.GRPCTLSClientCA, o.GRPCTLSClientSAN}
		}, []any{"/c/tls.crt", "/c/tls.key", "/c/ca.crt", "envoy"}},
		{"grpc TLS files without TLS", map[string]string{"GRPC_SERVER_TLS_CERT": "/c/tls.crt"}, func(o *settings) []any { return []any{o.GRPCTLSCert} }, []any{""}},
		{"log level any case", map[string]string{"LOG_LEVEL": "Info"}, func(o *settings) []any { return []any{o.LogLevel} }, []any{"info"}},
		{"log level warning", map[string]string{"LOG_LEVEL": "WARNING"}, func(o *settings) []any { return []any{o.LogLevel} }, []any{"warn"}},
		{"runtime dirs", map[string]string{"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_IGNOREDOTFILES": "true", "RUNTIME_WATCH_ROOT": "false"}, func(o *settings) []any { return []any{o.Config} }, []any{"/data/ratelimit/config"}},
		{"cluster", map[string]string{"REDIS_TYPE": "cluster", "REDIS_URL": "a:7000,b:7001"}, func(o *settings) []any { return []any{o.store.RedisMode, o.store.RedisAddr} }, []any{"cluster", "a:7000,b:7001"}},
		{"sentinel", map[string]string{"REDIS_TYPE": "SENTINEL", "REDIS_URL": "mymaster,s1:26379,s2:26379"}, func(o *settings) []any {
			return []any{o.store.RedisMode, o.store.RedisSentinelMaster, o.store.RedisAddr}
		}, []any{"sentinel", "mymaster", "s1:26379,s2:26379"}},
		{"unix socket", map[string]string{"REDIS_SOCKET_TYPE": "unix", "REDIS_URL": "/var/run/nutcracker/ratelimit.sock"}, func(o *settings) []any { return []any{o.store.RedisMode, o.store.RedisAddr} }, []any{"standalone", "/var/run/nutcracker/ratelimit.sock"}},
		{"socket path without socket type", map[string]string{"REDIS_SOCKET_TYPE": "", "REDIS_URL": "/run/r.sock"}, func(o *settings) []any { return []any{o.store.RedisAddr} }, []any{"/run/r.sock"}},
		{"url without socket type", map[string]string{"REDIS_SOCKET_TYPE": "", "REDIS_URL": "redis.redis.svc:6379"}, func(o *settings) []any { return []any{o.store.RedisAddr} }, []any{"redis.redis.svc:6379"}},
		{"auth user:password", map[string]string{"REDIS_AUTH": "app:s3cr:et"}, func(o *settings) []any { return []any{o.store.RedisUsername, o.RedisPassword} }, []any{"app", "s3cr:et"}},
		{"auth password", map[string]string{"REDIS_AUTH": "s3cret", "ENVOY_RLS_REDIS_PASSWORD_FILE": "/p"}, func(o *settings) []any {
			return []any{o.store.RedisUsername, o.RedisPassword, o.store.RedisPasswordFile}
		}, []any{"", "s3cret", ""}},
		{"redis TLS", map[string]string{"REDIS_TLS": "true", "REDIS_TLS_CLIENT_CERT": "/c/r.crt", "REDIS_TLS_CLIENT_KEY": "/c/r.key", "REDIS_TLS_CACERT": "/c/ca.crt"}, func(o *settings) []any {
			return []any{o.store.RedisTLS, o.store.RedisTLSCert, o.store.RedisTLSKey, o.store.RedisTLSCA}
		}, []any{true, "/c/r.crt", "/c/r.key", "/c/ca.crt"}},
		{"redis TLS without the name check", map[string]string{"REDIS_TLS": "true", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION": "true"}, func(o *settings) []any { return []any{o.store.RedisTLS, o.store.RedisTLSSkipHostname} }, []any{true, true}},
		{"store health", map[string]string{"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION": "true"}, func(o *settings) []any { return []any{o.Readiness, o.HealthcheckRequiresStore} }, []any{options.ReadinessStore, true}},
		{"store health off", map[string]string{"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION": "false"}, func(o *settings) []any { return []any{o.Readiness, o.HealthcheckRequiresStore} }, []any{options.ReadinessRules, false}},
		{"key prefix names the shared secret", map[string]string{"CACHE_KEY_PREFIX": "team-a:"}, func(o *settings) []any { return []any{o.HMACSecretRedisKey} }, []any{"team-a:" + DefaultHMACSecretRedisKey}},
		{"configured secret", map[string]string{options.SecretEnv: strings.Repeat("k", 32)}, func(o *settings) []any { return []any{o.HMACSecretRedisKey} }, []any{""}},
		{"local cache", map[string]string{"LOCAL_CACHE_SIZE_IN_BYTES": "1048576", "ENVOY_RLS_LOCAL_CACHE": "false"}, func(o *settings) []any { return []any{o.store.LocalCache} }, []any{true}},
		{"statsd", map[string]string{"USE_STATSD": "true", "STATSD_PORT": "9125", "EXTRA_TAGS": "a:1", "NEAR_LIMIT_RATIO": "0.9", "STATS_FLUSH_INTERVAL": "1s", "STATSD_PROTOCOL": "UDP"}, func(o *settings) []any {
			return []any{o.statsd.Addr, o.statsd.ExtraTags, o.statsd.NearLimitRatio, o.statsd.FlushInterval, o.statsd.Protocol}
		}, []any{"localhost:9125", "a:1", "0.9", time.Second, "udp"}},
		{"statsd by default", map[string]string{"USE_STATSD": ""}, func(o *settings) []any { return []any{o.statsd.Addr} }, []any{"localhost:8125"}},
		{"stats disabled", map[string]string{"USE_STATSD": "true", "DISABLE_STATS": "true"}, func(o *settings) []any { return []any{o.statsd.Addr} }, []any{""}},
		{"headers", map[string]string{"LIMIT_RESPONSE_HEADERS_ENABLED": "true", "LIMIT_REMAINING_HEADER": "X-Left"}, func(o *settings) []any {
			return []any{o.DefaultHeaders, o.LimitHeader, o.RemainingHeader, o.ResetHeader}
		}, []any{"full", "RateLimit-Limit", "X-Left", "RateLimit-Reset"}},
		{"header names without headers", map[string]string{"LIMIT_LIMIT_HEADER": "X-Limit"}, func(o *settings) []any { return []any{o.DefaultHeaders, o.LimitHeader} }, []any{"none", "X-RateLimit-Limit"}},
		{"statsd off over our address", map[string]string{"USE_STATSD": "false", "ENVOY_RLS_STATSD_ADDR": "statsd:8125"}, func(o *settings) []any { return []any{o.statsd.Addr} }, []any{""}},
		{"stats disabled over our address", map[string]string{"USE_STATSD": "", "DISABLE_STATS": "true", "ENVOY_RLS_STATSD_ADDR": "statsd:8125"}, func(o *settings) []any { return []any{o.statsd.Addr} }, []any{""}},
		{"prometheus", map[string]string{"USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": ":19001", "PROMETHEUS_PATH": "/stats", "PROMETHEUS_MAPPER_YAML": "/etc/statsd-exporter/conf.yaml"}, func(o *settings) []any {
			return []any{o.refmetrics.Addr, o.refmetrics.Path, o.refmetrics.Mapping}
		}, []any{":19001", "/stats", "/etc/statsd-exporter/conf.yaml"}},
		{"prometheus defaults", map[string]string{"USE_PROMETHEUS": "TRUE"}, func(o *settings) []any {
			return []any{o.refmetrics.Addr, o.refmetrics.Path, o.refmetrics.Mapping}
		}, []any{":9090", "/metrics", ""}},
		{"prometheus without USE_STATSD", map[string]string{"USE_PROMETHEUS": "true", "USE_STATSD": "", "STATSD_HOST": "statsd"}, func(o *settings) []any {
			return []any{o.refmetrics.Addr, o.statsd.Addr}
		}, []any{":9090", ""}},
		{"prometheus and statsd", map[string]string{"USE_PROMETHEUS": "true", "USE_STATSD": "true"}, func(o *settings) []any {
			return []any{o.refmetrics.Addr, o.statsd.Addr}
		}, []any{":9090", "localhost:8125"}},
		{"prometheus under our statsd address", map[string]string{"USE_PROMETHEUS": "true", "USE_STATSD": "", "ENVOY_RLS_STATSD_ADDR": "statsd:8125"}, func(o *settings) []any {
			return []any{o.refmetrics.Addr, o.statsd.Addr}
		}, []any{":9090", "statsd:8125"}},
		{"stats disabled with prometheus", map[string]string{"USE_PROMETHEUS": "true", "DISABLE_STATS": "true"}, func(o *settings) []any {
			return []any{o.refmetrics.Addr, o.statsd.Addr}
		}, []any{"", ""}},
		{"prometheus off", map[string]string{"USE_PROMETHEUS": "false", "PROMETHEUS_ADDR": ":19001", "PROMETHEUS_MAPPER_YAML": "/m.yaml"}, func(o *settings) []any {
			return []any{o.refmetrics.Addr, o.refmetrics.Mapping}
		}, []any{"", ""}},
		{"global shadow mode", map[string]string{"SHADOW_MODE": "true"}, func(o *settings) []any { return []any{o.ShadowAll} }, []any{true}},
		{"response dynamic metadata", map[string]string{"RESPONSE_DYNAMIC_METADATA": "true"}, func(o *settings) []any { return []any{o.ResponseDynamicMetadata} }, []any{true}},
		{"no response dynamic metadata", map[string]string{"RESPONSE_DYNAMIC_METADATA": "false"}, func(o *settings) []any { return []any{o.ResponseDynamicMetadata} }, []any{false}},
		{"healthcheck needs rules", map[string]string{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": "true"}, func(o *settings) []any { return []any{o.HealthcheckRequiresRules} }, []any{true}},
		{"reference variable wins over ours", map[string]string{"LOG_LEVEL": "error", "ENVOY_RLS_LOG_LEVEL": "debug", "PORT": "9090", "ENVOY_RLS_ADMIN_ADDR": ":7070"}, func(o *settings) []any { return []any{o.LogLevel, o.AdminAddr} }, []any{"error", "0.0.0.0:9090"}},
		{"ours wins over a reference default", map[string]string{"ENVOY_RLS_LOG_LEVEL": "debug", "ENVOY_RLS_CONFIG": "/rules", "ENVOY_RLS_DEFAULT_HEADERS": "retry_after"}, func(o *settings) []any { return []any{o.LogLevel, o.Config, o.DefaultHeaders} }, []any{"debug", "/rules", "retry_after"}},
		{"memory store by our variable", map[string]string{"ENVOY_RLS_STORE": "memory", "REDIS_URL": ""}, func(o *settings) []any { return []any{o.Store} }, []any{"memory"}},
		{"xds", map[string]string{"CONFIG_TYPE": "grpc_xds_sotw", "CONFIG_GRPC_XDS_SERVER_URL": "eg:18001", "CONFIG_GRPC_XDS_NODE_ID": "envoy-ratelimit",
			"CONFIG_GRPC_XDS_NODE_METADATA": "a:1,b=2", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": "x-a:1,x-b:2",
			"CONFIG_GRPC_XDS_SERVER_USE_TLS": "true", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT": "/c/tls.crt", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY": "/c/tls.key",
			"CONFIG_GRPC_XDS_SERVER_TLS_CACERT": "/c/ca.crt", "CONFIG_GRPC_XDS_SERVER_TLS_SAN": "eg", "FORCE_START_WITHOUT_INITIAL_CONFIG": "true",
			"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL": "5s", "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "1s", "XDS_CLIENT_BACKOFF_MAX_INTERVAL": "20s"}, func(o *settings) []any {
			return []any{o.ConfigSource, o.xds.Server, o.xds.NodeID, o.xds.NodeMetadata.String(), o.xds.Headers.String(),
				o.xds.TLS, o.xds.TLSCert, o.xds.TLSKey, o.xds.TLSCA, o.xds.TLSSAN, o.xds.ForceStart, o.xds.RetryInterval, o.xds.RetryMax}
		}, []any{options.SourceXDS, "eg:18001", "envoy-ratelimit", "a:1,b:2", "x-a:1,x-b:2",
			true, "/c/tls.crt", "/c/tls.key", "/c/ca.crt", "eg", true,
			// XDS_CLIENT_BACKOFF_INITIAL_INTERVAL, set after the connect
			// retry interval, is the first wait.
			time.Second, 20 * time.Second}},
		{"our xDS server over the reference's default", map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "ENVOY_RLS_XDS_SERVER": "xds.internal:18001"}, func(o *settings) []any { return []any{o.xds.Server} }, []any{"xds.internal:18001"}},
		{"the reference's xDS server default", map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW"}, func(o *settings) []any { return []any{o.xds.Server} }, []any{"localhost:18000"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parse(t, compatBase(tc.env))
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			if got := tc.got(o); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("wrong mapping:\n got %#v\nwant %#v", got, tc.want)
			}
			if len(o.CompatWarnings) != 0 {
				t.Errorf("warnings %q, want none", o.CompatWarnings)
			}
		})
	}
}

func TestCompatCommandLineWins(t *testing.T) {
	o, err := parse(t, compatBase(map[string]string{"LOG_LEVEL": "error", "PORT": "9090"}), "--log-level", "debug")
	if err != nil {
		t.Fatal(err)
	}
	if o.LogLevel != "debug" || o.AdminAddr != "0.0.0.0:9090" {
		t.Errorf("log level %q admin %q: want the flag's debug and PORT's 0.0.0.0:9090", o.LogLevel, o.AdminAddr)
	}
}

func TestCompatOffWithoutTheFlag(t *testing.T) {
	o, err := serveOptions([]string{"--config", "/r"}, envOf(compatBase(map[string]string{"LOG_LEVEL": "error", "SHADOW_MODE": "true"})))
	if err != nil {
		t.Fatal(err)
	}
	if o.LogLevel != options.DefaultLogLevel || o.Store != options.DefaultStore {
		t.Errorf("reference variables read without --env-compat: %q %q", o.LogLevel, o.Store)
	}
	o, err = serveOptions(nil, envOf(compatBase(map[string]string{"ENVOY_RLS_ENV_COMPAT": "true", "LOG_LEVEL": "error"})))
	if err != nil || o.LogLevel != "error" {
		t.Errorf("ENVOY_RLS_ENV_COMPAT=true: log level %q, %v", o.LogLevel, err)
	}
}

func TestCompatRefused(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"BACKEND_TYPE": "memcache", "MEMCACHE_HOST_PORT": "m:11211"}, `BACKEND_TYPE="memcache": envoy-rls has no memcache backend; use redis`},
		{map[string]string{"STATSD_PROTOCOL": "sctp"}, `STATSD_PROTOCOL="sctp"`},
		{map[string]string{"BACKEND_TYPE": "etcd"}, `BACKEND_TYPE="etcd": must be redis`},
		{map[string]string{"PROTO": "udp"}, `PROTO="udp": envoy-rls serves its HTTP port over tcp only`},
		{map[string]string{"PORT": "http"}, `PORT="http": must be a port number`},
		{map[string]string{"GRPC_PORT": "99999"}, `GRPC_PORT="99999": must be a port number`},
		{map[string]string{"GRPC_MAX_CONNECTION_AGE": "-1s"}, `GRPC_MAX_CONNECTION_AGE="-1s": must be 0 (never) or a positive duration`},
		{map[string]string{"GRPC_MAX_CONNECTION_AGE_GRACE": "soon"}, `GRPC_MAX_CONNECTION_AGE_GRACE="soon": must be a duration`},
		{map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "/c/tls.crt"}, `GRPC_SERVER_TLS_KEY is not set: GRPC_SERVER_USE_TLS=true needs`},
		{map[string]string{"GRPC_SERVER_USE_TLS": "yes please"}, `GRPC_SERVER_USE_TLS="yes please": must be true or false`},
		{map[string]string{"LOG_LEVEL": "verbose"}, `LOG_LEVEL="verbose": must be trace, debug`},
		{map[string]string{"LOG_FORMAT": "xml"}, `LOG_FORMAT="xml": must be text or json`},
		{map[string]string{"CONFIG_TYPE": "CONSUL"}, `CONFIG_TYPE="CONSUL": must be FILE or GRPC_XDS_SOTW`},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": "nohost"}, `CONFIG_GRPC_XDS_SERVER_URL="nohost": must be host:port of the xDS server`},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_NODE_METADATA": "novalue"}, `CONFIG_GRPC_XDS_NODE_METADATA="novalue": must be key:value or key=value pairs`},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": "x-a"}, `CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS="x-a": must be`},
		{map[string]string{"REDIS_SOCKET_TYPE": "unix", "REDIS_URL": "redis:6379"}, `REDIS_URL="redis:6379": REDIS_SOCKET_TYPE=unix takes the absolute path of the socket`},
		{map[string]string{"REDIS_SOCKET_TYPE": "unix", "REDIS_TYPE": "cluster", "REDIS_URL": "/run/r.sock"}, `REDIS_TYPE="cluster": a Unix socket (REDIS_SOCKET_TYPE=unix) reaches one server`},
		{map[string]string{"REDIS_SOCKET_TYPE": "udp"}, `REDIS_SOCKET_TYPE="udp": must be tcp or unix`},
		{map[string]string{"REDIS_URL": ""}, `REDIS_URL is not set: envoy-rls needs the Redis address`},
		{map[string]string{"REDIS_URL": "a:1,b:2"}, `REDIS_URL="a:1,b:2": REDIS_TYPE=SINGLE takes one host:port`},
		{map[string]string{"REDIS_URL": "nohostport"}, `REDIS_URL="nohostport": must be host:port`},
		{map[string]string{"REDIS_TYPE": "sentinel", "REDIS_URL": "s1:26379"}, `REDIS_URL="s1:26379": REDIS_TYPE=SENTINEL takes the master name`},
		{map[string]string{"REDIS_TYPE": "ring"}, `REDIS_TYPE="ring": must be SINGLE, SENTINEL or CLUSTER`},
		{map[string]string{"REDIS_TLS": "true", "REDIS_TLS_CLIENT_CERT": "/c/r.crt"}, `--redis-tls-key (or ENVOY_RLS_REDIS_TLS_KEY) is not set: must be given together with --redis-tls-cert`},
		{map[string]string{"REDIS_PERSECOND": "true", "REDIS_PERSECOND_URL": "p:6379"}, `REDIS_PERSECOND="true": envoy-rls keeps every limit in one Redis deployment`},
		{map[string]string{"LOCAL_CACHE_SIZE_IN_BYTES": "-1"}, `LOCAL_CACHE_SIZE_IN_BYTES="-1": must be a size in bytes`},
		{map[string]string{"NEAR_LIMIT_RATIO": "2"}, `NEAR_LIMIT_RATIO="2": must be a number greater than 0 and at most 1`},
		{map[string]string{"USE_DOG_STATSD": "true"}, `USE_DOG_STATSD="true": envoy-rls sends plain statsd`},
		{map[string]string{"USE_STATSD": "true", "STATSD_PORT": "0"}, `STATSD_PORT="0": must be a port number between 1 and 65535`},
		{map[string]string{"USE_PROMETHEUS": "yes"}, `USE_PROMETHEUS="yes": must be true or false`},
		{map[string]string{"USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": "19001"}, `PROMETHEUS_ADDR="19001": must be [host]:port`},
		{map[string]string{"USE_PROMETHEUS": "true", "PROMETHEUS_PATH": "metrics"}, `PROMETHEUS_PATH="metrics": must be an absolute URL path`},
		{map[string]string{"USE_STATSD": "true", "EXTRA_TAGS": "novalue"}, `EXTRA_TAGS="novalue": must be key:value pairs`},
		{map[string]string{"LIMIT_RESPONSE_HEADERS_ENABLED": "true", "LIMIT_REMAINING_HEADER": "X Left"}, `LIMIT_REMAINING_HEADER="X Left": must be an HTTP header name`},
		{map[string]string{"LIMIT_RESPONSE_HEADERS_ENABLED": "true", "LIMIT_RESET_HEADER": "ratelimit-limit"}, `LIMIT_RESET_HEADER="ratelimit-limit": must differ from --limit-header`},
	} {
		_, err := parse(t, compatBase(tc.env))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v:\n got %v\nwant %q", tc.env, err, tc.want)
		}
		if err != nil && strings.Count(err.Error(), "\n") > 0 && !strings.Contains(tc.want, "\n") {
			// One setting, one line.
			t.Errorf("%v: %d lines, want 1:\n%v", tc.env, strings.Count(err.Error(), "\n")+1, err)
		}
	}
}

func TestCompatWarned(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"DEBUG_PORT": "6070"}, `DEBUG_PORT="6070": ignored: envoy-rls has no separate debug port`},
		{map[string]string{"LOG_FORMAT": "text"}, `LOG_FORMAT="text": ignored: envoy-rls writes one JSON object per log line`},
		{map[string]string{"RUNTIME_IGNOREDOTFILES": "false"}, `RUNTIME_IGNOREDOTFILES="false": ignored: envoy-rls always skips`},
		{map[string]string{"REDIS_POOL_SIZE": "10"}, `REDIS_POOL_SIZE="10": ignored: envoy-rls pipelines`},
		{map[string]string{"REDIS_PIPELINE_WINDOW": "150us"}, `REDIS_PIPELINE_WINDOW="150us": ignored: envoy-rls pipelines automatically`},
		{map[string]string{"REDIS_PIPELINE_LIMIT": "8"}, `REDIS_PIPELINE_LIMIT="8": ignored`},
		{map[string]string{"CACHE_KEY_PREFIX": "a:", options.SecretEnv: strings.Repeat("k", 32)}, `CACHE_KEY_PREFIX="a:": ignored: envoy-rls keys are HMAC digests`},
		{map[string]string{"USE_DOG_STATSD_MOGRIFIERS": "a"}, `USE_DOG_STATSD_MOGRIFIERS="a": ignored`},
		{map[string]string{"EXPIRATION_JITTER_MAX_SECONDS": "300"}, `EXPIRATION_JITTER_MAX_SECONDS="300": ignored`},
		{map[string]string{"MERGE_DOMAIN_CONFIG": "true"}, `MERGE_DOMAIN_CONFIG="true": ignored: envoy-rls does not merge`},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "XDS_CLIENT_BACKOFF_JITTER": "false"}, `XDS_CLIENT_BACKOFF_JITTER="false": ignored`},
	} {
		o, err := parse(t, compatBase(tc.env))
		if err != nil {
			t.Errorf("%v: refused: %v", tc.env, err)
			continue
		}
		if len(o.CompatWarnings) != 1 || !strings.Contains(o.CompatWarnings[0], tc.want) {
			t.Errorf("%v: warnings %q, want exactly one containing %q", tc.env, o.CompatWarnings, tc.want)
		}
	}
}

func TestCompatSilent(t *testing.T) {
	// Accepted without a word: the reference's own values of settings that
	// are envoy-rls's behaviour, settings of a backend not in use, and
	// variables the reference does not read.
	env := compatBase(map[string]string{
		"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "true", "MEMCACHE_HOST_PORT": "m:11211", "REDIS_PERSECOND_URL": "p:6379",
		"GRPC_SERVER_TLS_CA_CERT": "/certs/ca.crt", "REDIS_TIMEOUT": "nonsense", "RUNTIME_WATCH_ROOT": "false", "RUNTIME_IGNOREDOTFILES": "true",
		"LOG_FORMAT": "json", "REDIS_PIPELINE_WINDOW": "0", "LOCAL_CACHE_SIZE_IN_BYTES": "0", "PROTO": "tcp", "TRACING_ENABLED": "false",
	})
	o, err := parse(t, env)
	if err != nil {
		t.Fatal(err)
	}
	if len(o.CompatWarnings) != 0 {
		t.Errorf("warnings %q, want none", o.CompatWarnings)
	}
}

func TestCompatEnvoyGatewayEnvironment(t *testing.T) {
	// The environment Envoy Gateway generates (its xDS parts aside).
	env := map[string]string{
		"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_IGNOREDOTFILES": "true", "RUNTIME_WATCH_ROOT": "false",
		"LOG_LEVEL": "info", "USE_STATSD": "true", "STATSD_PORT": "9125",
		"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "/certs/tls.crt", "GRPC_SERVER_TLS_KEY": "/certs/tls.key", "GRPC_SERVER_TLS_CA_CERT": "/certs/ca.crt",
		"FORCE_START_WITHOUT_INITIAL_CONFIG": "true", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis.redis.svc:6379",
	}
	o, err := parse(t, env)
	if err != nil {
		t.Fatal(err)
	}
	if o.Config != "/data/ratelimit/config" || o.LogLevel != "info" || o.statsd.Addr != "localhost:9125" || o.GRPCTLSCert != "/certs/tls.crt" ||
		o.GRPCTLSClientCA != "" || o.store.RedisAddr != "redis.redis.svc:6379" || o.Store != "redis" || len(o.CompatWarnings) != 0 {
		t.Errorf("options %+v, warnings %q", o, o.CompatWarnings)
	}
	if _, err := serveOptions([]string{"--env-compat"}, envOf(env)); err != nil {
		t.Errorf("serve options: %v", err)
	}
	// Its current form: statsd off, the reference's Prometheus listener on
	// with the mapping file Envoy Gateway mounts.
	delete(env, "STATSD_PORT")
	env["USE_STATSD"] = "false"
	env["USE_PROMETHEUS"], env["PROMETHEUS_ADDR"], env["PROMETHEUS_MAPPER_YAML"] = "true", ":19001", "/etc/statsd-exporter/conf.yaml"
	o, err = parse(t, env)
	if err != nil {
		t.Fatal(err)
	}
	if o.statsd.Addr != "" || o.refmetrics.Addr != ":19001" || o.refmetrics.Path != "/metrics" ||
		o.refmetrics.Mapping != "/etc/statsd-exporter/conf.yaml" || len(o.CompatWarnings) != 0 {
		t.Errorf("statsd %q, reference metrics %q %q %q, warnings %q", o.statsd.Addr, o.refmetrics.Addr,
			o.refmetrics.Path, o.refmetrics.Mapping, o.CompatWarnings)
	}
}

// TestCompatSettingsDocumented: docs/migration.md's table of the reference's
// settings names each of them exactly once in its first column, and no
// other setting.
func TestCompatSettingsDocumented(t *testing.T) {
	b, err := os.ReadFile("../../docs/migration.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(b), "\n### Every reference setting\n")
	if !ok {
		t.Fatal(`docs/migration.md has no "### Every reference setting" section`)
	}
	table, _, _ = strings.Cut(table, "\n#")
	name := regexp.MustCompile("`([A-Z][A-Z0-9_]+)(=[^`]*)?`")
	seen := map[string]int{}
	for line := range strings.Lines(table) {
		cells := strings.Split(line, " | ")
		if !strings.HasPrefix(line, "| `") || len(cells) < 2 {
			continue
		}
		for _, m := range name.FindAllStringSubmatch(cells[0], -1) {
			// Defaults such as `FILE` are not names of settings.
			if strings.Contains(m[1], "_") || slices.Contains(referenceSettings, m[1]) {
				seen[m[1]]++
			}
		}
	}
	checkEachSettingOnce(t, seen, "rows of the table")
}

// checkEachSettingOnce fails t unless seen counts every reference setting
// exactly once and nothing else; where names what was counted.
func checkEachSettingOnce(t *testing.T, seen map[string]int, where string) {
	t.Helper()
	for _, v := range referenceSettings {
		if seen[v] != 1 {
			t.Errorf("%s: in %d %s, want exactly 1", v, seen[v], where)
		}
	}
	for v := range seen {
		if !slices.Contains(referenceSettings, v) {
			t.Errorf("%s: in the %s but not a reference setting", v, where)
		}
	}
}

// TestCompatCharge: the reference counts the hits of a request over its
// limit unless STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT is true, so
// compatibility mode charges always unless it is; ENVOY_RLS_DEFAULT_CHARGE
// wins over the unset variable.
func TestCompatCharge(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{}, "always"},
		{map[string]string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "false"}, "always"},
		{map[string]string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "true"}, "allowed"},
		{map[string]string{options.EnvName("default-charge"): "allowed"}, "allowed"},
	} {
		o, err := parse(t, compatBase(tc.env))
		if err != nil {
			t.Fatalf("%v: refused: %v", tc.env, err)
		}
		if o.DefaultCharge != tc.want || len(o.CompatWarnings) != 0 {
			t.Errorf("%v: default charge %q (warnings %q), want %q", tc.env, o.DefaultCharge, o.CompatWarnings, tc.want)
		}
	}
	if _, err := parse(t, compatBase(map[string]string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "maybe"})); err == nil {
		t.Error("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=maybe accepted")
	}
}
