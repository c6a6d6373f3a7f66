package journal

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// TestStopReplays: at Stop, a store that answers again gets what the
// journal holds; nothing is left for the file, and a file of an earlier
// run is removed.
func TestStopReplays(t *testing.T) {
	file := filepath.Join(t.TempDir(), "journal")
	if err := os.WriteFile(file, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	f := newFaulty(t, limitertest.NewClock(t0))
	j := newJournal(t, f, Config{File: file})
	p, sub := meter(t, "m"), subject("s")
	f.set(outUnavailable)
	for range 2*replayBatch + 1 {
		eval(j, limiter.Request{Policy: p, Subject: sub, Cost: 3})
	}
	f.set(limiter.Outcome{})
	left, saved, err := j.Stop(context.Background())
	if left != 0 || !saved || err != nil {
		t.Fatalf("Stop: %d left, saved %v, %v", left, saved, err)
	}
	if got := f.recorded(t, p, sub); got != 3*(2*replayBatch+1) {
		t.Fatalf("recorded %d", got)
	}
	if _, err := os.Stat(file); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the file is still there: %v", err)
	}
}

// TestRestart: what a Stop cannot replay (the store still fails) goes to
// the file, which the next process restores against its rules and replays
// once: every charge and release is applied exactly once, an entry whose
// policy the new rules no longer hold is dropped and counted, and the file
// is gone once read, so that a third start applies nothing.
func TestRestart(t *testing.T) {
	file := filepath.Join(t.TempDir(), "journal")
	clock := limitertest.NewClock(t0)
	f := newFaulty(t, clock)
	m, gone := meter(t, "m"), meter(t, "gone")
	lease := limitertest.LeasePolicy(t, "c", 4, time.Minute)
	a, b := subject("a"), subject("b")
	tag := limiter.Tag{1, 2, 3, 4, 5, 6, 7, 8}

	first := newJournal(t, f, Config{File: file, Clock: clock})
	for range 3 {
		eval(first, limiter.Request{Policy: lease, Subject: b, Cost: 1})
	}
	f.set(outIndetermined)
	eval(first, limiter.Request{Policy: m, Subject: a, Cost: 5, Tag: tag})
	eval(first, limiter.Request{Policy: gone, Subject: a, Cost: 6})
	eval(first, limiter.Request{Policy: lease, Subject: b, Cost: 2, Lease: limiter.LeaseRelease, Role: limiter.RoleCheck})
	eval(first, limiter.Request{Policy: m, Subject: b, Cost: 7})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	left, saved, err := first.Stop(ctx)
	if left != 4 || !saved || err != nil || first.Len() != 0 {
		t.Fatalf("Stop: %d left, saved %v, %v; %d held", left, saved, err, first.Len())
	}

	obs := newRecording()
	second := newJournal(t, f, Config{File: file, Clock: clock, Observer: obs})
	n, err := second.Restore([]*limiter.Policy{lease, m})
	if n != 3 || err != nil || second.Len() != 3 || obs.dropped["charge/policy_gone"] != 1 {
		t.Fatalf("Restore: %d, %v; held %d; %s", n, err, second.Len(), obs)
	}
	if _, err := os.Stat(file); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the file is still there after Restore: %v", err)
	}
	f.set(limiter.Outcome{})
	start := f.sentLen()
	drain(t, second)
	sent := f.sentSince(start)
	if len(sent) != 3 || sent[0].Tag != tag || sent[0].Cost != 5 || sent[1].Lease != limiter.LeaseRelease || sent[2].Cost != 7 {
		t.Fatalf("replayed %+v", sent)
	}
	if ra, rb, held := f.recorded(t, m, a), f.recorded(t, m, b), f.recorded(t, lease, b); ra != 5 || rb != 7 || held != 1 {
		t.Fatalf("recorded a %d, b %d, leases held %d; want 5, 7 and 1", ra, rb, held)
	}

	third := newJournal(t, f, Config{File: file, Clock: clock})
	if n, err := third.Restore([]*limiter.Policy{lease, m}); n != 0 || err != nil {
		t.Fatalf("third start: restored %d, %v", n, err)
	}
}

