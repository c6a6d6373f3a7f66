package options

import (
	"errors"
	"flag"
	"fmt"
	"maps"
	"slices"
	"time"

	"go.uber.org/zap/zapcore"

	"github.com/envoy-rls/envoy-rls/internal/redact"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
)

// Presets returns, once the command line is parsed, values for flags it
// did not set, from another environment than ENVOY_RLS_* (the reference
// service's, internal/compat); seen holds the command line's values. It
// may set o's fields that no flag sets (RedisPassword, CompatWarnings). A
// *RefusedError among its errors stops the checks.
type Presets func(o *Options, seen map[string]Given) ([]Preset, error)

// RefusedError holds the settings Presets refused outright. When there are
// any, Serve reports them alone: the option checks would only repeat them
// in this binary's terms (a missing address for a refused REDIS_URL).
type RefusedError struct{ Err error }

func (e *RefusedError) Error() string { return e.Err.Error() }

func (e *RefusedError) Unwrap() error { return e.Err }

// A Group is flags that another package defines on the serve command and
// checks: a feature's (tracing, statsd, audit…) or the store's. Serve
// parses them with its own, from the command line, the presets and the
// ENVOY_RLS_* variables, and reports their refusals with every other
// problem. Declared here, where it is consumed, in the standard library's
// types only: the packages that implement it import no options, and
// options imports none of them.
type Group interface {
	// Define defines the group's flags on fs and returns, by flag name,
	// what a flag accepts, worded to follow "must be", when its type does
	// not say it for a value that does not parse.
	Define(fs *flag.FlagSet) (accepts map[string]string)
	// Check reports the values of the parsed flags it refuses, one
	// check(flag, ok, reason) each: unless ok, the value of flag (as the
	// user set it, Label) is refused for reason ("must be …"); with flag
	// "", reason alone is reported. value is any flag's value as text.
	Check(check func(flag string, ok bool, reason string), value func(flag string) string)
}

// accepting is a flag of a Group with what it accepts (acceptsOf).
type accepting struct {
	flag.Value
	accepts string
}

