package redis

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/algorithm"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/calendar"
	"github.com/envoy-rls/envoy-rls/pkg/lua"
)

// BenchmarkEvaluate measures one decision per Evaluate call against a local
// redis-server (or REDIS_ADDR), per program, from one goroutine (round-trip
// latency) and from GOMAXPROCS*8 goroutines (auto-pipelined throughput), and
// a four-request batch. Figures go to docs/performance.md; nothing here is
// asserted.
// withPenalty is p with a day-long penalty box.
func withPenalty(b *testing.B, p *limiter.Policy) *limiter.Policy {
	spec := p.Spec()
	spec.Penalty = limiter.Penalty{Duration: 24 * time.Hour}
	return limitertest.Policy(b, spec)
}

func BenchmarkEvaluate(b *testing.B) {
	e := newEnvWith(b, Config{Timeout: 5 * time.Second})
	srv, s := e.srv, e.store
	policies := []*limiter.Policy{
		fixed(b, "bench.fw", 1_000_000_000_000, time.Hour),
		sliding(b, "bench.sw", 1_000_000_000, time.Hour),
		bucket(b, "bench.tb", 1_000_000_000, 1_000_000, time.Millisecond),
		cellRate(b, "bench.gc", 1_000_000_000, 1_000_000, time.Millisecond),
		calendarPolicy(b, "bench.cal", 1_000_000_000_000, calendar.Month, "Europe/Berlin"),
		// A penalty box on a fixed window: never denied (the extra read of
		// the penalty fields), and every subject blocked after its first
		// request (BLOCKED answers).
		withPenalty(b, fixed(b, "bench.fwp", 1_000_000_000_000, time.Hour)),
		withPenalty(b, fixed(b, "bench.fwb", 1, time.Hour)),
		// Each subject is hit every 1,024 calls: a log of a few dozen hits.
		slidingLog(b, "bench.sl", 1000, time.Second),
	}
	subjects := make([]limiter.SubjectDigest, 1024)
	for i := range subjects {
		subjects[i] = subjectOf(fmt.Sprintf("bench-%d", i))
	}
	for _, p := range policies {
		name := p.Algorithm().String()
		switch {
		case p.Calendar() != nil:
			name = "calendar_month"
		case p.Penalty().On() && p.Limit() == 1:
			name += "+penalty-blocked"
		case p.Penalty().On():
			name += "+penalty"
		}
		b.Run(name+"/single", func(b *testing.B) {
			out := make([]limiter.Outcome, 1)
			req := make([]limiter.Request, 1)
			ctx := context.Background()
			srv.MustDo("CONFIG", "RESETSTAT")
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				req[0] = limiter.Request{Policy: p, Subject: subjects[i%len(subjects)], Cost: 1}
				s.Evaluate(ctx, req, out)
				if out[0].Kind != limiter.Evaluated {
					b.Fatalf("%v: %v", out[0].Kind, out[0].Err)
				}
			}
			// The program's own Redis time per call (INFO commandstats).
			if _, _, evalCalls, evalUsec := commandStats(b, srv); evalCalls > 0 {
				b.ReportMetric(evalUsec/float64(evalCalls), "µs/evalsha")
			}
		})
		b.Run(name+"/parallel", func(b *testing.B) {
			var n atomic.Int64
			b.SetParallelism(8)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				out := make([]limiter.Outcome, 1)
				req := make([]limiter.Request, 1)
				ctx := context.Background()
				for pb.Next() {
					i := n.Add(1)
					req[0] = limiter.Request{Policy: p, Subject: subjects[i%int64(len(subjects))], Cost: 1}
					s.Evaluate(ctx, req, out)
					if out[0].Kind != limiter.Evaluated {
						b.Errorf("%v: %v", out[0].Kind, out[0].Err)
						return
					}
				}
			})
		})
	}
	b.Run("batch4/single", func(b *testing.B) {
		out := make([]limiter.Outcome, 4)
		req := make([]limiter.Request, 4)
		ctx := context.Background()
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			for j := range req {
				req[j] = limiter.Request{Policy: policies[j%4], Subject: subjects[(i+j)%len(subjects)], Cost: 1}
			}
			s.Evaluate(ctx, req, out)
			for j := range out {
				if out[j].Kind != limiter.Evaluated {
					b.Fatalf("%v: %v", out[j].Kind, out[j].Err)
				}
			}
		}
	})
}