// TestRestoreCutsToTheRules: a restored charge whose policy's max cost is
// now lower records that max cost; one whose policy no longer charges is
// dropped as invalid; entries beyond MaxEntries are dropped as full.
func TestRestoreCutsToTheRules(t *testing.T) {
	file := filepath.Join(t.TempDir(), "journal")
	f := newFaulty(t, limitertest.NewClock(t0))
	first := newJournal(t, f, Config{File: file})
	big, other := meter(t, "m"), meter(t, "o")
	f.set(outUnavailable)
	for _, c := range []int64{500, 800, 900} {
		eval(first, limiter.Request{Policy: big, Subject: subject("s"), Cost: c})
	}
	eval(first, limiter.Request{Policy: other, Subject: subject("s"), Cost: 1})
	if _, _, err := first.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	small := limitertest.Policy(t, limiter.PolicySpec{ID: "m", Algorithm: limiter.FixedWindow, Charge: limiter.ChargeAlways,
		Params: limiter.FixedWindowParams{Limit: 2000, Window: time.Hour}, MaxCost: 600})
	notCharging := rate(t, "o")
	obs := newRecording()
	second := newJournal(t, f, Config{File: file, Observer: obs, MaxEntries: 2})
	if n, err := second.Restore([]*limiter.Policy{small, notCharging}); n != 2 || err != nil {
		t.Fatalf("Restore: %d, %v", n, err)
	}
	if obs.dropped["charge/full"] != 1 || obs.dropped["charge/invalid"] != 1 {
		t.Fatalf("%s", obs)
	}
	f.set(limiter.Outcome{})
	drain(t, second)
	if got := f.recorded(t, small, subject("s")); got != 500+small.MaxCost() {
		t.Fatalf("recorded %d, want 500 + the max cost %d", got, small.MaxCost())
	}
}

// TestCorruptFile: a file that is not a journal (bad header, a flipped
// byte, a truncation, one larger than MaxEntries can make) restores
// nothing, is reported, and is moved aside, not applied.
func TestCorruptFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	f := newFaulty(t, limitertest.NewClock(t0))
	p := meter(t, "meter.of.the.tenant")
	j := newJournal(t, f, Config{File: good})
	f.set(outUnavailable)
	for range 3 {
		eval(j, limiter.Request{Policy: p, Subject: subject("s"), Cost: 1})
	}
	if _, _, err := j.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	flipped := append([]byte(nil), data...)
	flipped[20] ^= 1
	for _, tc := range []struct {
		name string
		data []byte
		max  int
	}{
		{"not a journal", []byte("hello, world, this is a text file"), 10},
		{"flipped byte", flipped, 10},
		{"truncated", data[:len(data)-5], 10},
		{"too large", data, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(dir, tc.name)
			if err := os.WriteFile(file, tc.data, 0o600); err != nil {
				t.Fatal(err)
			}
			j := newJournal(t, f, Config{File: file, MaxEntries: tc.max})
			n, err := j.Restore([]*limiter.Policy{p})
			if n != 0 || !errors.Is(err, errCorrupt) || j.Len() != 0 {
				t.Fatalf("Restore: %d, %v; held %d", n, err, j.Len())
			}
			if _, err := os.Stat(file); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("the file is still in place: %v", err)
			}
			if _, err := os.Stat(file + ".corrupt"); err != nil {
				t.Fatalf("not moved aside: %v", err)
			}
		})
	}
}

// TestUnwritableDirectory: New refuses a journal file in a directory it
// cannot write, so that the problem shows at start, not when entries are
// lost at stop.
func TestUnwritableDirectory(t *testing.T) {
	dir := t.TempDir()
	store := newFaulty(t, limiter.SystemClock{})
	if _, err := New(Config{Store: store, File: filepath.Join(dir, "missing", "journal")}); err == nil {
		t.Fatal("New accepted a file in a missing directory")
	}
	if os.Geteuid() == 0 {
		return // root writes a read-only directory
	}
	if err := os.Chmod(dir, 0o500); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(dir, 0o700) })
	if _, err := New(Config{Store: store, File: filepath.Join(dir, "journal")}); err == nil {
		t.Fatal("New accepted a file in a read-only directory")
	}
}

// TestStopAwaits: Stop waits, within its context, for the late answers
// its entries await; what is still unanswered when it ends is left.
func TestStopAwaits(t *testing.T) {
	for _, answered := range []bool{true, false} {
		f := newFaulty(t, limitertest.NewClock(t0))
		j := newJournal(t, f, Config{})
		late := limiter.NewLateAnswer()
		f.set(limiter.IndeterminateOutcome(time.Second, late.Awaited(0, errDown)))
		eval(j, limiter.Request{Policy: meter(t, "m"), Subject: subject("s"), Cost: 3})
		f.set(limiter.Outcome{})
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		if answered {
			go late.Resolve([]limiter.Outcome{limiter.UnavailableOutcome(0, limiter.CategoryDeadline, errDown)})
		}
		left, saved, err := j.Stop(ctx)
		cancel()
		switch {
		case answered && (left != 0 || f.recorded(t, meter(t, "m"), subject("s")) != 3):
			t.Errorf("answered: %d left, recorded %d", left, f.recorded(t, meter(t, "m"), subject("s")))
		case !answered && (left != 1 || saved || err != nil):
			t.Errorf("unanswered: %d left, saved %v, %v", left, saved, err)
		}
	}
}
