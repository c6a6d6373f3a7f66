package app

import (
	"slices"
	"testing"
)

func TestArgsAs(t *testing.T) {
	for _, tc := range []struct {
		argv0 string
		args  []string
		want  []string
	}{
		{"/bin/ratelimit", nil, []string{"serve", "--env-compat"}},
		{"ratelimit", []string{"--log-level", "debug"}, []string{"serve", "--env-compat", "--log-level", "debug"}},
		{"/usr/local/bin/envoy-rls", []string{"version"}, []string{"version"}},
	} {
		if got := argsAs(tc.argv0, tc.args); !slices.Equal(got, tc.want) {
			t.Errorf("argsAs(%q, %q) = %q, want %q", tc.argv0, tc.args, got, tc.want)
		}
	}
}
