package loadgen

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/procfs"
)

// Meter reads what a measured phase costs: the load tool's own CPU
// (getrusage), and, given their PIDs, the server's and other processes'
// (e.g. Redis's) from /proc, and what the rest of the machine used
// meanwhile. Begin, then End; it is not safe for concurrent use.
type Meter struct {
	proc      Proc
	procErr   error
	serverPID int
	auxPIDs   map[string]int

	t0                    time.Time
	self0, server0, busy0 time.Duration
	aux0                  map[string]time.Duration
}

// Usage is what a Meter read between Begin and End.
type Usage struct {
	Elapsed time.Duration
	Self    time.Duration // the load tool's CPU
	// Server is the server's CPU; set only with a server PID.
	Server *time.Duration
	// Aux is the CPU of each named auxiliary process.
	Aux map[string]time.Duration
	// OtherCores is the CPU that every process but the tool, the server
	// and the auxiliary ones used, in cores (from /proc/stat); set only
	// with a server PID, since otherwise the server is one of them.
	OtherCores *float64
	// RSSKiB and HWMKiB are the server's resident set at End and its peak
	// since it started (VmRSS, VmHWM), when readable.
	RSSKiB, HWMKiB *int64
}

// NewMeter returns a Meter of the server serverPID (0: none) and the
// auxiliary processes aux (name → PID). It fails only when a PID is given
// and /proc cannot be read.
func NewMeter(serverPID int, aux map[string]int) (*Meter, error) {
	proc, err := NewProc(procfs.DefaultMountPoint)
	if err != nil && (serverPID > 0 || len(aux) > 0) {
		return nil, err
	}
	return &Meter{proc: proc, procErr: err, serverPID: serverPID, auxPIDs: aux,
		aux0: make(map[string]time.Duration, len(aux))}, nil
}

// LoadAvg1 returns the machine's 1-minute load average, nil when
// unreadable (it is informative only).
func (m *Meter) LoadAvg1() *float64 {
	if m.procErr != nil {
		return nil
	}
	la, err := m.proc.LoadAvg1()
	if err != nil {
		return nil
	}
	return &la
}

// Begin reads the counters at the start of the measured phase.
func (m *Meter) Begin() error {
	var err error
	if m.serverPID > 0 {
		if m.server0, err = m.proc.ProcessCPU(m.serverPID); err != nil {
			return err
		}
	}
	for name, pid := range m.auxPIDs {
		if m.aux0[name], err = m.proc.ProcessCPU(pid); err != nil {
			return err
		}
	}
	if m.serverPID > 0 {
		if m.busy0, err = m.proc.MachineBusy(); err != nil {
			return err
		}
	}
	if m.self0, err = SelfCPU(); err != nil {
		return err
	}
	m.t0 = time.Now()
	return nil
}

// End reads the counters at the end of the measured phase and returns
// what was used since Begin.
func (m *Meter) End() (Usage, error) {
	u := Usage{Elapsed: time.Since(m.t0)}
	self1, err := SelfCPU()
	if err != nil {
		return u, err
	}
	u.Self = self1 - m.self0
	var busy1 time.Duration
	if m.serverPID > 0 {
		if busy1, err = m.proc.MachineBusy(); err != nil {
			return u, err
		}
	}
	known := u.Self // CPU of the processes this run knows about
	if m.serverPID > 0 {
		srv1, err := m.proc.ProcessCPU(m.serverPID)
		if err != nil {
			return u, err
		}
		d := srv1 - m.server0
		u.Server = &d
		known += d
		if rss, hwm, err := m.proc.ProcessMemory(m.serverPID); err == nil {
			u.RSSKiB, u.HWMKiB = &rss, &hwm
		}
	}
	for name, pid := range m.auxPIDs {
		cpu, err := m.proc.ProcessCPU(pid)
		if err != nil {
			return u, err
		}
		if u.Aux == nil {
			u.Aux = make(map[string]time.Duration, len(m.auxPIDs))
		}
		u.Aux[name] = cpu - m.aux0[name]
		known += cpu - m.aux0[name]
	}
	if m.serverPID > 0 {
		// Tick granularity (10 ms per reading) can make this slightly
		// negative; clamp at 0.
		other := max(float64(busy1-m.busy0-known)/float64(u.Elapsed), 0)
		u.OtherCores = &other
	}
	return u, nil
}

// MicrosPer returns cpu in µs per unit of work, nil when n is 0.
func MicrosPer(cpu time.Duration, n uint64) *float64 {
	if n == 0 {
		return nil
	}
	v := float64(cpu) / float64(time.Microsecond) / float64(n)
	return &v
}

// AuxMicrosPer returns each auxiliary process's CPU in µs per unit of
// work, nil when there is none or n is 0.
func (u Usage) AuxMicrosPer(n uint64) map[string]float64 {
	var out map[string]float64
	for name, cpu := range u.Aux {
		if v := MicrosPer(cpu, n); v != nil {
			if out == nil {
				out = make(map[string]float64, len(u.Aux))
			}
			out[name] = *v
		}
	}
	return out
}

// DefineAuxPIDs defines the repeatable -aux-pid name=pid flag on fs,
// filling *into; what names the CPU figure of each such process.
func DefineAuxPIDs(fs *flag.FlagSet, into *map[string]int, what string) {
	fs.Func("aux-pid", "name=pid of another process (e.g. redis=1234) whose CPU µs per "+what+" to report; repeatable", func(v string) error {
		name, pidS, ok := strings.Cut(v, "=")
		pid, err := strconv.Atoi(pidS)
		if !ok || name == "" || err != nil || pid <= 0 {
			return fmt.Errorf("want name=pid, got %q", v)
		}
		if *into == nil {
			*into = map[string]int{}
		}
		(*into)[name] = pid
		return nil
	})
}
