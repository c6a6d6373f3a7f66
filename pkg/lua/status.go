package lua

import "github.com/envoy-rls/envoy-rls/pkg/limiter"

// statusWire is the first field of a per-key reply as the programs write it,
// by limiter.Status. The names are those limiter.Status.String gives (the
// names docs/algorithms.md uses), so that a reply and an error read alike.
var statusWire = [...]string{
	limiter.StatusAllowed:           "ALLOWED",
	limiter.StatusDenied:            "DENIED",
	limiter.StatusClockUnsafe:       "CLOCK_UNSAFE",
	limiter.StatusStateIncompatible: "STATE_INCOMPATIBLE",
	limiter.StatusInvalid:           "INVALID",
	limiter.StatusBlocked:           "BLOCKED",
}

// parseStatus reads the status field of a program's reply; ok is false for
// anything but the six statuses.
func parseStatus(s string) (limiter.Status, bool) {
	for st, w := range statusWire {
		if w != "" && w == s {
			return limiter.Status(st), true
		}
	}
	return 0, false
}
