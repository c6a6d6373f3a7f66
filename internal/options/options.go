// Package options is the serve command's settings: its own flags and the
// flag/environment machinery of every command — the ENVOY_RLS_* variable of
// each flag, presets from another environment (internal/compat), the
// checks that report every refused value at once (naming the flag or
// variable as the user wrote it, the value and what is accepted), and the
// help text. The flags of the packages serve assembles (its store, its
// features) come in as Groups, which those packages define and check. It
// runs nothing.
package options

import (
	"flag"
	"fmt"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/grpcserve"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
)

// EnvPrefix prefixes the environment variable of every flag: --grpc-addr is
// also ENVOY_RLS_GRPC_ADDR. A flag given on the command line wins over its
// variable.
const EnvPrefix = "ENVOY_RLS_"

// Rule sources (--config-source).
const (
	SourceFile = "file"
	SourceXDS  = "xds"
)

// SecretEnv holds the HMAC secret itself when --hmac-secret-file is not set.
const SecretEnv = "ENVOY_RLS_HMAC_SECRET"

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

// Defaults of the serve flags.
const (
	DefaultGRPCAddr     = ":8081"
	DefaultAdminAddr    = ":8080"
	DefaultStore        = "memory"
	DefaultLogLevel     = "info"
	DefaultHeaders      = "full"
	DefaultDrainTimeout = 15 * time.Second
	DefaultReadiness    = ReadinessRules
	DefaultFailureMode  = "closed"
)

// Options are the parsed serve flags.
type Options struct {
	Config         string
	GRPCAddr       string
	AdminAddr      string
	AdminTokenFile string
	Store          string
	HMACSecretFile string
	LogLevel       string
	DefaultHeaders string
	// OverrideMaxPolicies is rls.Config.MaxOverridePolicies.
	OverrideMaxPolicies int
	DrainTimeout        time.Duration
	Pprof               bool
	// ConfigLimits bound the whole rule set (rules.go).
	ConfigLimits RuleLimits

	// RedisPassword is the Redis password given other than by a flag (the
	// reference's REDIS_AUTH, set by Presets): the store's flags
	// (internal/store) take it; --redis-password-file wins.
	RedisPassword string

	// Readiness and the rules' default failure mode.
	Readiness          string
	DefaultFailureMode string
	// GRPC holds the --grpc-* limits on connections, streams and receive
	// time (grpc.go).
	GRPC grpcserve.Limits
	// The --grpc-tls-* flags (grpc.go).
	grpcTLSOptions

	// ConfigSource is where the rules come from: SourceFile (--config) or
	// SourceXDS (internal/xdsrules).
	ConfigSource string

	// The settings of the reference service's deployments (reference.go).
	referenceOptions
	// CompatWarnings are the reference settings accepted and ignored, to
	// log at start.
	CompatWarnings []string

	// Given records, by flag name, the text of each value set on the
	// command line, from the environment or from presets, so errors quote
	// what the user wrote and where.
	Given map[string]Given
}

// NewFlagSet defines the serve flags on o's fields.
func NewFlagSet(o *Options) *flag.FlagSet {
	fs := flag.NewFlagSet("envoy-rls serve", flag.ContinueOnError)
	fs.StringVar(&o.Config, "config", "", "rule file or directory of rule files (required)")
	fs.StringVar(&o.GRPCAddr, "grpc-addr", DefaultGRPCAddr, "gRPC listen address (RateLimitService, RateLimitQuotaService, health, reflection); unix:PATH listens on a unix socket")
	fs.StringVar(&o.AdminAddr, "admin-addr", DefaultAdminAddr, "admin HTTP listen address (/healthz, /readyz, /metrics, /config)")
	fs.StringVar(&o.AdminTokenFile, "admin-token-file", "", "file of admin bearer tokens, one name:token per line, mode 0600 (several for rotation; re-read every second; a file that turns bad leaves no token in force, a bad file at start stops it); guards the admin API (/v1/...), the console (/ui), /config and the profiles; without it the API and the console are off and /config shows rule values as digests")
	fs.StringVar(&o.Store, "store", DefaultStore, "limit store: memory or redis")
	fs.StringVar(&o.HMACSecretFile, "hmac-secret-file", "", "file holding the HMAC secret that pseudonymizes subjects (else $"+SecretEnv+"; required with --store redis)")
	fs.StringVar(&o.LogLevel, "log-level", DefaultLogLevel, "log level: debug, info, warn, error")
	fs.StringVar(&o.DefaultHeaders, "default-headers", DefaultHeaders, "response headers of the rules that set no headers field of their own: full, retry_after or none")
	fs.IntVar(&o.OverrideMaxPolicies, "override-max-policies", rls.DefaultMaxOverridePolicies, fmt.Sprintf("the most override policies (key lists and windows of descriptors that carry their own limit) each domain tracks at once, 1–%d; a descriptor whose override would be one more is answered OVER_LIMIT (docs/config.md, Overrides)", rls.MaxOverridePoliciesBound))
	fs.DurationVar(&o.DrainTimeout, "drain-timeout", DefaultDrainTimeout, "on SIGTERM/SIGINT, how long in-flight calls may take to finish")
	fs.BoolVar(&o.Pprof, "pprof", false, "serve net/http/pprof profiles under /debug/pprof/ on the admin address (CPU profiles of at most 60 s and heap profiles of live traffic; behind the token of --admin-token-file when set; off by default)")
	AddRuleLimitFlags(fs, &o.ConfigLimits)
	fs.StringVar(&o.Readiness, "readiness", DefaultReadiness, "what /readyz requires: rules (rules loaded and listeners up; a store outage is answered by each policy's failure mode) or store (also a store that answers, so that Envoy's failure_mode_deny decides during an outage); /healthz and /healthcheck never follow it")
	fs.StringVar(&o.DefaultFailureMode, "default-failure-mode", DefaultFailureMode, "failure mode of the rules that set no failure_mode: closed, open or local")
	transportFlags(fs, &o.GRPC)
	grpcTLSFlags(fs, &o.grpcTLSOptions)
	referenceFlags(fs, &o.referenceOptions)
	fs.StringVar(&o.ConfigSource, "config-source", SourceFile, "where the rules come from: file (--config) or xds (RateLimitConfig resources from --xds-server)")
	return fs
}

// Label names the flag name as the user set it (the package's Label).
func (o *Options) Label(name string) string { return Label(name, o.Given) }
