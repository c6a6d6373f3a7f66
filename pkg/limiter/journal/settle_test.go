package journal

import (
	"context"
	"encoding/binary"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// budget is a reserving fixed window of 10,000 an hour whose reservations
// hold 500 for ten minutes.
func budget(t testing.TB, id string) *limiter.Policy {
	t.Helper()
	return limitertest.Policy(t, limiter.PolicySpec{ID: id, Algorithm: limiter.FixedWindow,
		Params: limiter.FixedWindowParams{Limit: 10_000, Window: time.Hour}, MaxCost: 10_000,
		Reserve: limiter.Reserve{TTL: 10 * time.Minute, Estimate: 500}})
}

// reserve takes a reservation of p for sub through j and returns its
// identity.
func reserve(t testing.TB, j *Journal, p *limiter.Policy, sub limiter.SubjectDigest) int64 {
	t.Helper()
	o := eval(j, limiter.Request{Policy: p, Subject: sub, Cost: 1})[0]
	if o.Kind != limiter.Evaluated || !o.Decision.Consumed || o.Decision.HoldAt.IsZero() {
		t.Fatalf("reserve: %+v", o)
	}
	return o.Decision.HoldAt.UnixMilli()
}

// settleOf is the settle of the reservation at with the usage actual, as
// pkg/rls sends it (a check: it never blocks).
func settleOf(p *limiter.Policy, sub limiter.SubjectDigest, at, actual int64) limiter.Request {
	return limiter.Request{Policy: p, Subject: sub, Cost: actual, Lease: limiter.LeaseRelease, LeaseAt: at, Role: limiter.RoleCheck}
}

// TestSettles: a settle the store failed (Unavailable or Indeterminate) is
// kept and replayed once, naming its reservation, with its usage: the
// reservation is settled exactly once (less than reserved gives back,
// more charges the excess, 0 gives back all, LeaseAt 0 is a plain
// charge). A duplicate settle, kept too, changes nothing when replayed, and
// neither does one replayed after its reservation expired: its estimate
// stays charged.
func TestSettles(t *testing.T) {
	for _, fail := range []limiter.Outcome{outUnavailable, outIndetermined} {
		t.Run(fail.Kind.String(), func(t *testing.T) {
			clock := limitertest.NewClock(t0)
			f := newFaulty(t, clock)
			obs := newRecording()
			j := newJournal(t, f, Config{Observer: obs, Clock: clock})
			p := budget(t, "b")
			less, more, none, plain, late := subject("less"), subject("more"), subject("none"), subject("plain"), subject("late")
			at := map[limiter.SubjectDigest]int64{}
			for _, s := range []limiter.SubjectDigest{less, more, none, late} {
				at[s] = reserve(t, j, p, s)
			}
			f.set(fail)
			eval(j, settleOf(p, less, at[less], 200), settleOf(p, more, at[more], 700), settleOf(p, none, at[none], 0),
				settleOf(p, plain, 0, 40))
			eval(j, settleOf(p, less, at[less], 200)) // a duplicate
			if j.Len() != 5 || obs.journalled[kindSettle] != 5 {
				t.Fatalf("held %d; %s", j.Len(), obs)
			}
			f.set(limiter.Outcome{})
			start := f.sentLen()
			drain(t, j)
			sent := f.sentSince(start)
			if len(sent) != 5 || sent[0].LeaseAt != at[less] || sent[0].Cost != 200 || sent[0].Lease != limiter.LeaseRelease || sent[3].LeaseAt != 0 {
				t.Fatalf("replayed %+v", sent)
			}
			for _, w := range []struct {
				name string
				sub  limiter.SubjectDigest
				want int64
			}{{"less", less, 200}, {"more", more, 700}, {"none", none, 0}, {"plain", plain, 40}, {"unsettled", late, 500}} {
				if got := f.recorded(t, p, w.sub); got != w.want {
					t.Errorf("%s: recorded %d, want %d", w.name, got, w.want)
				}
			}
			if obs.replayed[kindSettle] != 5 {
				t.Fatalf("%s", obs)
			}

			// Replayed after the reservation expired: nothing changes.
			f.set(fail)
			eval(j, settleOf(p, late, at[late], 100))
			clock.Advance(10*time.Minute + time.Millisecond)
			f.set(limiter.Outcome{})
			drain(t, j)
			if got := f.recorded(t, p, late); got != 500 {
				t.Fatalf("an expired reservation settled late: recorded %d, want its estimate 500", got)
			}
		})
	}
}

// TestReleaseKeepsItsLease: a release the store failed is replayed naming
// the leases it was sent for (LeaseAt), not the soonest-expiring ones.
func TestReleaseKeepsItsLease(t *testing.T) {
	clock := limitertest.NewClock(t0)
	f := newFaulty(t, clock)
	j := newJournal(t, f, Config{Clock: clock})
	lease, sub := limitertest.LeasePolicy(t, "c", 4, time.Minute), subject("s")
	eval(j, limiter.Request{Policy: lease, Subject: sub, Cost: 1})
	clock.Advance(10 * time.Second)
	second := eval(j, limiter.Request{Policy: lease, Subject: sub, Cost: 1})[0].Decision.ResetAt.UnixMilli()
	f.set(outUnavailable)
	eval(j, limiter.Request{Policy: lease, Subject: sub, Cost: 1, Lease: limiter.LeaseRelease, LeaseAt: second, Role: limiter.RoleCheck})
	f.set(limiter.Outcome{})
	drain(t, j)
	// The first lease expires by its TTL; the second was released.
	clock.Advance(50*time.Second + time.Millisecond)
	if held := f.recorded(t, lease, sub); held != 0 {
		t.Fatalf("%d leases held: the release freed the soonest-expiring lease, not its own", held)
	}
}

// TestRestartSettles: settles and releases that a Stop writes to the file
// are restored with what they name (LeaseAt) and applied once.
func TestRestartSettles(t *testing.T) {
	file := filepath.Join(t.TempDir(), "journal")
	clock := limitertest.NewClock(t0)
	f := newFaulty(t, clock)
	p, lease := budget(t, "b"), limitertest.LeasePolicy(t, "c", 4, time.Minute)
	a, b := subject("a"), subject("b")
	first := newJournal(t, f, Config{File: file, Clock: clock})
	at := reserve(t, first, p, a)
	eval(first, limiter.Request{Policy: lease, Subject: b, Cost: 1})
	clock.Advance(time.Second)
	later := eval(first, limiter.Request{Policy: lease, Subject: b, Cost: 1})[0].Decision.ResetAt.UnixMilli()
	f.set(outUnavailable)
	eval(first, settleOf(p, a, at, 0))
	eval(first, limiter.Request{Policy: lease, Subject: b, Cost: 1, Lease: limiter.LeaseRelease, LeaseAt: later, Role: limiter.RoleCheck})
	if left, saved, err := first.Stop(context.Background()); left != 2 || !saved || err != nil {
		t.Fatalf("Stop: %d left, saved %v, %v", left, saved, err)
	}

	second := newJournal(t, f, Config{File: file, Clock: clock})
	if n, err := second.Restore([]*limiter.Policy{p, lease}); n != 2 || err != nil {
		t.Fatalf("Restore: %d, %v", n, err)
	}
	f.set(limiter.Outcome{})
	start := f.sentLen()
	drain(t, second)
	if sent := f.sentSince(start); len(sent) != 2 || sent[0].LeaseAt != at || sent[0].Cost != 0 || sent[1].LeaseAt != later {
		t.Fatalf("replayed %+v", sent)
	}
	if got := f.recorded(t, p, a); got != 0 {
		t.Fatalf("recorded %d after the settle of 0, want 0", got)
	}
	clock.Advance(59*time.Second + time.Millisecond) // the first lease expires
	if held := f.recorded(t, lease, b); held != 0 {
		t.Fatalf("%d leases held, want 0: the restored release freed another lease", held)
	}
}

// TestRestoreFirstFormat: a file of the first format (no LeaseAt) that an
// earlier version wrote is still restored: its charges and releases are
// applied once.
func TestRestoreFirstFormat(t *testing.T) {
	file := filepath.Join(t.TempDir(), "journal")
	clock := limitertest.NewClock(t0)
	f := newFaulty(t, clock)
	m, lease := meter(t, "m"), limitertest.LeasePolicy(t, "c", 4, time.Minute)
	sub := subject("s")
	for range 2 {
		eval(newJournal(t, f, Config{}), limiter.Request{Policy: lease, Subject: sub, Cost: 1})
	}
	v1 := func(k kind, p *limiter.Policy, cost int64) []byte {
		b := []byte{byte(k), byte(len(p.ID()))}
		b = append(b, p.ID()...)
		b = binary.BigEndian.AppendUint32(b, p.Revision())
		b = binary.BigEndian.AppendUint64(b, uint64(cost))
		b = binary.BigEndian.AppendUint64(b, uint64(t0.UnixMilli()))
		b = append(b, sub[:]...)
		return append(b, make([]byte, 8)...)
	}
	data := append([]byte("ERLSJNL1"), 0, 0, 0, 2)
	data = append(data, v1(kindCharge, m, 42)...)
	data = append(data, v1(kindRelease, lease, 1)...)
	data = binary.BigEndian.AppendUint32(data, crc32.Checksum(data, castagnoli))
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	j := newJournal(t, f, Config{File: file, Clock: clock})
	if n, err := j.Restore([]*limiter.Policy{m, lease}); n != 2 || err != nil {
		t.Fatalf("Restore: %d, %v", n, err)
	}
	drain(t, j)
	if got, held := f.recorded(t, m, sub), f.recorded(t, lease, sub); got != 42 || held != 1 {
		t.Fatalf("recorded %d, %d leases held; want 42 and 1", got, held)
	}
}
