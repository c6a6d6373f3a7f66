package loadgen

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/procfs"
)

// A real /proc/<pid>/stat line, with a command name holding spaces and a
// ')' to show that fields are counted from the last ')'. utime = 1234,
// stime = 567.
const statFixture = "4242 (rls (floor) x) S 1 4242 4242 0 -1 4194560 2870 0 0 0 1234 567 0 0 20 0 7 0 1017 1264779264 4318 18446744073709551615 1 1 0 0 0 0 0 0 2143420159 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n"

const statusFixture = "Name:\tenvoy-rls\nVmPeak:\t  1300 kB\nVmHWM:\t   41236 kB\nVmRSS:\t   39012 kB\nThreads:\t9\n"

// fakeProc writes files (path relative to the mount point → content) into
// a temporary proc tree and returns a Proc reading it.
func fakeProc(t *testing.T, files map[string]string) Proc {
	t.Helper()
	root := t.TempDir()
	for name, content := range files {
		path := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p, err := NewProc(root)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestProcessCPUFromStat(t *testing.T) {
	tests := []struct {
		name    string
		stat    string
		want    time.Duration
		wantErr bool
	}{
		{name: "fixture", stat: statFixture, want: TicksToDuration(1234 + 567)},
		{name: "plain name", stat: "1 (init) S 0 1 1 0 -1 4194560 1 2 3 4 10 20 0 0 20 0 1 0 5 6 7 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n", want: 300 * time.Millisecond},
		{name: "truncated", stat: "1 (init) S 0 1 1 0 -1 4194560 1 2 3 4 10", wantErr: true},
		{name: "no paren", stat: "1 init S 0 1 1", wantErr: true},
		{name: "not a number", stat: "1 (init) S 0 1 1 0 -1 4194560 1 2 3 4 x 20 0 0 20 0 1 0 5 6 7 8 9 10", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := fakeProc(t, map[string]string{"4242/stat": tc.stat})
			got, err := p.ProcessCPU(4242)
			if tc.wantErr {
				if !errors.Is(err, ErrBadStat) {
					t.Fatalf("got %v, %v; want ErrBadStat", got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
	if _, err := fakeProc(t, nil).ProcessCPU(4242); err == nil {
		t.Error("ProcessCPU of a missing pid: want an error")
	}
	if got := TicksToDuration(1801); got != 18010*time.Millisecond {
		t.Errorf("TicksToDuration(1801) = %v", got)
	}
}

func TestProcessCPUOfSelfGrows(t *testing.T) {
	p, err := NewProc(procfs.DefaultMountPoint)
	if err != nil {
		t.Fatal(err)
	}
	before, err := p.ProcessCPU(os.Getpid())
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
	after, err := p.ProcessCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if after <= before {
		t.Errorf("/proc CPU did not grow: %v → %v", before, after)
	}
	if _, err := p.ProcessCPU(-1); err == nil {
		t.Error("ProcessCPU(-1): want error")
	}
}

func TestLoadAvg1(t *testing.T) {
	if v, err := fakeProc(t, map[string]string{"loadavg": "0.52 0.58 0.59 1/467 12345\n"}).LoadAvg1(); err != nil || v != 0.52 {
		t.Fatalf("LoadAvg1 = %v, %v", v, err)
	}
	for _, bad := range []string{"", "x 1 2"} {
		if _, err := fakeProc(t, map[string]string{"loadavg": bad}).LoadAvg1(); !errors.Is(err, ErrBadStat) {
			t.Errorf("loadavg %q: %v, want ErrBadStat", bad, err)
		}
	}
}

func TestMachineBusy(t *testing.T) {
	const stat = "cpu  100 5 30 9000 40 2 3 1 50 0\ncpu0 50 2 15 4500 20 1 1 0 25 0\nintr 1 2 3\n"
	got, err := fakeProc(t, map[string]string{"stat": stat}).MachineBusy()
	if want := TicksToDuration(100 + 5 + 30 + 2 + 3 + 1); err != nil || got != want {
		t.Fatalf("MachineBusy = %v, %v; want %v (user nice system irq softirq steal)", got, err, want)
	}
	if _, err := fakeProc(t, map[string]string{"stat": "cpu 1 2 3 4 5 x 7 8\n"}).MachineBusy(); !errors.Is(err, ErrBadStat) {
		t.Errorf("malformed cpu line: %v, want ErrBadStat", err)
	}
	p, err := NewProc(procfs.DefaultMountPoint)
	if err != nil {
		t.Fatal(err)
	}
	if busy, err := p.MachineBusy(); err != nil || busy <= 0 {
		t.Fatalf("this machine: %v, %v", busy, err)
	}
}

func TestProcessMemory(t *testing.T) {
	rss, hwm, err := fakeProc(t, map[string]string{"4242/status": statusFixture}).ProcessMemory(4242)
	if err != nil || rss != 39012 || hwm != 41236 {
		t.Fatalf("rss %d hwm %d err %v", rss, hwm, err)
	}
	for _, bad := range []string{"Name:\tx\n", "VmRSS:\tx kB\nVmHWM:\t1 kB\n"} {
		if _, _, err := fakeProc(t, map[string]string{"4242/status": bad}).ProcessMemory(4242); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	p, err := NewProc(procfs.DefaultMountPoint)
	if err != nil {
		t.Fatal(err)
	}
	if rss, hwm, err := p.ProcessMemory(os.Getpid()); err != nil || rss <= 0 || hwm < rss {
		t.Fatalf("own process: rss %d hwm %d err %v", rss, hwm, err)
	}
}
