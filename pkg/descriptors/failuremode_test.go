package descriptors

import (
	"testing"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// TestFailureModes: failure_mode takes closed, open and local, per rate
// limit and per named policy; a rule that sets none takes
// Options.DefaultFailureMode.
func TestFailureModes(t *testing.T) {
	f := ruleFile(t, settingRules("failure_mode", []string{"closed", "open", "local"}, `  - key: named_local
    policy: shared
  - key: named_unset
    policy: plain
policies:
  shared: {unit: minute, requests_per_unit: 10, failure_mode: local}
  plain: {unit: minute, requests_per_unit: 10}
`))
	for _, tc := range []struct {
		def  limiter.FailureMode
		want map[string]limiter.FailureMode
	}{
		{limiter.FailClosed, map[string]limiter.FailureMode{
			"closed": limiter.FailClosed, "open": limiter.FailOpen, "local": limiter.FailLocal,
			"unset": limiter.FailClosed, "named_local": limiter.FailLocal, "named_unset": limiter.FailClosed}},
		{limiter.FailLocal, map[string]limiter.FailureMode{
			"closed": limiter.FailClosed, "open": limiter.FailOpen, "local": limiter.FailLocal,
			"unset": limiter.FailLocal, "named_local": limiter.FailLocal, "named_unset": limiter.FailLocal}},
		{limiter.FailOpen, map[string]limiter.FailureMode{
			"closed": limiter.FailClosed, "unset": limiter.FailOpen, "named_unset": limiter.FailOpen}},
	} {
		s, err := Load(f, Options{Secret: testSecret, DefaultFailureMode: tc.def})
		if err != nil {
			t.Fatalf("default %v: %v", tc.def, err)
		}
		for key, want := range tc.want {
			if got := policyOf(t, s, key+"=x").FailureMode(); got != want {
				t.Errorf("default %v: %s fails %v, want %v", tc.def, key, got, want)
			}
		}
	}
}
