package loadgen

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ClockTicksPerSecond is the unit of utime and stime in /proc/<pid>/stat.
// It is sysconf(_SC_CLK_TCK), which the Linux kernel fixes at USER_HZ = 100
// for user space on every mainstream architecture; reading it for real
// would need cgo, so we assume 100.
const ClockTicksPerSecond = 100

// ErrBadStat is returned when a /proc/<pid>/stat line cannot be parsed.
var ErrBadStat = errors.New("loadgen: malformed /proc stat line")

// ParseStatCPU returns utime+stime, in clock ticks, from the content of a
// /proc/<pid>/stat file. The command name (field 2) is in parentheses and
// may itself contain spaces and parentheses, so fields are counted from the
// last ')'.
func ParseStatCPU(stat string) (ticks uint64, err error) {
	end := strings.LastIndexByte(stat, ')')
	if end < 0 {
		return 0, fmt.Errorf("%w: no ')' after the command name", ErrBadStat)
	}
	// After ")": field 3 (state) is rest[0], so field k is rest[k-3];
	// utime is field 14 and stime field 15.
	rest := strings.Fields(stat[end+1:])
	if len(rest) < 13 {
		return 0, fmt.Errorf("%w: %d fields after the command name, want ≥ 13", ErrBadStat, len(rest))
	}
	u, err := strconv.ParseUint(rest[11], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: utime: %v", ErrBadStat, err)
	}
	s, err := strconv.ParseUint(rest[12], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: stime: %v", ErrBadStat, err)
	}
	return u + s, nil
}

// TicksToDuration converts clock ticks to a duration.
func TicksToDuration(ticks uint64) time.Duration {
	return time.Duration(ticks) * (time.Second / ClockTicksPerSecond)
}

// ProcessCPU returns the user+system CPU time consumed so far by process
// pid, read from /proc/<pid>/stat (resolution 10 ms).
func ProcessCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("loadgen: reading server CPU: %w", err)
	}
	t, err := ParseStatCPU(string(b))
	if err != nil {
		return 0, fmt.Errorf("loadgen: pid %d: %w", pid, err)
	}
	return TicksToDuration(t), nil
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

// ParseLoadAvg returns the 1-minute load average from the content of
// /proc/loadavg ("0.52 0.58 0.59 1/467 12345").
func ParseLoadAvg(s string) (float64, error) {
	f := strings.Fields(s)
	if len(f) < 1 {
		return 0, fmt.Errorf("loadgen: empty /proc/loadavg")
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return 0, fmt.Errorf("loadgen: /proc/loadavg: %w", err)
	}
	return v, nil
}

// LoadAvg1 returns the machine's 1-minute load average.
func LoadAvg1() (float64, error) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, fmt.Errorf("loadgen: %w", err)
	}
	return ParseLoadAvg(string(b))
}

// ParseMachineBusy returns the busy time of all CPUs, in clock ticks, from
// the content of /proc/stat: the "cpu" line's user, nice, system, irq,
// softirq and steal (guest time is already inside user and nice; idle and
// iowait are not busy).
func ParseMachineBusy(stat string) (uint64, error) {
	for line := range strings.Lines(stat) {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "cpu" {
			continue
		}
		if len(f) < 9 {
			return 0, fmt.Errorf("%w: /proc/stat cpu line has %d fields", ErrBadStat, len(f))
		}
		var busy uint64
		for _, i := range []int{1, 2, 3, 6, 7, 8} { // user nice system irq softirq steal
			v, err := strconv.ParseUint(f[i], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%w: /proc/stat: %v", ErrBadStat, err)
			}
			busy += v
		}
		return busy, nil
	}
	return 0, fmt.Errorf("%w: /proc/stat has no cpu line", ErrBadStat)
}

// MachineBusy returns the CPU time all processes on the machine have used
// so far, from /proc/stat.
func MachineBusy() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, fmt.Errorf("loadgen: %w", err)
	}
	t, err := ParseMachineBusy(string(b))
	if err != nil {
		return 0, err
	}
	return TicksToDuration(t), nil
}

// ParseStatusMemory returns VmRSS and VmHWM, in KiB, from the content of a
// /proc/<pid>/status file.
func ParseStatusMemory(status string) (rssKiB, hwmKiB int64, err error) {
	found := 0
	for line := range strings.Lines(status) {
		name, rest, ok := strings.Cut(line, ":")
		if !ok || (name != "VmRSS" && name != "VmHWM") {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, 0, fmt.Errorf("%w: %s: %q", ErrBadStat, name, strings.TrimSpace(rest))
		}
		v, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("%w: %s: %v", ErrBadStat, name, err)
		}
		if name == "VmRSS" {
			rssKiB = v
		} else {
			hwmKiB = v
		}
		found++
	}
	if found != 2 {
		return 0, 0, fmt.Errorf("%w: VmRSS or VmHWM missing", ErrBadStat)
	}
	return rssKiB, hwmKiB, nil
}

// ProcessMemory returns the resident set (VmRSS) and its peak (VmHWM), in
// KiB, of process pid.
func ProcessMemory(pid int) (rssKiB, hwmKiB int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, fmt.Errorf("loadgen: reading server memory: %w", err)
	}
	return ParseStatusMemory(string(b))
}
