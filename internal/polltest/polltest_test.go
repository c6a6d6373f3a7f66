package polltest

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// fatalT records the message of a Fatalf and ends the helper with a panic
// the test recovers, so that a test can check how a helper fails.
type fatalT struct {
	testing.TB
	msg      string
	deadline time.Time
}

func (f *fatalT) Helper() {}

func (f *fatalT) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	panic(f)
}

func (f *fatalT) Deadline() (time.Time, bool) { return f.deadline, !f.deadline.IsZero() }

// fails runs fn with ft and reports whether it ended in ft.Fatalf.
func fails(t *testing.T, ft *fatalT, fn func()) bool {
	t.Helper()
	failed := false
	func() {
		defer func() {
			if r := recover(); r != nil {
				if r != ft {
					panic(r)
				}
				failed = true
			}
		}()
		fn()
	}()
	return failed
}

func TestEventuallyReturnsOnceTheConditionHolds(t *testing.T) {
	calls := 0
	took := Eventually(t, 5*time.Second, time.Millisecond, "third call", func() error {
		if calls++; calls < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if calls != 3 {
		t.Fatalf("cond called %d times, want 3", calls)
	}
	if took < 2*time.Millisecond {
		t.Errorf("took %v for two intervals of 1ms", took)
	}
}

func TestEventuallyFailsWithTheLastError(t *testing.T) {
	ft := &fatalT{TB: t}
	calls := 0
	if !fails(t, ft, func() {
		Eventually(ft, 20*time.Millisecond, time.Millisecond, "the server answers", func() error {
			calls++
			return fmt.Errorf("attempt %d: connection refused", calls)
		})
	}) {
		t.Fatal("Eventually returned although cond never held")
	}
	if calls < 2 {
		t.Errorf("cond called %d times in 20ms at 1ms intervals", calls)
	}
	if want := fmt.Sprintf("the server answers: not within 20ms: attempt %d: connection refused", calls); ft.msg != want {
		t.Errorf("failure %q, want %q", ft.msg, want)
	}
}

func TestUntil(t *testing.T) {
	at := time.Now().Add(30 * time.Millisecond)
	Until(t, at)
	if now := time.Now(); now.Before(at) {
		t.Fatalf("returned at %v, before %v", now, at)
	}
	Until(t, time.Now().Add(-time.Hour)) // a past instant returns at once

	ft := &fatalT{TB: t, deadline: time.Now().Add(time.Second)}
	if !fails(t, ft, func() { Until(ft, time.Now().Add(time.Hour)) }) {
		t.Fatal("Until waited past the test's deadline")
	}
	if !strings.Contains(ft.msg, "would outlast the test deadline") {
		t.Errorf("failure %q does not name the deadline", ft.msg)
	}
}
