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
	// Burn CPU until getrusage shows 50 ms more (bounded in wall time, since
	// a busy machine gives us only part of a core), then /proc, at 10 ms
	// resolution, must have moved too.
	x := uint64(1)
	var s1 time.Duration
	for deadline := time.Now().Add(10 * time.Second); s1-s0 < 50*time.Millisecond; {
		if time.Now().After(deadline) {
			t.Fatalf("getrusage CPU grew by only %v in 10 s of busy loop", s1-s0)
		}
		for range 100_000 {
			x = x*6364136223846793005 + 1
		}
		if s1, err = SelfCPU(); err != nil {
			t.Fatal(err)
		}
	}
	_ = x
	after, err := ProcessCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if after <= before {
		t.Errorf("/proc CPU did not grow: %v → %v", before, after)
	}
	if _, err := ProcessCPU(-1); err == nil {
		t.Error("ProcessCPU(-1): want error")
	}
}

func TestParseLoadAvg(t *testing.T) {
	if v, err := ParseLoadAvg("0.52 0.58 0.59 1/467 12345\n"); err != nil || v != 0.52 {
		t.Fatalf("ParseLoadAvg = %v, %v", v, err)
	}
	for _, bad := range []string{"", "x 1 2"} {
		if _, err := ParseLoadAvg(bad); err == nil {
			t.Errorf("ParseLoadAvg(%q): want error", bad)
		}
	}
}

func TestParseMachineBusy(t *testing.T) {
	const stat = "cpu  100 5 30 9000 40 2 3 1 50 0\ncpu0 50 2 15 4500 20 1 1 0 25 0\nintr 1 2 3\n"
	if got, err := ParseMachineBusy(stat); err != nil || got != 100+5+30+2+3+1 {
		t.Fatalf("ParseMachineBusy = %d, %v; want 141", got, err)
	}
	for _, bad := range []string{"intr 1 2\n", "cpu 1 2 3\n", "cpu 1 2 3 4 5 x 7 8\n"} {
		if _, err := ParseMachineBusy(bad); !errors.Is(err, ErrBadStat) {
			t.Errorf("ParseMachineBusy(%q) = %v, want ErrBadStat", bad, err)
		}
	}
	if _, err := MachineBusy(); err != nil {
		t.Fatal(err)
	}
}

func TestParseStatusMemory(t *testing.T) {
	rss, hwm, err := ParseStatusMemory("Name:\tenvoy-rls\nVmPeak:\t  1300 kB\nVmHWM:\t   41236 kB\nVmRSS:\t   39012 kB\nThreads:\t9\n")
	if err != nil || rss != 39012 || hwm != 41236 {
		t.Fatalf("rss %d hwm %d err %v", rss, hwm, err)
	}
	for _, bad := range []string{"Name:\tx\n", "VmRSS:\t12 MB\nVmHWM:\t1 kB\n", "VmRSS:\tx kB\nVmHWM:\t1 kB\n"} {
		if _, _, err := ParseStatusMemory(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	if rss, hwm, err := ProcessMemory(os.Getpid()); err != nil || rss <= 0 || hwm < rss {
		t.Fatalf("own process: rss %d hwm %d err %v", rss, hwm, err)
	}
}
