package rlqsload

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/envoy-rls/envoy-rls/internal/rlqstest"
	"github.com/envoy-rls/envoy-rls/tools/internal/loadgen"
)

const (
	// driveStep is how often a proxy's driver sends its due requests.
	driveStep = 50 * time.Millisecond
	// maxStepLag bounds the requests one driver step catches up on.
	maxStepLag = time.Second
	// pollEvery is how often the tool looks for assignments.
	pollEvery = 5 * time.Millisecond
	// goldenRatio spreads the buckets' first periodic requests over 1/Rate.
	goldenRatio = 0.6180339887498949
)

// Result is the one JSON line rlqs-load prints. A report is one bucket's
// usage in one message (a proxy's periodic message carries every bucket it
// knows); CPU figures are per report.
type Result struct {
	Time          string  `json:"time"` // start of the run, RFC 3339 UTC
	Label         string  `json:"label"`
	Addr          string  `json:"addr"`
	Domain        string  `json:"domain"`
	Proxies       int     `json:"proxies"`
	Buckets       int     `json:"buckets"` // per proxy
	Disjoint      bool    `json:"disjoint"`
	IntervalS     float64 `json:"interval_s"`
	RatePerBucket float64 `json:"rate_per_bucket"` // requests per second, at each proxy
	TickS         float64 `json:"tick_s"`
	// RampS is the time from the start until every proxy held an
	// assignment for each of its buckets.
	RampS     float64 `json:"ramp_s"`
	WarmupS   float64 `json:"warmup_s"`
	DurationS float64 `json:"duration_s"` // measured phase, wall clock

	// Reports are the bucket usages the proxies sent in the measured
	// phase, in Messages messages.
	Reports     uint64  `json:"reports"`
	ReportsPerS float64 `json:"reports_per_s"`
	Messages    uint64  `json:"messages"`
	// Requests the proxies decided in the measured phase, Denied of them
	// denied; Assignments they applied.
	Requests    uint64 `json:"requests"`
	Denied      uint64 `json:"denied"`
	Assignments uint64 `json:"assignments"`
	// Over the whole run: streams the server or the network ended,
	// failed attempts to open one, reports built with no stream to carry
	// them. A fleet that holds has none.
	StreamsClosed  int `json:"streams_closed"`
	OpenFailures   int `json:"open_failures"`
	ReportsDropped int `json:"reports_dropped"`
	// Warning, when set, says why the figures do not measure a fleet that
	// holds.
	Warning string `json:"warning,omitempty"`

	ServerCPUUsPerReport *float64           `json:"server_cpu_us_per_report,omitempty"`
	AuxCPUUsPerReport    map[string]float64 `json:"aux_cpu_us_per_report,omitempty"`
	ClientCPUUsPerReport *float64           `json:"client_cpu_us_per_report,omitempty"`
	ServerRSSKiB         *int64             `json:"server_rss_kib,omitempty"`
	ServerHWMKiB         *int64             `json:"server_hwm_kib,omitempty"`
	ProcClockTicksPerS   int                `json:"proc_clock_ticks_per_s,omitempty"`
	OtherCPUCores        *float64           `json:"other_cpu_cores,omitempty"`
	LoadAvg1             *float64           `json:"loadavg_1m,omitempty"`

	// Probes: every proxy requested a bucket it never used, Probes times;
	// ProbeSamples are the (proxy, probe) pairs that got an assignment.
	Probes       int `json:"probes"`
	ProbeSamples int `json:"probe_samples"`
	// ProbesDeniedFirst are the (proxy, probe) pairs seen holding a
	// DENY_ALL before their first assignment that admits (the tool polls
	// every 5 ms, so it may miss some). The times below are to the
	// assignment that admits.
	ProbesDeniedFirst int `json:"probes_denied_first"`
	// AssignedP50Ms and AssignedMaxMs: from a proxy's first request of a
	// probe bucket to the proxy applying the bucket's first assignment
	// (up to a tick waiting for the next tick, plus the tick's work and
	// the delivery).
	AssignedP50Ms *float64 `json:"assigned_p50_ms,omitempty"`
	AssignedMaxMs *float64 `json:"assigned_max_ms,omitempty"`
	// FromTickP50Ms and FromTickMaxMs: from the tick that made that
	// assignment (the last whole multiple of the tick before the proxy
	// applied it) to the proxy applying it: how long one revision of every
	// assignment takes to reach every proxy.
	FromTickP50Ms *float64 `json:"from_tick_p50_ms,omitempty"`
	FromTickMaxMs *float64 `json:"from_tick_max_ms,omitempty"`

	NumCPU int `json:"num_cpu"`
}

