// Package statsd sends the service's counters to a statsd server under the
// stat names of envoyproxy/ratelimit, so that dashboards and statsd
// exporter mappings written for that service keep working.
//
// A Sink is an rls.Observer: the request path only adds to counters in
// memory (one map look-up under a read lock and a few atomic adds per
// limit); every flush interval the counters of the interval are sent, one
// statsd line per non-zero counter, by a statsd client library
// (github.com/cactus/go-statsd-client), over UDP or TCP. Stat names come
// from the configured rules only (descriptors.Rule.StatKey), never from
// request values, and at most MaxRules rules are counted per interval.
//
// A Sink is safe for concurrent use.
package statsd

import (
	"fmt"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cactus/go-statsd-client/v5/statsd"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"

	"github.com/envoy-rls/envoy-rls/pkg/rls"
)

// Defaults and bounds.
const (
	DefaultFlushInterval  = 10 * time.Second
	DefaultNearLimitRatio = 0.8
	// MaxRules bounds the rules counted in one flush interval (distinct
	// stat keys). The hits of further rules are counted in OverflowStat.
	MaxRules = 10_000
	// MaxTimings bounds the response_time samples sent per interval: the
	// first MaxTimings calls of the interval are sent.
	MaxTimings = 1_000
	// packetBytes is the most bytes of one UDP datagram (or one TCP write).
	packetBytes = 1432
	// senderFlush is how long the client holds lines before sending them.
	senderFlush = 100 * time.Millisecond
	// dialTimeout and writeTimeout bound the TCP connection's work, and
	// redialAfter how soon a failed dial is tried again.
	dialTimeout  = time.Second
	writeTimeout = time.Second
	redialAfter  = time.Second
	// resolveEvery is how often the UDP sender resolves the address again.
	resolveEvery = 30 * time.Second
)

// Stat names: the reference service's.
const (
	// RulePrefix prefixes the per-rule counters: RulePrefix + StatKey +
	// "." + one of the counter names below.
	RulePrefix = "ratelimit.service.rate_limit."

	TotalHits               = "total_hits"
	OverLimit               = "over_limit"
	NearLimit               = "near_limit"
	WithinLimit             = "within_limit"
	ShadowMode              = "shadow_mode"
	OverLimitWithLocalCache = "over_limit_with_local_cache"
	// OverLimitWithPenalty counts the over_limit hits refused by the
	// rule's penalty box (an envoy-rls stat).
	OverLimitWithPenalty = "over_limit_with_penalty"

	RedisErrorStat    = "ratelimit.service.call.should_rate_limit.redis_error"
	ServiceErrorStat  = "ratelimit.service.call.should_rate_limit.service_error"
	TotalRequestsStat = "ratelimit_server.ShouldRateLimit.total_requests"
	ResponseTimeStat  = "ratelimit_server.ShouldRateLimit.response_time"
	// OverflowStat counts the hits of rules beyond MaxRules in one
	// interval (an envoy-rls stat; the reference has no bound).
	OverflowStat = "ratelimit.service.rate_limit_stats_overflow"
)

// Config configures a Sink.
type Config struct {
	// Addr is the statsd server, host:port. (Required)
	Addr string
	// Protocol is "udp" or "tcp". (Optional, default "udp")
	Protocol string
	// Tags are added to every stat name as ".__key=value" suffixes, sorted
	// by key (the reference's EXTRA_TAGS). (Optional)
	Tags map[string]string
	// FlushInterval is how often counters are sent. (Optional, default
	// DefaultFlushInterval)
	FlushInterval time.Duration
	// NearLimitRatio: an allowed hit that takes a limit's usage above
	// floor(limit x NearLimitRatio) is also counted near_limit. 0 < r <= 1.
	// (Optional, default DefaultNearLimitRatio)
	NearLimitRatio float64
	// Logger receives send failures, at most one line per interval.
	// (Optional)
	Logger *zap.Logger
}

// ruleCounters are the counters of one stat key, indexed like RuleStats.
type ruleCounters [len(RuleStats)]atomic.Uint64