func (a accepting) IsBoolFlag() bool {
	b, ok := a.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// Serve parses the arguments of `envoy-rls serve` (without the word serve)
// and the environment, with presets (nil: none), and checks every value
// the binary would refuse at start that can be decided without reading a
// file or dialling: options' own flags, then those of groups. The error is
// flag.ErrHelp after -h (fs prints the help with PrintUsage); otherwise it
// holds one line per problem found.
func Serve(args []string, getenv func(string) string, presets Presets, groups ...Group) (o *Options, fs *flag.FlagSet, err error) {
	o = &Options{}
	fs = NewFlagSet(o)
	for _, g := range groups {
		for name, want := range g.Define(fs) {
			f := fs.Lookup(name)
			f.Value = accepting{f.Value, want}
		}
	}
	var pre func(map[string]Given) ([]Preset, error)
	if presets != nil {
		pre = func(seen map[string]Given) ([]Preset, error) { return presets(o, seen) }
	}
	o.Given, err = parse(fs, args, getenv, pre)
	var valueErrs valueErrors
	switch {
	case errors.Is(err, flag.ErrHelp):
		return o, fs, err
	case err != nil && !errors.As(err, &valueErrs):
		// The command line did not parse: the values after the fault are
		// unknown, so nothing more can be checked.
		return o, fs, err
	}
	var refused *RefusedError
	if errors.As(err, &refused) {
		return o, fs, err
	}
	r := refusals{given: o.Given, errs: []error{err}}
	if fs.NArg() > 0 {
		r.errs = append(r.errs, extraArgs(fs.Args(), o.Given))
	}
	o.check(&r)
	r.errs = append(r.errs, CheckSecretSource(o, getenv))
	value := func(name string) string {
		if f := fs.Lookup(name); f != nil {
			return f.Value.String()
		}
		return ""
	}
	for _, g := range groups {
		g.Check(r.check, value)
	}
	return o, fs, errors.Join(r.errs...)
}

// extraArgs is the error of words left after the flags. A value cut at
// a space leaves its rest here, so the words are not shown when the command
// line sets a credential or a list of headers (redact.SecretSetting,
// redact.PairSetting); otherwise they are, less URL passwords.
func extraArgs(args []string, given map[string]Given) error {
	for _, name := range slices.Sorted(maps.Keys(given)) {
		if g := given[name]; !g.env && g.from == "" && (redact.SecretSetting(name) || redact.PairSetting(name)) {
			return fmt.Errorf("serve takes no arguments (got %d, not shown: --%s is set on the command line and a value of it cut at a space would show here; quote it): the rules are --config PATH", len(args), name)
		}
	}
	shown := make([]string, len(args))
	for i, a := range args {
		shown[i] = redact.URLs(a)
	}
	return fmt.Errorf("serve takes no arguments (got %q): the rules are --config PATH", shown)
}

// accepts says what a flag takes, as errors put it after "must be": for
// the flags Options.check refuses by name, and for those whose type alone
// does not say it when a value does not parse; acceptsOf falls back on the
// type. Read only.
var accepts = map[string]string{
	"store":                 "memory or redis",
	"log-level":             "debug, info, warn or error",
	"default-headers":       "full, retry_after or none",
	"override-max-policies": fmt.Sprintf("an integer from 1 to %d", rls.MaxOverridePoliciesBound),
	"drain-timeout":         "a positive duration such as 15s",

	"readiness":            ReadinessRules + " or " + ReadinessStore,
	"default-failure-mode": "closed, open or local",
	// rules.go
	"config-max-bytes":       "a positive number of bytes",
	"config-max-descriptors": "a positive integer",
	"config-source":          SourceFile + " or " + SourceXDS,
}

// acceptsOf is what f takes: its group's word for it or its entry in
// accepts, else what its type parses.
func acceptsOf(f *flag.Flag) string {
	v := f.Value
	if r, ok := v.(*recorded); ok {
		v = r.Value
	}
	if a, ok := v.(accepting); ok {
		return a.accepts
	}
	if a, ok := accepts[f.Name]; ok {
		return a
	}
	if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
		return "true or false"
	}
	if _, err := time.ParseDuration(f.DefValue); err == nil {
		return "a duration such as 500ms or 2s"
	}
	return "an integer"
}

// check refuses the values of options' own flags that the flag package
// cannot: every value the binary would refuse at start that can be decided
// without reading a file or dialling.
func (o *Options) check(r *refusals) {
	r.check("config", o.Config != "" || o.ConfigSource == SourceXDS, "must be the rule file or directory to serve")
	r.must("store", o.Store == "memory" || o.Store == "redis")
	_, err := zapcore.ParseLevel(o.LogLevel)
	r.must("log-level", err == nil)
	_, ok := descriptors.ParseHeaderMode(o.DefaultHeaders)
	r.must("default-headers", ok)
	r.must("override-max-policies", o.OverrideMaxPolicies >= 1 && o.OverrideMaxPolicies <= rls.MaxOverridePoliciesBound)
	r.must("drain-timeout", o.DrainTimeout > 0)
	o.ConfigLimits.check(r)
	r.must("config-source", o.ConfigSource == SourceFile || o.ConfigSource == SourceXDS)
	r.must("readiness", o.Readiness == ReadinessRules || o.Readiness == ReadinessStore)
	_, err = limiter.ParseFailureMode(o.DefaultFailureMode)
	r.must("default-failure-mode", err == nil)
	checkTransport(&o.GRPC, r)
	o.grpcTLSOptions.check(r)
	o.referenceOptions.check(r)
}

// refusals collects one start-up error per refused value, naming the flag
// or variable as the user set it.
type refusals struct {
	given map[string]Given
	errs  []error
}

// check records, unless ok, that the value of flag is refused for reason
// (Group.Check's check).
func (r *refusals) check(flag string, ok bool, reason string) {
	switch {
	case ok:
	case flag == "":
		r.errs = append(r.errs, errors.New(reason))
	default:
		r.errs = append(r.errs, fmt.Errorf("%s: %s", Label(flag, r.given), reason))
	}
}

// must records, unless ok, that the value of name must be what accepts
// says.
func (r *refusals) must(name string, ok bool) { r.check(name, ok, "must be "+accepts[name]) }
