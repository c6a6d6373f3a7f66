// Package rlqstest simulates an Envoy proxy running the rate_limit_quota
// HTTP filter, for tests of an RLQS server: a Proxy opens the
// envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas
// stream over a real gRPC client connection, decides each request by the
// assignment its bucket holds, and reports usage as the filter does.
//
// What it reproduces (Envoy's filter and its global client):
//   - one stream per proxy, opened when the first bucket is created;
//   - the first request of a new bucket is decided by the no-assignment
//     behaviour (only a DENY_ALL blanket denies it) and reported at once, in
//     a message of its own (1 allowed or 1 denied, time_elapsed 0);
//   - every Interval, one message reports every known bucket, zero usage
//     included (an empty message once every bucket is gone), with the domain
//     set and time_elapsed in whole seconds since that bucket's last report;
//   - a token_bucket assignment fills at tokens_per_fill per fill_interval
//     truncated to whole seconds; a new bucket starts full; a replaced one
//     keeps its ratio of remaining to maximum tokens; one equal to the bucket
//     in force (max_tokens, tokens_per_fill and fill_interval's nanos, as
//     Envoy compares them) keeps its tokens and only restarts the TTL;
//   - assignment_time_to_live is read in whole seconds: under 1 s (unset
//     included) the assignment expires at once, and an expired bucket falls
//     back to the no-assignment behaviour;
//   - an abandon action erases the bucket; the next request re-creates it;
//   - requests_per_time_unit and strategy-less assignments, and actions for
//     no bucket or an unknown one, are skipped: the bucket keeps what it had
//     (counted in Stats.Ignored);
//   - when the stream ends the proxy drops it; the next report tick opens a
//     new one (trying Targets in turn) and sends every bucket on it. Usage
//     of a tick that finds no stream to open is lost, as in Envoy.
//
// Limits of the simulation: expired_assignment_behavior, deny response
// settings and bucket matchers are not modelled (a Request names its bucket
// directly); TTL expiry is checked when a bucket is used, not by a timer; a
// token bucket whose whole-second fill interval is 0 (Envoy divides by zero)
// admits every request when max_tokens ≥ 1; token arithmetic is Envoy's in
// float64, with sums within 1e-9 of an integer taken as that integer so that
// a frozen test clock gives exact counts; report ticks follow the wall clock
// (or Tick), while time_elapsed, TTLs and tokens follow Config.Clock.
//
// A Proxy is safe for concurrent use; Request takes one mutex.
package rlqstest

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

const (
	// DefaultInterval is Envoy's reporting period today (it ignores the
	// bucket settings' reporting_interval).
	DefaultInterval = 5 * time.Second
	// MinInterval is the shortest Interval accepted (Envoy requires a
	// reporting_interval over 100 ms).
	MinInterval = 100 * time.Millisecond
	// DefaultMaxBuckets bounds the buckets a Proxy keeps.
	DefaultMaxBuckets = 1000
	// DefaultOpenTimeout bounds one attempt to open a stream.
	DefaultOpenTimeout = 2 * time.Second
)

// ErrInvalid is wrapped by every error New returns.
var ErrInvalid = errors.New("rlqstest: invalid config")

