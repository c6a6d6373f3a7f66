package loadgen

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// workerStats is what one worker counts in the measured phase; it is owned
// by that worker until Run merges it after the worker has returned.
type workerStats struct {
	hist      Histogram
	ok        uint64
	overLimit uint64
	unknown   uint64
	unmatched uint64
	errs      map[string]uint64
}

// phase is the state the coordinator shares with the workers.
type phase struct {
	measuring   atomic.Bool
	stop        atomic.Bool
	started     atomic.Uint64 // calls started in the measured phase
	maxRequests uint64
	limitOnce   sync.Once
	limitHit    chan struct{}
}

// admit reports whether a worker may start one more call, and whether that
// call belongs to the measured phase.
func (p *phase) admit() (ok, measured bool) {
	if p.stop.Load() {
		return false, false
	}
	if !p.measuring.Load() {
		return true, false
	}
	if p.maxRequests > 0 {
		n := p.started.Add(1)
		if n >= p.maxRequests {
			p.limitOnce.Do(func() { close(p.limitHit) })
		}
		if n > p.maxRequests {
			return false, false
		}
	}
	return true, true
}

// Run drives a closed loop of cfg.Concurrency workers, each with one
// ShouldRateLimit call in flight, for cfg.Warmup (not measured) and then
// cfg.Duration or cfg.MaxRequests calls, whichever ends first. It returns
// when every worker has stopped; a cancelled ctx stops the run early with
// ctx's error. Calls in flight when the measured phase ends are finished
// (bounded by cfg.Timeout) and counted.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	start := time.Now()
	meter, err := NewMeter(cfg.ServerPID, cfg.AuxPIDs)
	if err != nil {
		return nil, err
	}
	loadAvg := meter.LoadAvg1()
	conns, err := dialAll(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()

	names := SubjectNames(cfg.Subjects)
	pickers := make([]Picker, cfg.Concurrency)
	for i := range pickers {
		if pickers[i], err = NewPicker(cfg.Dist, cfg.Subjects, cfg.Seed, uint64(i)); err != nil {
			return nil, err
		}
	}
	ph := &phase{maxRequests: cfg.MaxRequests, limitHit: make(chan struct{})}
	stats := make([]*workerStats, cfg.Concurrency)
	var wg sync.WaitGroup
	stopAndWait := func() { ph.stop.Store(true); wg.Wait() }

	// beginMeasure snapshots the CPU counters and opens the measured phase.
	beginMeasure := func() error {
		if err := meter.Begin(); err != nil {
			return err
		}
		ph.measuring.Store(true)
		return nil
	}
	if cfg.Warmup == 0 {
		// Open the phase before any worker starts, so that no call escapes it.
		if err := beginMeasure(); err != nil {
			return nil, err
		}
	}
	for i := range cfg.Concurrency {
		st := &workerStats{}
		stats[i] = st
		tmpl := newRequestTemplate(cfg.Domain, cfg.Descriptors, cfg.Hits)
		wg.Go(func() {
			runWorker(ctx, conns[i%len(conns)], tmpl, pickers[i], names, cfg.Timeout, ph, st)
		})
	}
	if cfg.Warmup > 0 {
		err := Sleep(ctx, cfg.Warmup)
		if err == nil {
			err = beginMeasure()
		}
		if err != nil {
			stopAndWait()
			return nil, err
		}
	}

	timer := time.NewTimer(cfg.Duration)
	select {
	case <-timer.C:
	case <-ph.limitHit:
		timer.Stop()
	case <-ctx.Done():
		timer.Stop()
		stopAndWait()
		return nil, ctx.Err()
	}
	stopAndWait()
	use, err := meter.End()
	if err != nil {
		return nil, err
	}
	elapsed := use.Elapsed

	res := &Result{
		Time:        start.UTC().Format(time.RFC3339),
		Label:       cfg.Label,
		Addr:        cfg.Addr,
		Concurrency: cfg.Concurrency,
		Connections: cfg.Connections,
		DurationS:   elapsed.Seconds(),
		WarmupS:     cfg.Warmup.Seconds(),
		Errors:      map[string]uint64{},
		Domain:      cfg.Domain,
		Descriptors: FormatDescriptors(cfg.Descriptors),
		Subjects:    cfg.Subjects,
		Dist:        string(cfg.Dist),
		Seed:        cfg.Seed,
		Hits:        cfg.Hits,
		MaxRequests: cfg.MaxRequests,
		NumCPU:      runtime.NumCPU(),
		GoMaxProcs:  runtime.GOMAXPROCS(0),
		LoadAvg1:    loadAvg,
	}
	var h Histogram
	for _, st := range stats {
		h.Merge(&st.hist)
		res.OK += st.ok
		res.OverLimit += st.overLimit
		res.Unknown += st.unknown
		res.Unmatched += st.unmatched
		for code, n := range st.errs {
			res.Errors[code] += n
			res.ErrorsTotal += n
		}
	}
	decisions := res.Decisions()
	res.Requests = decisions + res.ErrorsTotal
	res.RPS = float64(decisions) / elapsed.Seconds()
	res.P50Ms, res.P90Ms = ms(h.Quantile(0.50)), ms(h.Quantile(0.90))
	res.P99Ms, res.P999Ms = ms(h.Quantile(0.99)), ms(h.Quantile(0.999))
	res.MaxMs, res.MeanMs = ms(h.Max()), ms(h.Mean())
	res.ClientCPUUsPerDecision = MicrosPer(use.Self, decisions)
	if decisions > 0 && res.Unmatched == decisions {
		res.Warning = fmt.Sprintf("no answer carried a limit: the server matched no rule of domain %q to descriptors %q, so the run measured no limiter work (load rules with that domain and keys, e.g. tools/config/bench)",
			cfg.Domain, res.Descriptors)
	}
	if use.Server != nil {
		res.ServerCPUUsPerDecision = MicrosPer(*use.Server, decisions)
		res.ServerRSSKiB, res.ServerHWMKiB = use.RSSKiB, use.HWMKiB
		res.ProcClockTicksPerS = ClockTicksPerSecond
	}
	if len(use.Aux) > 0 {
		res.AuxCPUUsPerDecision = use.AuxMicrosPer(decisions)
		res.ProcClockTicksPerS = ClockTicksPerSecond
	}
	res.OtherCPUCores = use.OtherCores
	return res, nil
}