// WriteJSONLine writes r as one line of JSON followed by a newline.
func (r *Result) WriteJSONLine(w io.Writer) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// Run starts cfg.Proxies simulated proxies against cfg.Addr, each making
// cfg.Buckets buckets (at most cfg.Ramp new ones a second) and sending
// cfg.Rate requests a second to each. Once every bucket holds an
// assignment it waits cfg.Warmup, measures for cfg.Duration, then runs
// cfg.Probes probes; it stops every proxy before it returns. A cancelled
// ctx ends the run with ctx's error.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	start := time.Now()
	meter, err := loadgen.NewMeter(cfg.ServerPID, cfg.AuxPIDs)
	if err != nil {
		return nil, err
	}
	res := &Result{
		Time: start.UTC().Format(time.RFC3339), Label: cfg.Label, Addr: cfg.Addr, Domain: cfg.Domain,
		Proxies: cfg.Proxies, Buckets: cfg.Buckets, Disjoint: cfg.Disjoint,
		IntervalS: cfg.Interval.Seconds(), RatePerBucket: cfg.Rate, TickS: cfg.Tick.Seconds(),
		WarmupS: cfg.Warmup.Seconds(), Probes: cfg.Probes, NumCPU: runtime.NumCPU(),
		LoadAvg1: meter.LoadAvg1(),
	}

	fleet := make([]*rlqstest.Proxy, cfg.Proxies)
	for i := range fleet {
		if fleet[i], err = rlqstest.New(rlqstest.Config{Domain: cfg.Domain, Targets: []string{cfg.Addr},
			Interval: cfg.Interval, MaxBuckets: cfg.Buckets + cfg.Probes}); err != nil {
			return nil, fmt.Errorf("rlqsload: proxy %d: %w", i, err)
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
		for _, p := range fleet {
			p.Stop()
		}
	}()
	for i, p := range fleet {
		wg.Go(func() { drive(ctx, &cfg, i, p) })
	}

	if err := waitAssigned(ctx, &cfg, fleet); err != nil {
		return nil, err
	}
	res.RampS = time.Since(start).Seconds()
	if err := loadgen.Sleep(ctx, cfg.Warmup); err != nil {
		return nil, err
	}

	before := snapshot(fleet)
	if err := meter.Begin(); err != nil {
		return nil, err
	}
	if err := loadgen.Sleep(ctx, cfg.Duration); err != nil {
		return nil, err
	}
	use, err := meter.End()
	if err != nil {
		return nil, err
	}
	after := snapshot(fleet)
	var warnings []string
	for i := range fleet {
		b, a := before[i], after[i]
		if b.Buckets != cfg.Buckets || a.Buckets != cfg.Buckets {
			warnings = append(warnings, fmt.Sprintf("proxy %d held %d and then %d buckets in the measured phase, not %d", i, b.Buckets, a.Buckets, cfg.Buckets))
		}
		msgs := uint64(a.ReportsSent - b.ReportsSent)
		res.Messages += msgs
		res.Reports += msgs * uint64(a.Buckets)
		res.Requests += a.Allowed + a.Denied - b.Allowed - b.Denied
		res.Denied += a.Denied - b.Denied
		res.Assignments += uint64(a.Assignments - b.Assignments)
	}
	res.DurationS = use.Elapsed.Seconds()
	res.ReportsPerS = float64(res.Reports) / use.Elapsed.Seconds()
	res.ClientCPUUsPerReport = loadgen.MicrosPer(use.Self, res.Reports)
	if use.Server != nil {
		res.ServerCPUUsPerReport = loadgen.MicrosPer(*use.Server, res.Reports)
		res.ServerRSSKiB, res.ServerHWMKiB = use.RSSKiB, use.HWMKiB
		res.ProcClockTicksPerS = loadgen.ClockTicksPerSecond
	}
	if len(use.Aux) > 0 {
		res.AuxCPUUsPerReport = use.AuxMicrosPer(res.Reports)
		res.ProcClockTicksPerS = loadgen.ClockTicksPerSecond
	}
	res.OtherCPUCores = use.OtherCores
	if res.Denied > 0 {
		warnings = append(warnings, fmt.Sprintf("%d requests were denied: the rule's limit is below the load, so the run measured quotas being spent, not a fleet at ease", res.Denied))
	}

	assigned, fromTick, missed, deniedFirst, err := probe(ctx, &cfg, fleet)
	if err != nil {
		return nil, err
	}
	res.ProbesDeniedFirst = deniedFirst
	if missed > 0 {
		warnings = append(warnings, fmt.Sprintf("%d of %d probe requests got no assignment within %v", missed, cfg.Probes*cfg.Proxies, probeTimeout(&cfg)))
	}
	res.ProbeSamples = len(assigned)
	res.AssignedP50Ms, res.AssignedMaxMs = quantileMs(assigned, 0.5), quantileMs(assigned, 1)
	res.FromTickP50Ms, res.FromTickMaxMs = quantileMs(fromTick, 0.5), quantileMs(fromTick, 1)

	for _, s := range snapshot(fleet) {
		res.StreamsClosed += s.StreamsClosed
		res.OpenFailures += s.OpenFailures
		res.ReportsDropped += s.ReportsDropped
	}
	if res.StreamsClosed+res.OpenFailures+res.ReportsDropped > 0 {
		warnings = append(warnings, fmt.Sprintf("the fleet did not hold: %d streams ended, %d failed to open, %d reports dropped",
			res.StreamsClosed, res.OpenFailures, res.ReportsDropped))
	}
	res.Warning = strings.Join(warnings, "; ")
	return res, nil
}