// Clock tells the time.
type Clock interface {
	Now() time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// Config describes one simulated proxy.
type Config struct {
	// Domain is set on every report. (Required)
	Domain string
	// Targets are RLQS servers' addresses (host:port); a stream is opened on
	// the one that last worked, then on the others in turn. (Required)
	Targets []string
	// DialOptions apply to every target. (Optional: none means plaintext.)
	DialOptions []grpc.DialOption
	// Interval between reports of every bucket, at least MinInterval.
	// (Optional: DefaultInterval.)
	Interval time.Duration
	// NoAssignment is no_assignment_behavior.fallback_rate_limit: a blanket
	// rule, or requests_per_time_unit (which Envoy allows). A token bucket
	// is refused: Envoy keeps no token bucket for it and crashes on the
	// bucket's second request. (Optional: nil is ALLOW_ALL.)
	NoAssignment *typev3.RateLimitStrategy
	// Clock drives time_elapsed, TTLs and token buckets. (Optional: the wall
	// clock.)
	Clock Clock
	// MaxBuckets bounds the buckets kept; a request for a new bucket beyond
	// it is decided by NoAssignment and never reported. (Optional:
	// DefaultMaxBuckets.)
	MaxBuckets int
	// OpenTimeout bounds one attempt to open a stream. (Optional:
	// DefaultOpenTimeout.)
	OpenTimeout time.Duration
}

// Assignment is the last assignment a bucket received.
type Assignment struct {
	Strategy *typev3.RateLimitStrategy
	// TTL is assignment_time_to_live as received (0 when unset).
	TTL time.Duration
	// At is the Clock's time when the proxy applied it.
	At time.Time
}

// Stats counts what a proxy did and received.
type Stats struct {
	Buckets         int    // buckets known now
	Allowed, Denied uint64 // requests decided, every bucket
	Unbucketed      uint64 // requests decided without a bucket (MaxBuckets reached)
	StreamsOpened   int
	StreamsClosed   int    // streams ended by the server or the network
	OpenFailures    int    // attempts to open a stream that failed
	OpenError       string // the last of those failures
	ReportsSent     int    // messages sent
	ReportsDropped  int    // reports built with no stream to carry them
	Assignments     int    // quota assignments applied
	ShortTTL        int    // of which with a TTL under 1 s: expired at once
	Abandons        int
	Ignored         int // actions skipped, as Envoy skips them
}

// Proxy is one simulated Envoy. Build it with New, then Start it.
type Proxy struct {
	domain       string
	targets      []string
	dialOpts     []grpc.DialOption
	interval     time.Duration
	openTimeout  time.Duration
	noAssignment *typev3.RateLimitStrategy
	// unassignedAllows is the no-assignment decision: only a DENY_ALL
	// blanket denies.
	unassignedAllows bool
	clock            Clock
	epoch            time.Time
	maxBuckets       int

	wake      chan struct{}      // new immediate reports are pending
	ticks     chan chan struct{} // Tick's requests
	stopped   chan struct{}      // closed when the loop ends
	startOnce sync.Once
	wg        sync.WaitGroup

	mu      sync.Mutex
	started bool
	cancel  context.CancelFunc
	buckets map[string]*bucket
	pending []*rlqsv3.RateLimitQuotaUsageReports
	// reporting is Envoy's report timer: it starts with the first bucket.
	reporting bool
	stream    *stream
	stats     Stats

	// Owned by the loop goroutine.
	conns     []*grpc.ClientConn
	next      int
	triedOpen bool
}

// New checks cfg and returns a proxy that has not started.
func New(cfg Config) (*Proxy, error) {
	p := &Proxy{
		domain:      cfg.Domain,
		targets:     slices.Clone(cfg.Targets),
		dialOpts:    slices.Clone(cfg.DialOptions),
		interval:    cfg.Interval,
		openTimeout: cfg.OpenTimeout,
		clock:       cfg.Clock,
		maxBuckets:  cfg.MaxBuckets,
		wake:        make(chan struct{}, 1),
		ticks:       make(chan chan struct{}),
		stopped:     make(chan struct{}),
		buckets:     map[string]*bucket{},
	}
	switch {
	case p.domain == "":
		return nil, errors.Join(ErrInvalid, errors.New("Domain is empty"))
	case len(p.targets) == 0:
		return nil, errors.Join(ErrInvalid, errors.New("no Targets"))
	case p.interval != 0 && p.interval < MinInterval:
		return nil, errors.Join(ErrInvalid, errors.New("Interval under "+MinInterval.String()))
	case p.maxBuckets < 0 || p.openTimeout < 0:
		return nil, errors.Join(ErrInvalid, errors.New("negative MaxBuckets or OpenTimeout"))
	case cfg.NoAssignment.GetTokenBucket() != nil:
		return nil, errors.Join(ErrInvalid, errors.New("NoAssignment is a token bucket"))
	}
	if p.interval == 0 {
		p.interval = DefaultInterval
	}
	if p.openTimeout == 0 {
		p.openTimeout = DefaultOpenTimeout
	}
	if p.maxBuckets == 0 {
		p.maxBuckets = DefaultMaxBuckets
	}
	if p.clock == nil {
		p.clock = systemClock{}
	}
	if cfg.NoAssignment != nil {
		p.noAssignment = proto.Clone(cfg.NoAssignment).(*typev3.RateLimitStrategy)
	}
	p.unassignedAllows = !(p.noAssignment.GetStrategy() != nil && p.noAssignment.GetBlanketRule() == typev3.RateLimitStrategy_DENY_ALL)
	p.epoch = p.clock.Now()
	return p, nil
}

// Request decides one request in bucket b as the filter would and reports
// whether it was allowed. The first request of a bucket creates it and
// queues its immediate report.
func (p *Proxy) Request(b map[string]string) bool {
	key := bucketKey(b)
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock.Now()
	bk := p.buckets[key]
	if bk == nil {
		allow := p.unassignedAllows
		if len(p.buckets) >= p.maxBuckets {
			p.tally(nil, allow)
			p.stats.Unbucketed++
			return allow
		}
		bk = &bucket{id: maps.Clone(b), lastReport: now}
		p.buckets[key] = bk
		p.tally(bk, allow)
		p.reporting = true
		if len(p.pending) < p.maxBuckets {
			p.pending = append(p.pending, &rlqsv3.RateLimitQuotaUsageReports{
				Domain:            p.domain,
				BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{bk.usage(now)},
			})
		} else {
			p.stats.ReportsDropped++
		}
		select {
		case p.wake <- struct{}{}:
		default:
		}
		return allow
	}
	bk.expire(now)
	allow := p.decide(bk, now)
	p.tally(bk, allow)
	return allow
}

// tally counts one decision for the proxy and, unless bk is nil, for bk.
func (p *Proxy) tally(bk *bucket, allow bool) {
	if allow {
		p.stats.Allowed++
	} else {
		p.stats.Denied++
	}
	switch {
	case bk == nil:
	case allow:
		bk.allowed++
		bk.totalAllowed++
	default:
		bk.denied++
		bk.totalDenied++
	}
}

// Assignment returns the last assignment bucket b received, whether or not
// it is still in force; false when b is unknown or has none.
func (p *Proxy) Assignment(b map[string]string) (Assignment, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	bk := p.buckets[bucketKey(b)]
	if bk == nil || bk.last.Strategy == nil {
		return Assignment{}, false
	}
	a := bk.last
	a.Strategy = proto.Clone(a.Strategy).(*typev3.RateLimitStrategy)
	return a, true
}

// Counts returns the requests bucket b allowed and denied since it was
// created (0, 0 when it is unknown).
func (p *Proxy) Counts(b map[string]string) (allowed, denied uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if bk := p.buckets[bucketKey(b)]; bk != nil {
		return bk.totalAllowed, bk.totalDenied
	}
	return 0, 0
}

// Stats returns the proxy's counters.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.Buckets = len(p.buckets)
	return s
}

// bucketKey is b's identity regardless of map order: sorted keys and
// values, each length-prefixed.
func bucketKey(b map[string]string) string {
	var sb strings.Builder
	for _, k := range slices.Sorted(maps.Keys(b)) {
		for _, s := range [2]string{k, b[k]} {
			sb.WriteString(strconv.Itoa(len(s)))
			sb.WriteByte(':')
			sb.WriteString(s)
		}
	}
	return sb.String()
}

// Run starts a Proxy of cfg for a test: it fails the test when cfg is
// invalid, and stops the proxy when the test ends.
func Run(t testing.TB, cfg Config) *Proxy {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.Start(ctx)
	t.Cleanup(func() {
		cancel()
		p.Stop()
	})
	return p
}
