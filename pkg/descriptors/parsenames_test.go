package descriptors

import "testing"

func TestParseUnitAndHeaderMode(t *testing.T) {
	for name, want := range map[string]Unit{
		"second": UnitSecond, "MINUTE": UnitMinute, "Hour": UnitHour, "day": UnitDay,
		"week": UnitWeek, "month": UnitMonth, "year": UnitYear,
	} {
		if got, ok := parseUnit(name); !ok || got != want {
			t.Errorf("ParseUnit(%q) = %v, %v; want %v", name, got, ok, want)
		}
	}
	for _, bad := range []string{"", "unknown", "seconds", "fortnight"} {
		if got, ok := parseUnit(bad); ok {
			t.Errorf("ParseUnit(%q) = %v; want refused", bad, got)
		}
	}
	for name, want := range map[string]HeaderMode{"full": HeadersFull, "retry_after": HeadersRetryAfter, "none": HeadersNone} {
		if got, ok := ParseHeaderMode(name); !ok || got != want {
			t.Errorf("ParseHeaderMode(%q) = %v, %v; want %v", name, got, ok, want)
		}
	}
	for _, bad := range []string{"", "Full", "retry-after"} {
		if got, ok := ParseHeaderMode(bad); ok || got != HeadersDefault {
			t.Errorf("ParseHeaderMode(%q) = %v, %v; want refused", bad, got, ok)
		}
	}
}