// BenchmarkSlidingLog measures the Redis time of rate-batch-v2.lua on a
// sliding log of n hits in the window (limit 1000: with 999 the request is
// admitted and writes a log of 1000, with 1000 it is denied), the log
// written anew before each call (its HSET is not counted). It reports the
// program's time per EVALSHA (INFO commandstats). Figures go to
// docs/algorithms.md; nothing is asserted.
func BenchmarkSlidingLog(b *testing.B) {
	e := newEnv(b)
	p := slidingLog(b, "bench.log", 1000, time.Hour)
	sub := subjectOf("bench-log")
	key := keyOf(p, sub)
	for _, n := range []int64{5, 100, 999, 1000} {
		b.Run(fmt.Sprintf("log=%d", n), func(b *testing.B) {
			now := e.serverNow()
			var log []byte
			for i := range n {
				log = algorithm.AppendSlidingLogEntry(log, now-n+i, 1)
			}
			st := stateOf(p, now, now/p.WindowMillis(), n, 0)
			st.Log = string(log)
			out := make([]limiter.Outcome, 1)
			req := []limiter.Request{{Policy: p, Subject: sub, Cost: 1}}
			ctx := context.Background()
			var evalCalls int64
			var evalUsec float64
			for b.Loop() {
				b.StopTimer()
				e.seed(key, st)
				_, _, c0, u0 := commandStats(b, e.srv)
				b.StartTimer()
				e.store.Evaluate(ctx, req, out)
				b.StopTimer()
				if out[0].Kind != limiter.Evaluated || out[0].Decision.Allowed != (n < 1000) {
					b.Fatalf("%+v", out[0])
				}
				_, _, c1, u1 := commandStats(b, e.srv)
				evalCalls, evalUsec = evalCalls+c1-c0, evalUsec+u1-u0
				b.StartTimer()
			}
			if evalCalls > 0 {
				b.ReportMetric(evalUsec/float64(evalCalls), "µs/evalsha")
			}
		})
	}
}

