package options

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"strings"

	"github.com/envoy-rls/envoy-rls/internal/redact"
)

// Given is one flag value as the user wrote it.
type Given struct {
	raw string
	env bool // from the flag's ENVOY_RLS_* variable
	// from, when not empty, is how the user wrote the value in another
	// form: the reference service's variables it was translated from
	// (Presets), e.g. `GRPC_PORT="x"`.
	from string
}

// EnvName is the environment variable of a flag.
func EnvName(flagName string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// recorded wraps a flag's value to keep the text the user gave and whether
// it parsed.
type recorded struct {
	flag.Value
	name    string
	seen    map[string]Given
	env     bool   // the next Set comes from the environment
	from    string // the next Set translates these reference variables
	accepts string // what the flag takes, for errors (acceptsOf)
	// refused collects the values that do not parse, and Set reports
	// none to its caller: the flag package stops at the first error, and
	// one run reports every bad value.
	refused *valueErrors
}

func (r *recorded) Set(s string) error {
	r.seen[r.name] = Given{raw: s, env: r.env, from: r.from}
	before := r.Value.String()
	if err := r.Value.Set(s); err != nil {
		// The flag package's values may change on a failed Set (a
		// duration becomes 0); keep the one before, so the option checks
		// do not report the same value again.
		_ = r.Value.Set(before)
		*r.refused = append(*r.refused, fmt.Errorf("%s: must be %s", Label(r.name, r.seen), r.accepts))
	}
	return nil
}

// IsBoolFlag keeps --flag (without =value) working for boolean flags.
func (r *recorded) IsBoolFlag() bool {
	b, ok := r.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// Label names a flag as the user set it: --name="value" on the command
// line, ENVOY_RLS_NAME="value" from the environment, how the user wrote it
// in another form (a Preset's From), or both spellings when it was not set.
// The value is quoted without the credentials it carries (redact.Setting):
// every start-up error that quotes a value goes through here.
func Label(name string, seen map[string]Given) string {
	g, ok := seen[name]
	switch {
	case !ok:
		return fmt.Sprintf("--%s (or %s) is not set", name, EnvName(name))
	case g.from != "":
		return redact.URLs(g.from)
	case g.env:
		return fmt.Sprintf("%s=%q", EnvName(name), redact.Setting(name, g.raw))
	}
	return fmt.Sprintf("--%s=%q", name, redact.Setting(name, g.raw))
}

// Parse parses args, then fills every flag not given on the command line
// from its ENVOY_RLS_* variable when that is set and not empty. It returns
// the values given, by flag name. The flag package prints nothing: a bad
// value is one error line (naming the flag or variable, the value and what
// is accepted; one per value, all of them), and -h/--help is flag.ErrHelp for the
// caller to answer.
func Parse(fs *flag.FlagSet, args []string, getenv func(string) string) (map[string]Given, error) {
	return parse(fs, args, getenv, nil)
}

// Preset is a flag value that comes from elsewhere than the command line
// or the flag's own variable: the reference service's environment
// (Presets). It wins over the flag's ENVOY_RLS_* variable, unless Fallback
// is set: then it applies only when that variable is unset (the
// reference's default of a setting the user did not give).
type Preset struct {
	Flag, Value string
	From        string // how the user wrote it, for errors: `PORT="x"`
	Fallback    bool
}

// parse is Parse with presets: after the command line is parsed, presets
// (when not nil) returns the values to set on the flags the command line
// did not set (seen holds the command line's values), before the
// ENVOY_RLS_* variables fill the rest. Its error joins those of the
// values that did not parse (valueErrors), or ends with the command line's
// syntax error (an unknown flag, a missing value): what follows it is not
// read.
func parse(fs *flag.FlagSet, args []string, getenv func(string) string, presets func(seen map[string]Given) ([]Preset, error)) (map[string]Given, error) {
	seen := map[string]Given{}
	var errs valueErrors
	fs.VisitAll(func(f *flag.Flag) {
		f.Value = &recorded{Value: f.Value, name: f.Name, seen: seen, accepts: acceptsOf(f), refused: &errs}
	})
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return seen, err
		}
		return seen, errors.Join(append(errs, commandLineError(fs, err))...)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if presets != nil {
		ps, err := presets(seen)
		if err != nil {
			errs = append(errs, err)
		}
		cmd := maps.Clone(set)
		for _, p := range ps {
			f := fs.Lookup(p.Flag)
			if f == nil || cmd[p.Flag] || p.Fallback && getenv(EnvName(p.Flag)) != "" {
				continue
			}
			set[p.Flag] = true
			r := f.Value.(*recorded)
			r.from = p.From
			_ = r.Set(p.Value) // a refused value joins errs
			r.from = ""
		}
	}
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] {
			return
		}
		v := getenv(EnvName(f.Name))
		if v == "" {
			return
		}
		f.Value.(*recorded).env = true
		_ = f.Value.Set(v) // a refused value joins errs
	})
	if len(errs) > 0 {
		return seen, errs
	}
	return seen, nil
}

// valueErrors are the values, from the command line, presets or the
// environment, that did not parse, one line each; every other flag is set.
type valueErrors []error

func (e valueErrors) Error() string { return errors.Join(e...).Error() }

func (e valueErrors) Unwrap() []error { return e }

// commandLineError rewords the flag package's errors with the double-dash
// spelling.
func commandLineError(fs *flag.FlagSet, err error) error {
	msg := err.Error()
	for _, p := range []struct{ prefix, format string }{
		{"flag provided but not defined: -", "unknown flag --%s (\"%s --help\" lists the flags)"},
		{"flag needs an argument: -", "--%s needs a value (\"%s --help\" says which)"},
	} {
		if name, ok := strings.CutPrefix(msg, p.prefix); ok {
			return fmt.Errorf(p.format, strings.TrimLeft(name, "-"), fs.Name())
		}
	}
	return err
}
