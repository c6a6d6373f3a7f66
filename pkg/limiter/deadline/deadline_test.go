package deadline

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

type key struct{}

func TestContextFiresAtItsTick(t *testing.T) {
	w := New(0)
	parent := context.WithValue(context.Background(), key{}, "v")
	now := time.Now()
	d := now.Add(30 * time.Millisecond)
	c := w.Context(parent, now, d)

	if got, ok := c.Deadline(); !ok || !got.Equal(d) {
		t.Fatalf("Deadline() = %v, %v; want %v, true", got, ok, d)
	}
	if got := c.Value(key{}); got != "v" {
		t.Fatalf("Value() = %v; want the parent's value", got)
	}
	if err := c.Err(); err != nil {
		t.Fatalf("Err() before the deadline = %v", err)
	}
	select {
	case <-c.Done():
		t.Fatal("Done closed at once for a deadline 30ms ahead")
	default:
	}
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed 10s after a 30ms deadline")
	}
	if fired := time.Now(); fired.Before(d.Add(-w.tick)) {
		t.Fatalf("Done closed at %v, more than one tick before the deadline %v", fired, d)
	}
	wantExpired(t, c, "after the deadline")
	wantNoPending(t, w, "after every deadline fired")
}

func TestContextsOfOneTickShareATimer(t *testing.T) {
	w := New(time.Hour) // one tick holds every deadline below
	now := time.Now().Truncate(time.Hour)
	var cs []context.Context
	for i := range 100 {
		cs = append(cs, w.Context(context.Background(), now, now.Add(time.Hour+time.Duration(i)*time.Second)))
	}
	if n := w.pending(); n != 1 {
		t.Fatalf("pending ticks = %d; want 1 for 100 deadlines in one tick", n)
	}
	for _, c := range cs[1:] {
		if c.Done() != cs[0].Done() {
			t.Fatal("contexts due in the same tick have different Done channels")
		}
	}
}

func TestPastDeadlineIsDoneAtOnce(t *testing.T) {
	w := New(0)
	now := time.Now()
	for _, d := range []time.Time{now.Add(-time.Second), now, now.Truncate(w.tick).Add(w.tick - 1)} { // the last is in the current tick {
		c := w.Context(context.Background(), now, d)
		select {
		case <-c.Done():
		default:
			t.Fatalf("deadline %v (now %v): Done not closed", d, now)
		}
		wantExpired(t, c, "for a past deadline")
	}
	wantNoPending(t, w, "after past deadlines only")
}

// wantExpired fails t unless c's error is DeadlineExceeded.
func wantExpired(t *testing.T, c context.Context, when string) {
	t.Helper()
	if err := c.Err(); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Err() %s = %v; want DeadlineExceeded", when, err)
	}
}

// wantNoPending fails t when w still has a tick armed.
func wantNoPending(t *testing.T, w *Wheel, when string) {
	t.Helper()
	if n := w.pending(); n != 0 {
		t.Fatalf("%d ticks still pending %s", n, when)
	}
}

func TestEarlierParentDeadlineWins(t *testing.T) {
	w := New(0)
	now := time.Now()
	parent, cancel := context.WithDeadline(context.Background(), now.Add(time.Second))
	defer cancel()
	if c := w.Context(parent, now, now.Add(time.Minute)); c != parent {
		t.Fatal("a later deadline than the parent's did not return the parent")
	}
	c := w.Context(parent, now, now.Add(100*time.Millisecond))
	if c == parent {
		t.Fatal("an earlier deadline than the parent's returned the parent")
	}
}

func TestCancelledParentShowsInErr(t *testing.T) {
	w := New(0)
	parent, cancel := context.WithCancel(context.Background())
	now := time.Now()
	c := w.Context(parent, now, now.Add(time.Minute))
	cancel()
	if err := c.Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Err() after the parent was cancelled = %v; want Canceled", err)
	}
}

func TestConcurrentUse(t *testing.T) {
	w := New(0)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				now := time.Now()
				c := w.Context(context.Background(), now, now.Add(time.Duration(1+(g+i)%5)*time.Millisecond))
				<-c.Done()
			}
		})
	}
	wg.Wait()
	// Every timer fires once its tick starts; the last may still be running.
	deadline := time.Now().Add(10 * time.Second)
	for w.pending() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d ticks still pending 10s after the last deadline", w.pending())
		}
		time.Sleep(time.Millisecond)
	}
}

// pending reports how many ticks have contexts waiting.
func (w *Wheel) pending() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.due)
}