// BenchmarkDescriptors measures one Envoy request carrying n descriptors (n
// fixed-window limits on distinct subjects, all allowed) from GOMAXPROCS*8
// goroutines, two ways: "batch", the store (one rate-batch-v2.lua call per
// request), and "per-descriptor" (one rate-batch-v2.lua call of one key
// per limit, sent concurrently and auto-pipelined), a benchmark-only
// helper that shows what batching saves. It reports, from
// INFO, what Redis did per Envoy request: commands (calls of every command
// the client sent), usec per EVALSHA (commandstats: wall time inside Redis,
// inflated when Redis is preempted on a busy machine) and Redis main-thread
// CPU per request (INFO cpu: also counts reading, parsing and answering the
// commands). Figures go to docs/performance.md; nothing is asserted.
func BenchmarkDescriptors(b *testing.B) {
	e := newEnvWith(b, Config{Timeout: 5 * time.Second})
	srv, s := e.srv, e.store
	p := fixed(b, "bench.desc", 1_000_000_000_000, time.Hour)
	subjects := make([]limiter.SubjectDigest, 4096)
	for i := range subjects {
		subjects[i] = subjectOf(fmt.Sprintf("desc-%d", i))
	}
	perDescriptor := func(ctx context.Context, req []limiter.Request, out []limiter.Outcome) {
		var wg sync.WaitGroup
		for j := range req {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := &req[j]
				key := string(requestKey(nil, r))
				res := s.execBatch(ctx, []string{key}, oneCall(batchArgs(nil, r.Policy, r.Cost, limiter.RoleOrdinary), 1, 0))
				if res.Error() != nil {
					out[j] = limiter.IndeterminateOutcome(0, res.Error())
					return
				}
				out[j] = limiter.EvaluatedOutcome(limiter.Decision{Allowed: true})
			}()
		}
		wg.Wait()
	}
	for _, n := range []int{1, 2, 4, 8} {
		for _, way := range []string{"batch", "per-descriptor"} {
			eval := s.Evaluate
			if way == "per-descriptor" {
				eval = perDescriptor
			}
			b.Run(fmt.Sprintf("%s/descriptors=%d", way, n), func(b *testing.B) {
				srv.MustDo("CONFIG", "RESETSTAT")
				cpu0 := redisCPU(b, srv)
				var ctr atomic.Int64
				b.SetParallelism(8)
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					out := make([]limiter.Outcome, n)
					req := make([]limiter.Request, n)
					ctx := context.Background()
					for pb.Next() {
						i := ctr.Add(1)
						for j := range req {
							req[j] = limiter.Request{Policy: p, Subject: subjects[(int(i)*n+j)%len(subjects)], Cost: 1}
						}
						eval(ctx, req, out)
						for j := range out {
							if out[j].Kind != limiter.Evaluated || !out[j].Decision.Allowed {
								b.Errorf("%v: %v", out[j].Kind, out[j].Err)
								return
							}
						}
					}
				})
				b.StopTimer()
				cpu := redisCPU(b, srv) - cpu0
				calls, _, evalCalls, evalUsec := commandStats(b, srv)
				ops := float64(ctr.Load())
				b.ReportMetric(float64(calls)/ops, "cmds/req")
				b.ReportMetric(cpu.Seconds()*1e6/ops, "redis-cpu-µs/req")
				if evalCalls > 0 {
					b.ReportMetric(evalUsec/float64(evalCalls), "µs/evalsha")
				}
			})
		}
	}
}

// redisCPU is the server main thread's CPU time (INFO cpu).
func redisCPU(b *testing.B, srv *redistest.Server) time.Duration {
	b.Helper()
	v, _ := srv.MustDo("INFO", "cpu").(string)
	var total float64
	for _, line := range strings.Split(v, "\n") {
		k, val, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys_main_thread" || k == "used_cpu_user_main_thread") {
			f, _ := strconv.ParseFloat(val, 64)
			total += f
		}
	}
	return time.Duration(total * float64(time.Second))
}

// commandStats sums INFO commandstats: calls and usec over every command
// except INFO and CONFIG, and those of EVALSHA alone.
func commandStats(b *testing.B, srv *redistest.Server) (calls int64, usec float64, evalCalls int64, evalUsec float64) {
	b.Helper()
	v, _ := srv.MustDo("INFO", "commandstats").(string)
	for _, line := range strings.Split(v, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") || name == "cmdstat_info" || name == "cmdstat_config" {
			continue
		}
		var c int64
		var u float64
		for _, f := range strings.Split(rest, ",") {
			k, val, _ := strings.Cut(f, "=")
			switch k {
			case "calls":
				c, _ = strconv.ParseInt(val, 10, 64)
			case "usec":
				u, _ = strconv.ParseFloat(val, 64)
			}
		}
		if name == "cmdstat_evalsha" || name == "cmdstat_eval" || name == "cmdstat_fcall" {
			evalCalls += c
			evalUsec += u
		} else if name == "cmdstat_time" || name == "cmdstat_mget" || name == "cmdstat_set" || name == "cmdstat_pexpire" || name == "cmdstat_exists" || name == "cmdstat_get" {
			// Called from inside the program: part of EVALSHA's usec.
			continue
		}
		calls += c
		usec += u
	}
	return calls, usec, evalCalls, evalUsec
}

// commandCalls parses INFO commandstats into calls per command name.
func commandCalls(info string) map[string]int64 {
	out := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if k, v, _ := strings.Cut(f, "="); k == "calls" {
				out[strings.TrimPrefix(name, "cmdstat_")], _ = strconv.ParseInt(v, 10, 64)
			}
		}
	}
	return out
}

