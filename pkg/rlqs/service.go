package rlqs

import (
	"cmp"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// Limits bound what one stream and the service hold. Zero fields take the
// defaults.
type Limits struct {
	// BucketsPerStream bounds the buckets one stream subscribes; a report
	// naming one more ends the stream (ResourceExhausted).
	BucketsPerStream int
	// Aggregates bounds the (limit, subject) pairs the replica tracks; a
	// bucket beyond it is assigned by its rule's failure mode.
	Aggregates int
	// ReportsPerSecond and ReportBurst bound the messages a stream sends;
	// one beyond them ends the stream (ResourceExhausted). Envoy sends a
	// message for each bucket it sees first, so a proxy meeting many new
	// subjects at once sends as many.
	ReportsPerSecond, ReportBurst int
	// UsagesPerReport bounds the bucket usages of one message. Envoy
	// reports every bucket of a stream in one message, so it is as many
	// as BucketsPerStream by default; the gRPC message size bound
	// (--grpc-max-recv-msg-size) caps a message first.
	UsagesPerReport int
}

// Defaults of Limits and Config.
const (
	defaultBucketsPerStream = 10_000
	defaultAggregates       = 100_000
	defaultReportsPerSecond = 500
	defaultReportBurst      = 1000
	defaultUsagesPerReport  = 10_000
	defaultTick             = time.Second
	// maxEntries, maxEntryBytes and maxDomainBytes bound a BucketId and a
	// domain as the RLS path bounds a descriptor (rls.MaxEntries).
	maxEntries     = 16
	maxEntryBytes  = 1024
	maxDomainBytes = 1024
)

func (l *Limits) defaults() {
	for _, f := range []struct {
		v   *int
		def int
	}{{&l.BucketsPerStream, defaultBucketsPerStream}, {&l.Aggregates, defaultAggregates},
		{&l.ReportsPerSecond, defaultReportsPerSecond}, {&l.ReportBurst, defaultReportBurst},
		{&l.UsagesPerReport, defaultUsagesPerReport}} {
		if *f.v <= 0 {
			*f.v = f.def
		}
	}
}

// Config configures a Service.
type Config struct {
	// Rules returns the current rule snapshot, nil when none is loaded.
	// (Required)
	Rules func() *descriptors.Snapshot
	// Store holds the limits' states, shared with the RLS path: the
	// answering store (failure modes, journal). (Required)
	Store limiter.Store
	// Exchange shares demands with the other replicas. (Optional,
	// default: this replica alone)
	Exchange Exchange
	// Clock is the service's clock. (Optional, default the system clock)
	Clock limiter.Clock
	// Tick is how often assignments are revised. (Optional, defaultTick)
	Tick time.Duration
	// AssignmentTTL, when not 0, is every assignment's time to live;
	// 0 derives it from the proxies' reporting interval.
	AssignmentTTL time.Duration
	// AbandonAfter is how long a bucket may report no request before the
	// proxy is told to abandon it. (Optional, default 5 minutes)
	AbandonAfter time.Duration
	Limits       Limits
	// Metrics are the service's collectors (NewMetrics). (Optional)
	Metrics *Metrics
	// Denied, when set, is told every tick, per limit's subject whose
	// proxies reported denying requests since the last, how many, with
	// the limit and what remains of it. (Optional: the audit sink)
	Denied func(Denial)
	// Log receives stream ends and store failures. (Optional)
	Log *zap.Logger
}

// Service is the RLQS service of one replica: register it on the gRPC
// server, Run its ticks, Stop it before the server drains.
type Service struct {
	rlqsv3.UnimplementedRateLimitQuotaServiceServer
	cfg Config

	mu      sync.Mutex
	aggs    map[aggKey]*aggregate
	streams map[*stream]struct{}
	stopped bool
	// reports counts the bucket usages received.
	reports uint64
	// scratch of the tick (under mu).
	scratch tickScratch
}

// New builds a Service.
func New(cfg Config) (*Service, error) {
	if cfg.Rules == nil || cfg.Store == nil {
		return nil, errors.New("rlqs: Config.Rules and Config.Store are required")
	}
	if cfg.Clock == nil {
		cfg.Clock = limiter.SystemClock{}
	}
	if cfg.Tick <= 0 {
		cfg.Tick = defaultTick
	}
	if cfg.AssignmentTTL < 0 || cfg.AssignmentTTL > maxTTL {
		return nil, fmt.Errorf("rlqs: assignment TTL %s outside 0..%s", cfg.AssignmentTTL, maxTTL)
	}
	if cfg.AbandonAfter <= 0 {
		cfg.AbandonAfter = 5 * time.Minute
	}
	if cfg.Exchange == nil {
		cfg.Exchange = alone{}
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	cfg.Limits.defaults()
	return &Service{cfg: cfg, aggs: make(map[aggKey]*aggregate), streams: make(map[*stream]struct{})}, nil
}

// Register adds the service to gs.
func (s *Service) Register(gs *grpc.Server) { rlqsv3.RegisterRateLimitQuotaServiceServer(gs, s) }

// Run revises the assignments every tick until ctx ends. Ticks fall on
// whole multiples of the tick since the Unix epoch, as window boundaries
// do: the tick before a window ends has the whole tick left to spend what
// remains, and the one at its start assigns the new window's rate.
func (s *Service) Run(ctx context.Context) {
	t := time.NewTimer(s.untilTick())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.Tick(ctx)
			t.Reset(s.untilTick())
		}
	}
}

