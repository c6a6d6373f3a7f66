package limiter_test

import (
	"testing"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

func TestParseFailureMode(t *testing.T) {
	for name, want := range map[string]limiter.FailureMode{"closed": limiter.FailClosed, "open": limiter.FailOpen, "local": limiter.FailLocal} {
		if got, err := limiter.ParseFailureMode(name); err != nil || got != want {
			t.Errorf("ParseFailureMode(%q) = %v, %v; want %v", name, got, err, want)
		}
	}
	for _, bad := range []string{"", "Closed", "deny"} {
		if _, err := limiter.ParseFailureMode(bad); err == nil {
			t.Errorf("ParseFailureMode(%q): no error", bad)
		}
	}
}
