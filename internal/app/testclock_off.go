//go:build !testclock

package app

import "github.com/envoy-rls/envoy-rls/pkg/limiter"

// testClock is nil in every build but the tests' `-tags testclock` one
// (testclock.go): production binaries read the system clock only.
func testClock(func(string) string) (limiter.Clock, error) { return nil, nil }