// untilTick is the time until the next whole multiple of the tick, a
// millisecond at least.
func (s *Service) untilTick() time.Duration {
	now := s.cfg.Clock.Now()
	next := now.Truncate(s.cfg.Tick).Add(s.cfg.Tick)
	return max(next.Sub(now), time.Millisecond)
}

// Stop sends every subscribed bucket its assignment with a time to live
// of 0 (the proxies fall back to their no-assignment behaviour at once,
// rather than keep a quota nobody revises), then ends every stream
// (Unavailable) and refuses new ones: a graceful stop of the gRPC server
// waits for streams, which never end on their own.
func (s *Service) Stop() {
	s.mu.Lock()
	s.stopped = true
	streams := make([]*stream, 0, len(s.streams))
	for st := range s.streams {
		streams = append(streams, st)
	}
	s.mu.Unlock()
	for _, st := range streams {
		st.expireAll()
	}
	// One bound for all: a stream whose proxy does not read holds the
	// stop no longer than the others.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, st := range streams {
		st.waitFlushed(ctx)
		st.end()
	}
}

// Denial is what the proxies of one limit's subject on this replica
// denied since the last tick (Config.Denied): configuration and a
// digest, never a request value.
type Denial struct {
	Domain, PolicyID string
	Subject          limiter.SubjectDigest
	Denied           int64
	Limit, Remaining int64
	Shadow           bool
}

// AggregateInfo is one limit's subject as this replica divides it, for
// the admin API: configuration and digests only, never a request value.
type AggregateInfo struct {
	Domain        string  `json:"domain"`
	PolicyID      string  `json:"policy_id"`
	SubjectDigest string  `json:"subject_digest"`
	Subscribers   int     `json:"subscribers"`
	DemandRPS     float64 `json:"demand_rps"`
	AssignedRPS   float64 `json:"assigned_rps"`
	CapacityRPS   float64 `json:"capacity_rps"`
}

// Aggregates returns at most n of the aggregates this replica divides,
// those with the most subscribers first, and the number of streams open.
func (s *Service) Aggregates(n int) (aggs []AggregateInfo, streams int) {
	rps := func(mrps int64) float64 {
		if mrps == unknownDemand {
			return -1
		}
		return float64(mrps) / 1000
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range s.aggs {
		aggs = append(aggs, AggregateInfo{Domain: a.domain, PolicyID: a.policy.ID(), SubjectDigest: hex.EncodeToString(a.subject[:]),
			Subscribers: len(a.subs), DemandRPS: rps(a.demand), AssignedRPS: rps(a.assigned), CapacityRPS: rps(a.capacity)})
	}
	slices.SortFunc(aggs, func(x, y AggregateInfo) int {
		return cmp.Or(cmp.Compare(y.Subscribers, x.Subscribers), cmp.Compare(x.PolicyID, y.PolicyID), cmp.Compare(x.SubjectDigest, y.SubjectDigest))
	})
	return aggs[:min(n, len(aggs))], len(s.streams)
}