func runWorker(ctx context.Context, conn *grpc.ClientConn, tmpl *requestTemplate, pick Picker,
	names []string, timeout time.Duration, ph *phase, st *workerStats) {
	resp := &rlsv3.RateLimitResponse{}
	for {
		admitted, measured := ph.admit()
		if !admitted || ctx.Err() != nil {
			return
		}
		req := tmpl.set(names[pick.Next()])
		cctx, cancel := context.WithTimeout(ctx, timeout)
		t0 := time.Now()
		err := conn.Invoke(cctx, rlsv3.RateLimitService_ShouldRateLimit_FullMethodName, req, resp)
		lat := time.Since(t0)
		cancel()
		if !measured {
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return // the run was cancelled: not the server's error
			}
			if st.errs == nil {
				st.errs = map[string]uint64{}
			}
			st.errs[status.Code(err).String()]++
			continue
		}
		st.hist.Record(lat)
		if unmatched(resp) {
			st.unmatched++
		}
		switch resp.GetOverallCode() {
		case rlsv3.RateLimitResponse_OK:
			st.ok++
		case rlsv3.RateLimitResponse_OVER_LIMIT:
			st.overLimit++
		default:
			st.unknown++
		}
	}
}

// unmatched reports whether an answer has statuses and none carries a
// current limit: the server matched no rule to the call's descriptors. An
// answer without statuses (the do-nothing floor's) is not a rule's answer.
func unmatched(resp *rlsv3.RateLimitResponse) bool {
	for _, s := range resp.GetStatuses() {
		if s.GetCurrentLimit() != nil {
			return false
		}
	}
	return len(resp.GetStatuses()) > 0
}

// dialAll opens cfg.Connections client connections and waits until each is
// ready, so an unreachable server is reported at once rather than as a run
// full of errors.
func dialAll(ctx context.Context, cfg Config) ([]*grpc.ClientConn, error) {
	conns := make([]*grpc.ClientConn, 0, cfg.Connections)
	closeAll := func() {
		for _, c := range conns {
			c.Close()
		}
	}
	wctx, cancel := context.WithTimeout(ctx, ConnectTimeout)
	defer cancel()
	for range cfg.Connections {
		c, err := grpc.NewClient(cfg.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("loadgen: dial %s: %w", cfg.Addr, err)
		}
		conns = append(conns, c)
		c.Connect()
	}
	for _, c := range conns {
		for s := c.GetState(); s != connectivity.Ready; s = c.GetState() {
			if !c.WaitForStateChange(wctx, s) {
				closeAll()
				return nil, fmt.Errorf("loadgen: %s not ready within %v (last state %v)", cfg.Addr, ConnectTimeout, s)
			}
		}
	}
	return conns, nil
}

// Sleep waits d or until ctx ends, and returns ctx's error in that case.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
