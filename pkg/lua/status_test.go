package lua

import (
	"testing"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// TestParseStatus: every status the programs write parses to its
// limiter.Status and reads the same in errors; nothing else parses.
func TestParseStatus(t *testing.T) {
	for _, st := range []limiter.Status{limiter.StatusAllowed, limiter.StatusDenied, limiter.StatusClockUnsafe,
		limiter.StatusStateIncompatible, limiter.StatusInvalid} {
		w := statusWire[st]
		if got, ok := parseStatus(w); !ok || got != st {
			t.Errorf("parseStatus(%q) = %v, %v; want %v", w, got, ok, st)
		}
		if w != st.String() {
			t.Errorf("status %d: wire %q, String %q", st, w, st.String())
		}
	}
	for _, s := range []string{"", "allowed", "ALLOWED ", "UNKNOWN", "OK"} {
		if st, ok := parseStatus(s); ok {
			t.Errorf("parseStatus(%q) = %v, want not ok", s, st)
		}
	}
}