// drive runs proxy i: it starts it (the proxies spread over one interval,
// as a fleet's report timers are), makes its buckets at cfg.Ramp a second
// and sends each bucket cfg.Rate requests a second until ctx ends.
func drive(ctx context.Context, cfg *Config, i int, p *rlqstest.Proxy) {
	if loadgen.Sleep(ctx, time.Duration(i)*cfg.Interval/time.Duration(cfg.Proxies)) != nil {
		return
	}
	p.Start(ctx)
	ids := make([]map[string]string, cfg.Buckets)
	for k := range ids {
		ids[k] = cfg.BucketID(i, k)
	}
	credit := make([]float64, cfg.Buckets)
	created := 0
	begin := time.Now()
	last := begin
	t := time.NewTicker(driveStep)
	defer t.Stop()
	for {
		now := time.Now()
		dt := min(now.Sub(last), maxStepLag).Seconds()
		last = now
		for k := range created {
			credit[k] += cfg.Rate * dt
			for ; credit[k] >= 1; credit[k]-- {
				p.Request(ids[k])
			}
		}
		for want := min(cfg.Buckets, 1+int(now.Sub(begin).Seconds()*cfg.Ramp)); created < want; created++ {
			p.Request(ids[created])
			credit[created] = math.Mod(float64(created)*goldenRatio, 1)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// waitAssigned waits until every proxy holds an assignment that admits
// requests for each of its buckets, within the ramp's time plus ten ticks
// and intervals.
func waitAssigned(ctx context.Context, cfg *Config, fleet []*rlqstest.Proxy) error {
	limit := time.Duration(float64(cfg.Buckets)/cfg.Ramp*float64(time.Second)) + cfg.Interval +
		10*(cfg.Tick+cfg.Interval)
	deadline := time.Now().Add(limit)
	done := make([]bool, len(fleet))
	left := len(fleet)
	for {
		for i, p := range fleet {
			if done[i] || p.Stats().Buckets < cfg.Buckets {
				continue
			}
			all := true
			for k := range cfg.Buckets {
				if a, ok := p.Assignment(cfg.BucketID(i, k)); !ok || !admits(a) {
					all = false
					break
				}
			}
			if all {
				done[i] = true
				left--
			}
		}
		if left == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			i := slices.Index(done, false)
			s := fleet[i].Stats()
			return fmt.Errorf("rlqsload: %d of %d proxies lack an assignment that admits for some bucket after %v (proxy %d: %d buckets, %d assignments, %d streams ended, %d reports dropped, open error %q)",
				left, len(fleet), limit, i, s.Buckets, s.Assignments, s.StreamsClosed, s.ReportsDropped, s.OpenError)
		}
		if err := loadgen.Sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
}

// probeTimeout bounds how long a probe waits for every proxy's
// assignment.
func probeTimeout(cfg *Config) time.Duration { return 3*cfg.Tick + 2*cfg.Interval + 5*time.Second }

// probe runs cfg.Probes probes: in each, every proxy requests a bucket
// nobody used before, and the probe waits until every proxy holds an
// assignment that admits requests for it. Probe j starts (j+½)/Probes of a
// tick after a tick, so the probes sample every phase of the tick. It
// returns, per (proxy, probe) that got one, the time from the request to
// the assignment and from the tick that made it; how many got none; and
// how many were seen holding a DENY_ALL first.
func probe(ctx context.Context, cfg *Config, fleet []*rlqstest.Proxy) (assigned, fromTick []time.Duration, missed, denied int, err error) {
	sent := make([]time.Time, len(fleet))
	for j := range cfg.Probes {
		now := time.Now()
		phase := time.Duration((float64(j) + 0.5) / float64(cfg.Probes) * float64(cfg.Tick))
		if err := loadgen.Sleep(ctx, now.Truncate(cfg.Tick).Add(cfg.Tick+phase).Sub(now)); err != nil {
			return nil, nil, 0, 0, err
		}
		for i, p := range fleet {
			sent[i] = time.Now()
			p.Request(cfg.ProbeID(i, j))
		}
		waiting := make([]int, len(fleet))
		deniedFirst := make([]bool, len(fleet))
		for i := range waiting {
			waiting[i] = i
		}
		deadline := sent[0].Add(probeTimeout(cfg))
		for len(waiting) > 0 && time.Now().Before(deadline) {
			waiting = slices.DeleteFunc(waiting, func(i int) bool {
				a, ok := fleet[i].Assignment(cfg.ProbeID(i, j))
				if ok && !admits(a) {
					if !deniedFirst[i] {
						deniedFirst[i] = true
						denied++
					}
					return false
				}
				if ok {
					assigned = append(assigned, a.At.Sub(sent[i]))
					fromTick = append(fromTick, a.At.Sub(a.At.Truncate(cfg.Tick)))
				}
				return ok
			})
			if err := loadgen.Sleep(ctx, pollEvery); err != nil {
				return nil, nil, 0, 0, err
			}
		}
		missed += len(waiting)
	}
	return assigned, fromTick, missed, denied, nil
}

// admits reports whether a lets requests through: the rule set's high
// limit gives every bucket a token bucket; a DENY_ALL is no quota.
func admits(a rlqstest.Assignment) bool {
	return a.Strategy.GetBlanketRule() != typev3.RateLimitStrategy_DENY_ALL
}

// snapshot returns every proxy's counters.
func snapshot(fleet []*rlqstest.Proxy) []rlqstest.Stats {
	out := make([]rlqstest.Stats, len(fleet))
	for i, p := range fleet {
		out[i] = p.Stats()
	}
	return out
}

// quantileMs returns the q-quantile of ds (nearest rank) in milliseconds,
// nil when ds is empty. It sorts ds.
func quantileMs(ds []time.Duration, q float64) *float64 {
	if len(ds) == 0 {
		return nil
	}
	slices.Sort(ds)
	idx := max(int(math.Ceil(q*float64(len(ds))))-1, 0)
	v := float64(ds[idx]) / float64(time.Millisecond)
	return &v
}
