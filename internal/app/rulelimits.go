package app

import (
	"errors"
	"flag"
	"fmt"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
)

// Defaults of the rule-set bounds (--config-max-bytes,
// --config-max-descriptors), shared by serve and validate.
const (
	DefaultConfigMaxBytes       = descriptors.DefaultMaxBytes
	DefaultConfigMaxDescriptors = descriptors.DefaultMaxDescriptors
)

// ruleLimits are the --config-max-* values.
type ruleLimits struct {
	MaxBytes       int64
	MaxDescriptors int
}

// addRuleLimitFlags defines the rule-set bounds on fs.
func addRuleLimitFlags(fs *flag.FlagSet, l *ruleLimits) {
	fs.Int64Var(&l.MaxBytes, "config-max-bytes", DefaultConfigMaxBytes, "the most bytes of all rule files together (checked before they are read, at start and on every reload)")
	fs.IntVar(&l.MaxDescriptors, "config-max-descriptors", DefaultConfigMaxDescriptors, "the most descriptors of all rule files together, nested ones included (at start and on every reload)")
}

// check reports the bounds that are not positive.
func (l ruleLimits) check(seen map[string]given) []error {
	var errs []error
	if l.MaxBytes <= 0 {
		errs = append(errs, fmt.Errorf("%s: must be %s", label("config-max-bytes", seen), accepts["config-max-bytes"]))
	}
	if l.MaxDescriptors <= 0 {
		errs = append(errs, fmt.Errorf("%s: must be %s", label("config-max-descriptors", seen), accepts["config-max-descriptors"]))
	}
	return errs
}

func (l ruleLimits) limits() descriptors.Limits {
	return descriptors.Limits{MaxBytes: l.MaxBytes, MaxDescriptors: l.MaxDescriptors}
}

// limitMessage says that a rule set is over one of its bounds, and which
// flag raises it; "" when err is not a *descriptors.LimitError.
func limitMessage(err error) string {
	var le *descriptors.LimitError
	if !errors.As(err, &le) {
		return ""
	}
	name := "config-max-bytes"
	if le.Limit == descriptors.LimitDescriptors {
		name = "config-max-descriptors"
	}
	return fmt.Sprintf("the %d rule file(s) hold %d %s, more than the limit of %d: raise --%s (or %s) to load them", le.Files, le.Total, le.Limit, le.Max, name, envName(name))
}
