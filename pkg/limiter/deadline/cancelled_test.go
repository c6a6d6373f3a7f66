package deadline

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestCancelledFollowsTheCaller: Cancelled of a Wheel's context, even one
// made on another Wheel's, closes when the caller's own context is
// cancelled, while the Wheel's Done stays open until its deadline; for any
// other context it is that context's Done.
func TestCancelledFollowsTheCaller(t *testing.T) {
	w := New(0)
	caller, cancel := context.WithCancel(context.Background())
	defer cancel()
	now := time.Now()
	inner := w.Context(caller, now, now.Add(time.Hour))
	outer := w.Context(inner, now, now.Add(30*time.Minute))
	for _, c := range []context.Context{inner, outer} {
		if got := Cancelled(c); got != caller.Done() {
			t.Fatal("Cancelled of a Wheel's context is not its caller's Done")
		}
	}
	select {
	case <-Cancelled(outer):
		t.Fatal("closed before the caller cancels")
	default:
	}
	cancel()
	select {
	case <-Cancelled(outer):
	default:
		t.Fatal("still open after the caller cancelled")
	}
	select {
	case <-outer.Done():
		t.Fatal("the Wheel's Done closed on the caller's cancellation (it closes at its deadline)")
	default:
	}
	if !errors.Is(outer.Err(), context.Canceled) {
		t.Fatalf("Err() = %v, want context.Canceled", outer.Err())
	}

	plain, cancelPlain := context.WithTimeout(context.Background(), time.Hour)
	defer cancelPlain()
	if Cancelled(plain) != plain.Done() {
		t.Fatal("Cancelled of a plain context is not its Done")
	}
	if Cancelled(context.Background()) != nil {
		t.Fatal("Cancelled of Background is not nil (never closes)")
	}
}