// Sink aggregates observations and sends them.
type Sink struct {
	cfg    Config
	suffix string // the serialized tags
	log    *zap.Logger

	mu    sync.RWMutex
	rules map[string]*ruleCounters

	overflow, redisErrors, serviceErrors, totalRequests atomic.Uint64
	timingN                                             atomic.Int64
	timings                                             [MaxTimings]atomic.Int64 // nanoseconds; 0 = unset

	sendMu sync.Mutex
	client statsd.Statter // nil until a client could be made
	failed failures       // sends that failed, since the last flush

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

var _ rls.Observer = (*Sink)(nil)

// New validates cfg and returns a Sink. Run sends its counters.
func New(cfg Config) (*Sink, error) {
	if _, _, err := net.SplitHostPort(cfg.Addr); err != nil || cfg.Addr == "" {
		return nil, fmt.Errorf("statsd: address %q is not host:port", cfg.Addr)
	}
	switch cfg.Protocol {
	case "":
		cfg.Protocol = "udp"
	case "udp", "tcp":
	default:
		return nil, fmt.Errorf("statsd: protocol %q is not udp or tcp", cfg.Protocol)
	}
	if cfg.FlushInterval == 0 {
		cfg.FlushInterval = DefaultFlushInterval
	}
	if cfg.FlushInterval < 0 {
		return nil, fmt.Errorf("statsd: flush interval %v is not positive", cfg.FlushInterval)
	}
	if cfg.NearLimitRatio == 0 {
		cfg.NearLimitRatio = DefaultNearLimitRatio
	}
	if !(cfg.NearLimitRatio > 0 && cfg.NearLimitRatio <= 1) {
		return nil, fmt.Errorf("statsd: near-limit ratio %v is not in (0, 1]", cfg.NearLimitRatio)
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	return &Sink{
		cfg:    cfg,
		suffix: SerializeTags(cfg.Tags),
		log:    cfg.Logger.Named("statsd"),
		rules:  make(map[string]*ruleCounters),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}, nil
}

// ObserveLimit counts one limit of a call (Count). A probe (0 hits: an
// explicit per-descriptor hits_addend of 0) adds nothing.
func (s *Sink) ObserveLimit(o rls.LimitObservation) {
	if o.Rule == nil || o.Rule.StatKey == "" || o.Hits <= 0 {
		return
	}
	counts := Count(o, s.cfg.NearLimitRatio)
	key := o.Rule.StatKey
	// Counters are added under the lock, so that a flush, which deletes
	// idle entries under the write lock, never loses an add.
	s.mu.RLock()
	if c := s.rules[key]; c != nil {
		c.add(&counts)
		s.mu.RUnlock()
		return
	}
	s.mu.RUnlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.rules[key]
	if c == nil {
		if len(s.rules) >= MaxRules {
			s.overflow.Add(counts[iTotalHits])
			return
		}
		c = &ruleCounters{}
		s.rules[key] = c
	}
	c.add(&counts)
}

// add adds one observation's counts.
func (c *ruleCounters) add(counts *Counts) {
	for i, v := range counts {
		if v > 0 {
			c[i].Add(v)
		}
	}
}

// ObserveCall counts one call: total_requests and a response_time sample
// always; redis_error when the store failed for one of its limits;
// service_error when it was answered with an error status.
func (s *Sink) ObserveCall(o rls.CallObservation) {
	s.totalRequests.Add(1)
	if o.StoreFailed {
		s.redisErrors.Add(1)
	}
	if o.Code != codes.OK {
		s.serviceErrors.Add(1)
	}
	if n := s.timingN.Add(1); n <= MaxTimings {
		s.timings[n-1].Store(max(int64(o.Duration), 1))
	}
}

// line is one counter to send.
type line struct {
	name  string
	value uint64
}

// collect takes the counts of the interval, resetting them, and drops the
// rules that counted nothing.
func (s *Sink) collect() (lines []line, timings []time.Duration) {
	add := func(name string, v uint64) {
		if v > 0 {
			lines = append(lines, line{name + s.suffix, v})
		}
	}
	s.mu.Lock()
	for key, c := range s.rules {
		total := c[iTotalHits].Swap(0)
		if total == 0 {
			delete(s.rules, key)
			continue
		}
		prefix := RulePrefix + SanitizeName(key) + "."
		add(prefix+TotalHits, total)
		for i := iTotalHits + 1; i < len(c); i++ {
			add(prefix+RuleStats[i], c[i].Swap(0))
		}
	}
	s.mu.Unlock()
	add(OverflowStat, s.overflow.Swap(0))
	add(RedisErrorStat, s.redisErrors.Swap(0))
	add(ServiceErrorStat, s.serviceErrors.Swap(0))
	add(TotalRequestsStat, s.totalRequests.Swap(0))
	n := min(s.timingN.Swap(0), MaxTimings)
	for i := range n {
		if d := s.timings[i].Swap(0); d > 0 {
			timings = append(timings, time.Duration(d))
		}
	}
	sort.Slice(lines, func(i, j int) bool { return lines[i].name < lines[j].name })
	return lines, timings
}

// Flush sends the counts gathered since the last flush. A send that fails
// loses its counts (statsd counters are deltas); the failures of an
// interval — those of this flush, and those of the sends the buffered
// sender made in the background since the last one — are logged in one
// warning, which names the address, never a stat name or a value.
func (s *Sink) Flush() {
	lines, timings := s.collect()
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	failed, first := s.failed.take()
	if len(lines) > 0 || len(timings) > 0 {
		if s.client == nil {
			c, err := s.newClient()
			if err != nil {
				s.log.Warn("statsd client could not be made; this interval's stats are dropped", zap.String("addr", s.cfg.Addr), zap.Error(err))
				return
			}
			s.client = c
		}
		n, err := s.send(lines, timings)
		if failed == 0 {
			first = err
		}
		failed += n
	}
	s.warnFailed(failed, first)
}

// Run flushes every flush interval until Stop, then flushes once more and
// closes the client.
func (s *Sink) Run() {
	defer close(s.done)
	t := time.NewTicker(s.cfg.FlushInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			s.Flush()
		case <-s.stop:
			s.Flush()
			s.close()
			return
		}
	}
}

// Stop ends Run and waits for its last flush. Only call it once Run runs.
func (s *Sink) Stop() {
	s.once.Do(func() { close(s.stop) })
	<-s.done
}

// close closes the client, sending what it still holds.
func (s *Sink) close() {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	if s.client != nil {
		if err := s.client.Close(); err != nil {
			s.log.Warn("closing the statsd client", zap.Error(err))
		}
		s.client = nil
		// The last sends, made by Close.
		s.warnFailed(s.failed.take())
	}
}