// BenchmarkGroupRun measures what group commit saves inside Redis: one run
// of rate-batch-v2.lua holding n one-limit calls (fixed window, allowed
// writes), from one goroutine, on states already written in the window
// (window=1h: each write keeps its expiry) or on a new window at every call
// (window=1ms: each write sets its expiry, as under the standard load's
// 1-second windows). redis-cpu-µs/req is Redis's main-thread CPU per call.
func BenchmarkGroupRun(b *testing.B) {
	e := newEnvWith(b, Config{Timeout: 5 * time.Second})
	srv, s := e.srv, e.store
	for _, window := range []time.Duration{time.Hour, time.Millisecond} {
		p := fixed(b, "bench.group", 1_000_000_000_000, window)
		const subjects = 4096
		keys := make([]string, subjects)
		packed := make([]string, subjects)
		for i := range keys {
			r := limiter.Request{Policy: p, Subject: subjectOf(fmt.Sprintf("group-%d", i)), Cost: 1}
			keys[i] = string(requestKey(nil, &r))
			packed[i] = batchArgs(nil, p, 1, limiter.RoleOrdinary)[0]
		}
		for _, n := range []int{1, 4, 8, 16, 64} {
			b.Run(fmt.Sprintf("window=%s/calls=%d", window, n), func(b *testing.B) {
				ctx := context.Background()
				var groupField []byte
				for range n {
					groupField = lua.AppendGroupEntry(groupField, 1, 0)
				}
				k := make([]string, n)
				args := make([]string, 0, n+1)
				next := 0
				cpu0 := redisCPU(b, srv)
				for b.Loop() {
					args = args[:0]
					for j := range n {
						k[j] = keys[next%subjects]
						args = append(args, packed[next%subjects])
						next++
					}
					args = append(args, string(groupField))
					if err := s.execBatch(ctx, k, args).Error(); err != nil {
						b.Fatal(err)
					}
				}
				cpu := redisCPU(b, srv) - cpu0
				b.ReportMetric(cpu.Seconds()*1e6/float64(b.N*n), "redis-cpu-µs/req")
				b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*n), "µs/req")
			})
		}
	}
}

// BenchmarkWideCall: one call of n distinct limits (a request of 64
// descriptors, each with a list of 16 limits, is 1,024), in one program run:
// Redis CPU per call and per limit, which must grow linearly with n.
func BenchmarkWideCall(b *testing.B) {
	e := newEnvWith(b, Config{Timeout: 5 * time.Second})
	srv, s := e.srv, e.store
	p := fixed(b, "bench.wide", 1_000_000_000_000, time.Hour)
	for _, n := range []int{16, 64, 256, 1024} {
		b.Run(fmt.Sprintf("limits=%d", n), func(b *testing.B) {
			ctx := context.Background()
			keys := make([]string, n)
			args := make([]string, 0, n+1)
			for i := range n {
				r := limiter.Request{Policy: p, Subject: subjectOf(fmt.Sprintf("wide-%d-%d", n, i)), Cost: 1}
				keys[i] = string(requestKey(nil, &r))
				args = batchArgs(args, p, 1, limiter.RoleOrdinary)
			}
			args = append(args, string(lua.AppendGroupEntry(nil, n, 0)))
			cpu0 := redisCPU(b, srv)
			for b.Loop() {
				if err := s.execBatch(ctx, keys, args).Error(); err != nil {
					b.Fatal(err)
				}
			}
			cpu := redisCPU(b, srv) - cpu0
			b.ReportMetric(cpu.Seconds()*1e6/float64(b.N), "redis-cpu-µs/call")
			b.ReportMetric(cpu.Seconds()*1e6/float64(b.N*n), "redis-cpu-µs/limit")
		})
	}
}

