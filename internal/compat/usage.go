package compat

import (
	"strings"

	"github.com/envoy-rls/envoy-rls/internal/options"
)

const usageHead = `Usage: ratelimit [version | help | serve flags]

Started as ratelimit (envoyproxy/ratelimit's entry point, /bin/ratelimit in
the image), envoy-rls serves as "envoy-rls serve --env-compat": configured by
the environment variables of envoyproxy/ratelimit below. docs/migration.md
says what each one maps to; a few are accepted and ignored with a warning
at start, and a value envoy-rls cannot honour stops the start with one line
naming it.

  ratelimit             serve
  ratelimit version     print version, commit, Go version, build date
  ratelimit help        this text

Every envoy-rls serve flag works too, on the command line or as its
ENVOY_RLS_* variable ("envoy-rls serve --help" lists them): a variable
below wins over an ENVOY_RLS_* variable, a command-line flag over both.

Variables read (one group per line):
`

// Usage is the help of the binary started as ratelimit: what it does and
// every reference variable it reads, from the translation table itself.
func Usage() string {
	var b strings.Builder
	b.WriteString(usageHead)
	for _, rule := range refRules {
		line := "  "
		for _, v := range rule.vars {
			if len(line)+1+len(v) > options.HelpWidth && line != "  " {
				b.WriteString(line + "\n")
				line = "    "
			}
			if line != "  " && line != "    " {
				line += " "
			}
			line += v
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}
