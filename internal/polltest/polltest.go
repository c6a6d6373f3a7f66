// Package polltest is how tests wait: Eventually polls a condition until it
// holds or a bound passes, and Until waits for the wall clock to reach an
// instant (for a store that reads the real time, such as Redis's TIME). It
// is the one waiting helper of every module of the repository; a test never
// sleeps to synchronise.
package polltest

import (
	"testing"
	"time"
)

// Eventually calls cond every interval until it returns nil and returns how
// long that took. When timeout passes first, it fails the test with what and
// cond's last error.
func Eventually(t testing.TB, timeout, interval time.Duration, what string, cond func() error) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		err := cond()
		if err == nil {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			t.Fatalf("%s: not within %v: %v", what, timeout, err)
		}
		time.Sleep(interval)
	}
}

// Until waits until the wall clock reads at. It fails the test when at lies
// beyond the test's deadline (go test -timeout), which the wait would
// otherwise turn into a timeout panic with no reason given.
func Until(t testing.TB, at time.Time) {
	t.Helper()
	if tt, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if deadline, ok := tt.Deadline(); ok && at.After(deadline) {
			t.Fatalf("waiting until %v would outlast the test deadline %v", at.Format(time.RFC3339Nano), deadline.Format(time.RFC3339Nano))
		}
	}
	if d := time.Until(at); d > 0 {
		<-time.After(d)
	}
}