// BenchmarkReservations: the Redis cost of a reserving limit's calls
// beside a plain one's, one call at a time (one program run each):
// "plain" a fixed-window decision, "reserve-settle" a reserve and the
// settle of the same reservation (two runs per op). It reports Redis's
// time per program run (µs/run, INFO commandstats) and its main thread's
// CPU per op.
func BenchmarkReservations(b *testing.B) {
	e := newEnvWith(b, Config{Timeout: 5 * time.Second})
	srv, s := e.srv, e.store
	plain := fixed(b, "bench.plain", 1_000_000_000_000, time.Hour)
	budget := limitertest.Policy(b, limiter.PolicySpec{ID: "bench.reserve", Algorithm: limiter.FixedWindow,
		Params: limiter.FixedWindowParams{Limit: 1_000_000_000_000, Window: time.Hour}, Reserve: limiter.Reserve{TTL: time.Minute}})
	subjects := make([]limiter.SubjectDigest, 4096)
	for i := range subjects {
		subjects[i] = subjectOf(fmt.Sprintf("reserve-%d", i))
	}
	for _, way := range []string{"plain", "reserve-settle"} {
		b.Run(way, func(b *testing.B) {
			srv.MustDo("CONFIG", "RESETSTAT")
			cpu0 := redisCPU(b, srv)
			ctx := context.Background()
			out := make([]limiter.Outcome, 1)
			for i := 0; b.Loop(); i++ {
				subject := subjects[i%len(subjects)]
				if way == "plain" {
					s.Evaluate(ctx, []limiter.Request{{Policy: plain, Subject: subject, Cost: 1}}, out)
					continue
				}
				s.Evaluate(ctx, []limiter.Request{{Policy: budget, Subject: subject, Cost: 500}}, out)
				d := out[0].Decision
				if out[0].Kind != limiter.Evaluated || d.HoldAt.IsZero() {
					b.Fatalf("reserve: %v %v %+v", out[0].Kind, out[0].Err, d)
				}
				s.Evaluate(ctx, []limiter.Request{{Policy: budget, Subject: subject, Cost: 300,
					Lease: limiter.LeaseRelease, LeaseAt: d.HoldAt.UnixMilli()}}, out)
				if out[0].Kind != limiter.Evaluated {
					b.Fatalf("settle: %v %v", out[0].Kind, out[0].Err)
				}
			}
			b.StopTimer()
			cpu := redisCPU(b, srv) - cpu0
			_, _, evalCalls, evalUsec := commandStats(b, srv)
			if evalCalls > 0 {
				b.ReportMetric(evalUsec/float64(evalCalls), "µs/run")
			}
			b.ReportMetric(cpu.Seconds()*1e6/float64(b.N), "redis-cpu-µs/op")
		})
	}
}

// BenchmarkSwapDemands: the RLQS demand exchange of three replicas, each
// publishing demands of its proxies for n aggregates per call (one run of
// demand-v1.lua per aggregate, pipelined), in turn. It reports Redis's
// time per run (INFO commandstats: wall time inside Redis) and its
// main-thread CPU per run.
func BenchmarkSwapDemands(b *testing.B) {
	e := newEnvWith(b, Config{Timeout: 5 * time.Second})
	p := fixed(b, "bench.demand", 1000, time.Second)
	for _, demands := range []int{1, 7, 64} {
		const n = 256
		b.Run(fmt.Sprintf("aggregates=%d/demands=%d", n, demands), func(b *testing.B) {
			batch := make([]DemandSwap, n)
			for i := range batch {
				batch[i] = DemandSwap{Policy: p, Subject: subjectOf(fmt.Sprintf("demand-%d", i)), Mine: make([]int64, demands)}
			}
			ctx := context.Background()
			_, _, c0, u0 := commandStats(b, e.srv)
			cpu0 := redisCPU(b, e.srv)
			i := 0
			for b.Loop() {
				if err := e.store.SwapDemands(ctx, fmt.Sprintf("replica-%d", i%3), time.Minute, batch); err != nil {
					b.Fatal(err)
				}
				i++
			}
			cpu := redisCPU(b, e.srv) - cpu0
			_, _, c1, u1 := commandStats(b, e.srv)
			b.ReportMetric(cpu.Seconds()*1e6/float64(b.N*n), "redis-cpu-µs/run")
			if c1 > c0 {
				b.ReportMetric((u1-u0)/float64(c1-c0), "µs/evalsha")
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*n), "µs/aggregate")
		})
	}
}
