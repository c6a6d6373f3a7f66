package loadgen

import (
	"errors"
	"fmt"
	"math"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
)

// ClockTicksPerSecond is the unit of utime and stime in /proc/<pid>/stat and
// of the cpu lines of /proc/stat. It is sysconf(_SC_CLK_TCK), which the
// Linux kernel fixes at USER_HZ = 100 for user space on every mainstream
// architecture; procfs assumes the same.
const ClockTicksPerSecond = 100

// ErrBadStat is returned when a /proc file cannot be read as expected.
var ErrBadStat = errors.New("loadgen: malformed /proc data")

// Proc reads the figures of a run from a proc filesystem (normally /proc)
// through github.com/prometheus/procfs. It holds no state beyond the mount
// point and is safe for concurrent use.
type Proc struct {
	fs procfs.FS
}

// NewProc returns a Proc reading the proc filesystem mounted at
// mountPoint (procfs.DefaultMountPoint for the machine's own).
func NewProc(mountPoint string) (Proc, error) {
	fs, err := procfs.NewFS(mountPoint)
	if err != nil {
		return Proc{}, fmt.Errorf("loadgen: %w", err)
	}
	return Proc{fs: fs}, nil
}

// TicksToDuration converts clock ticks to a duration.
func TicksToDuration(ticks uint64) time.Duration {
	return time.Duration(ticks) * (time.Second / ClockTicksPerSecond)
}

// ProcessCPU returns the user+system CPU time consumed so far by process
// pid: utime+stime of /proc/<pid>/stat (resolution 10 ms).
func (p Proc) ProcessCPU(pid int) (time.Duration, error) {
	proc, err := p.fs.Proc(pid)
	if err != nil {
		return 0, fmt.Errorf("loadgen: reading the CPU of pid %d: %w", pid, err)
	}
	st, err := proc.Stat()
	if err != nil {
		return 0, fmt.Errorf("%w: pid %d: %w", ErrBadStat, pid, err)
	}
	return TicksToDuration(uint64(st.UTime) + uint64(st.STime)), nil
}

// ProcessMemory returns the resident set (VmRSS) and its peak (VmHWM), in
// KiB, of process pid, from /proc/<pid>/status.
func (p Proc) ProcessMemory(pid int) (rssKiB, hwmKiB int64, err error) {
	proc, err := p.fs.Proc(pid)
	if err != nil {
		return 0, 0, fmt.Errorf("loadgen: reading the memory of pid %d: %w", pid, err)
	}
	st, err := proc.NewStatus()
	if err != nil {
		return 0, 0, fmt.Errorf("%w: pid %d: %w", ErrBadStat, pid, err)
	}
	if st.VmRSS == 0 || st.VmHWM == 0 {
		// A process with user memory always has both; a kernel thread or a
		// truncated file has neither.
		return 0, 0, fmt.Errorf("%w: pid %d: VmRSS or VmHWM missing", ErrBadStat, pid)
	}
	return int64(st.VmRSS / 1024), int64(st.VmHWM / 1024), nil
}

// MachineBusy returns the CPU time all processes on the machine have used
// so far, from the "cpu" line of /proc/stat: user, nice, system, irq,
// softirq and steal (guest time is already inside user and nice; idle and
// iowait are not busy).
func (p Proc) MachineBusy() (time.Duration, error) {
	st, err := p.fs.Stat()
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrBadStat, err)
	}
	c := st.CPUTotal
	secs := c.User + c.Nice + c.System + c.IRQ + c.SoftIRQ + c.Steal
	// procfs reports seconds (ticks / USER_HZ): back to whole ticks.
	return TicksToDuration(uint64(math.Round(secs * ClockTicksPerSecond))), nil
}

// LoadAvg1 returns the machine's 1-minute load average, from /proc/loadavg.
func (p Proc) LoadAvg1() (float64, error) {
	la, err := p.fs.LoadAvg()
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrBadStat, err)
	}
	return la.Load1, nil
}

// SelfCPU returns the user+system CPU time consumed so far by this process,
// from getrusage(2) (microsecond resolution).
func SelfCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("loadgen: getrusage: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}
