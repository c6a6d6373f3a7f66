package loadgen

import (
	"errors"
	"os"
	"testing"
	"time"
)

// A real /proc/<pid>/stat line, with a command name holding spaces and a
// ')' to show that fields are counted from the last ')'. utime = 1234,
// stime = 567.
const statFixture = "4242 (rls (floor) x) S 1 4242 4242 0 -1 4194560 2870 0 0 0 1234 567 0 0 20 0 7 0 1017 1264779264 4318 18446744073709551615 1 1 0 0 0 0 0 0 2143420159 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n"

func TestParseStatCPU(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    uint64
		wantErr bool
	}{
		{name: "fixture", in: statFixture, want: 1234 + 567},
		{name: "plain name", in: "1 (init) S 0 1 1 0 -1 4194560 1 2 3 4 10 20 0 0 20 0 1 0 5 6 7", want: 30},
		{name: "no paren", in: "1 init S 0 1 1", wantErr: true},
		{name: "truncated", in: "1 (init) S 0 1 1 0 -1 4194560 1 2 3 4 10", wantErr: true},
		{name: "not a number", in: "1 (init) S 0 1 1 0 -1 4194560 1 2 3 4 x 20 0", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseStatCPU(tc.in)
			if tc.wantErr {
				if !errors.Is(err, ErrBadStat) {
					t.Fatalf("err = %v, want ErrBadStat", err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %d, %v; want %d", got, err, tc.want)
			}
		})
	}
	if got := TicksToDuration(1801); got != 18010*time.Millisecond {
		t.Errorf("TicksToDuration(1801) = %v", got)
	}
}

func TestProcessCPUOfSelfGrows(t *testing.T) {
	before, err := ProcessCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	s0, err := SelfCPU()
	if err != nil {
		t.Fatal(err)
	}
	// Burn ≥ 50 ms of CPU so both readers (10 ms and 1 µs resolution) move.
	x := uint64(1)
	for end := time.Now().Add(60 * time.Millisecond); time.Now().Before(end); {
		x = x*6364136223846793005 + 1
	}
	_ = x
	after, err := ProcessCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	s1, err := SelfCPU()
	if err != nil {
		t.Fatal(err)
	}
	if after <= before {
		t.Errorf("/proc CPU did not grow: %v → %v", before, after)
	}
	if s1-s0 < 40*time.Millisecond {
		t.Errorf("getrusage CPU grew by %v, want ≥ 40ms", s1-s0)
	}
	if _, err := ProcessCPU(-1); err == nil {
		t.Error("ProcessCPU(-1): want error")
	}
}
