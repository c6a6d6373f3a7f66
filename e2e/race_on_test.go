//go:build race

package e2e_test

// raceEnabled: the test binary runs with the race detector, so the binary
// under test is built with it too.
const raceEnabled = true
