package loadgen

import (
	"encoding/json"
	"io"
	"time"
)

// Result is the one JSON line rls-load prints. Latencies are of calls that
// got a response (errors are counted, not timed); CPU figures are per
// decision, a decision being a response of any overall_code.
type Result struct {
	Time        string  `json:"time"` // start of the run, RFC 3339 UTC
	Label       string  `json:"label"`
	Addr        string  `json:"addr"`
	Concurrency int     `json:"concurrency"`
	Connections int     `json:"connections"`
	DurationS   float64 `json:"duration_s"` // measured phase, wall clock
	WarmupS     float64 `json:"warmup_s"`

	Requests    uint64            `json:"requests"` // calls started in the measured phase
	RPS         float64           `json:"rps"`      // decisions per second
	OK          uint64            `json:"ok"`
	OverLimit   uint64            `json:"over_limit"`
	Unknown     uint64            `json:"unknown"`      // responses with overall_code UNKNOWN
	Errors      map[string]uint64 `json:"errors"`       // failed calls by gRPC code name
	ErrorsTotal uint64            `json:"errors_total"` // sum of Errors
	// Unmatched are the responses whose statuses carry no current limit:
	// the server matched no rule to the call (see Warning).
	Unmatched uint64 `json:"unmatched"`
	// Warning, when set, says why the run's figures do not measure what
	// they seem to: every response was unmatched.
	Warning string `json:"warning,omitempty"`

	P50Ms  float64 `json:"p50_ms"`
	P90Ms  float64 `json:"p90_ms"`
	P99Ms  float64 `json:"p99_ms"`
	P999Ms float64 `json:"p999_ms"`
	MaxMs  float64 `json:"max_ms"`
	MeanMs float64 `json:"mean_ms"`

	ServerCPUUsPerDecision *float64 `json:"server_cpu_us_per_decision,omitempty"`
	// ServerRSSKiB and ServerHWMKiB are the server's resident set (VmRSS)
	// at the end of the measured phase and its peak (VmHWM) since start,
	// from /proc/<pid>/status, with -server-pid.
	ServerRSSKiB           *int64   `json:"server_rss_kib,omitempty"`
	ServerHWMKiB           *int64   `json:"server_hwm_kib,omitempty"`
	ProcClockTicksPerS     int      `json:"proc_clock_ticks_per_s,omitempty"` // assumed USER_HZ of /proc figures
	ClientCPUUsPerDecision *float64 `json:"client_cpu_us_per_decision,omitempty"`
	// AuxCPUUsPerDecision is the CPU per decision of each Config.AuxPIDs
	// process (e.g. "redis"), read like the server's.
	AuxCPUUsPerDecision map[string]float64 `json:"aux_cpu_us_per_decision,omitempty"`
	LoadAvg1            *float64           `json:"loadavg_1m,omitempty"` // machine load at the start: other work skews figures
	// OtherCPUCores is the CPU that processes other than the load tool, the
	// server and the aux processes used during the measured phase, in cores
	// (from /proc/stat). Near 0 means the run had the machine to itself;
	// present only with ServerPID, since otherwise the server is "other".
	OtherCPUCores *float64 `json:"other_cpu_cores,omitempty"`

	Domain      string `json:"domain"`
	Descriptors string `json:"descriptors"`
	Subjects    int    `json:"subjects"`
	Dist        string `json:"dist"`
	Seed        uint64 `json:"seed"`
	Hits        uint32 `json:"hits"`
	MaxRequests uint64 `json:"max_requests,omitempty"`
	NumCPU      int    `json:"num_cpu"`
	GoMaxProcs  int    `json:"gomaxprocs"` // of the load tool
}

// Decisions returns the number of calls that got a response.
func (r *Result) Decisions() uint64 { return r.OK + r.OverLimit + r.Unknown }

// WriteJSONLine writes r as one line of JSON followed by a newline.
func (r *Result) WriteJSONLine(w io.Writer) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
