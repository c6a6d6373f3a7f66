package options

import (
	"flag"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/statsd"
	"github.com/envoy-rls/envoy-rls/pkg/audit"
	"github.com/envoy-rls/envoy-rls/pkg/topk"
)

// Defaults of the statsd flags.
const (
	DefaultStatsdProtocol      = "tcp"
	DefaultStatsdFlushInterval = statsd.DefaultFlushInterval
	DefaultNearLimitRatio      = "0.8"
)

// statsdOptions are the --statsd-* flags and --near-limit-ratio (part of
// Options). The ratio and the tags are kept as given and parsed by check.
type statsdOptions struct {
	StatsdAddr          string
	StatsdProtocol      string
	StatsdExtraTags     string
	StatsdFlushInterval time.Duration
	NearLimitRatio      string
}

// statsdFlags adds the statsd flags to fs.
func statsdFlags(fs *flag.FlagSet, o *statsdOptions) {
	fs.StringVar(&o.StatsdAddr, "statsd-addr", "", "send envoyproxy/ratelimit's stats (ratelimit.service.rate_limit.<domain>.<key…>.total_hits and others, docs/observe.md) to this statsd server, host:port (empty: off)")
	fs.StringVar(&o.StatsdProtocol, "statsd-protocol", DefaultStatsdProtocol, "statsd transport: tcp (as envoyproxy/ratelimit) or udp")
	fs.StringVar(&o.StatsdExtraTags, "statsd-extra-tags", "", "tags added to every stat name as .__key=value suffixes: key:value pairs, comma-separated (envoyproxy/ratelimit's EXTRA_TAGS)")
	fs.DurationVar(&o.StatsdFlushInterval, "statsd-flush-interval", DefaultStatsdFlushInterval, "how often the counters are sent to statsd")
	fs.StringVar(&o.NearLimitRatio, "near-limit-ratio", DefaultNearLimitRatio, "near_limit of statsd and --reference-metrics-addr: an allowed hit that takes a limit's usage above floor(limit × ratio) counts near_limit; 0 < ratio ≤ 1")
}

// statsdAccepts says what each statsd flag takes, as errors put it after
// "must be". Read only.
var statsdAccepts = map[string]string{
	"statsd-addr":           "host:port, or empty for no statsd",
	"statsd-protocol":       "tcp or udp",
	"statsd-extra-tags":     "key:value pairs separated by commas",
	"statsd-flush-interval": "a positive duration such as 10s",
	"near-limit-ratio":      "a number greater than 0 and at most 1, such as 0.8",
}

// check validates the statsd flags, one error per refused value.
func (o *statsdOptions) check(given map[string]Given) error {
	r := refusals{given: given, accepts: statsdAccepts}
	bad := r.check
	if o.StatsdAddr != "" {
		host, port, err := net.SplitHostPort(o.StatsdAddr)
		p, perr := strconv.Atoi(port)
		bad("statsd-addr", err == nil && host != "" && perr == nil && p > 0 && p < 65536)
	}
	bad("statsd-protocol", o.StatsdProtocol == "tcp" || o.StatsdProtocol == "udp")
	_, err := statsd.ParseTags(o.StatsdExtraTags)
	bad("statsd-extra-tags", err == nil)
	bad("statsd-flush-interval", o.StatsdFlushInterval > 0)
	_, ok := o.nearLimitRatio()
	bad("near-limit-ratio", ok)
	return r.err()
}

// nearLimitRatio parses --near-limit-ratio.
func (o *statsdOptions) nearLimitRatio() (float64, bool) {
	r, err := strconv.ParseFloat(o.NearLimitRatio, 64)
	return r, err == nil && r > 0 && r <= 1
}

// StatsdConfig is the statsd sink's configuration of the flags (Addr
// empty: off); its Logger is the caller's.
func (o *statsdOptions) StatsdConfig() statsd.Config {
	tags, _ := statsd.ParseTags(o.StatsdExtraTags) // checked by check
	ratio, _ := o.nearLimitRatio()
	return statsd.Config{
		Addr:           o.StatsdAddr,
		Protocol:       o.StatsdProtocol,
		Tags:           tags,
		FlushInterval:  o.StatsdFlushInterval,
		NearLimitRatio: ratio,
	}
}

// Defaults of the audit flags.
const (
	DefaultAuditRedisStream = "envoy-rls:audit"
	DefaultAuditRedisMaxLen = 100_000
	DefaultAuditSample      = "1"
	DefaultAuditQueueSize   = audit.DefaultQueueSize
	// maxAuditPolicySamples bounds --audit-sample-policy's list.
	maxAuditPolicySamples = 1000
	// Bounds of --audit-usage-interval.
	minAuditUsageInterval = 100 * time.Millisecond
	maxAuditUsageInterval = 24 * time.Hour
)

// auditOptions are the --audit-* flags (part of Options).
type auditOptions struct {
	AuditSink         string
	AuditRedisStream  string
	AuditRedisMaxLen  int64
	AuditFile         string
	AuditSample       string
	AuditSamplePolicy string
	AuditQueueSize    int
	AuditRequestIDKey string
	// AuditUsageInterval is the period of the usage records; 0: none.
	AuditUsageInterval time.Duration
}

// auditFlags adds the audit flags to fs.
func auditFlags(fs *flag.FlagSet, o *auditOptions) {
	fs.StringVar(&o.AuditSink, "audit-sink", "", "write an event per denial (shadow ones included) to: redis (a Redis Stream, through the --redis-* connection settings), file (JSON lines, --audit-file) or stdout (JSON lines); empty: off (docs/observe.md, Audit stream)")
	fs.StringVar(&o.AuditRedisStream, "audit-redis-stream", DefaultAuditRedisStream, "audit sink redis: the stream's key")
	fs.Int64Var(&o.AuditRedisMaxLen, "audit-redis-maxlen", DefaultAuditRedisMaxLen, fmt.Sprintf("audit sink redis: the stream is trimmed to about this many events (XADD MAXLEN ~), 1–%d", audit.MaxStreamLen))
	fs.StringVar(&o.AuditFile, "audit-file", "", "audit sink file: the file the JSON lines are appended to (created 0600 when missing)")
	fs.StringVar(&o.AuditSample, "audit-sample", DefaultAuditSample, "the share of denial events written, 0 < share ≤ 1 (random sampling)")
	fs.StringVar(&o.AuditSamplePolicy, "audit-sample-policy", "", "per-policy shares overriding --audit-sample: policy_id=share pairs, comma-separated")
	fs.IntVar(&o.AuditQueueSize, "audit-queue-size", DefaultAuditQueueSize, fmt.Sprintf("audit events waiting to be written, 1–%d; when full, events are dropped (envoy_rls_audit_dropped_total{reason=\"queue_full\"}), never the decision delayed", audit.MaxQueueSize))
	fs.DurationVar(&o.AuditUsageInterval, "audit-usage-interval", 0, fmt.Sprintf("write each tracked policy's usage totals (/v1/usage) to the audit sink as a \"kind\":\"usage\" record this often, %s–%s; 0: never", minAuditUsageInterval, maxAuditUsageInterval))
	fs.StringVar(&o.AuditRequestIDKey, "audit-request-id-key", "", "descriptor key whose one-entry descriptor carries the request id (Envoy request_headers action on x-request-id): never matched against the rules, its value is the events' request_id (empty: only x-request-id gRPC metadata)")
}

// auditAccepts says what each audit flag takes, as errors put it after
// "must be". Read only.
var auditAccepts = map[string]string{
	"audit-sink":           "redis, file, stdout, or empty for no audit sink",
	"audit-redis-stream":   "a non-empty Redis key",
	"audit-redis-maxlen":   fmt.Sprintf("an integer between 1 and %d", audit.MaxStreamLen),
	"audit-file":           "the file to append to (required with --audit-sink file)",
	"audit-sample":         "a number greater than 0 and at most 1, such as 0.1",
	"audit-sample-policy":  fmt.Sprintf("at most %d policy_id=share pairs separated by commas, each share greater than 0 and at most 1", maxAuditPolicySamples),
	"audit-queue-size":     fmt.Sprintf("an integer between 1 and %d", audit.MaxQueueSize),
	"audit-request-id-key": "a descriptor key of at most 128 bytes",
	"audit-usage-interval": fmt.Sprintf("0 (no usage records) or a duration from %s to %s, such as 5m", minAuditUsageInterval, maxAuditUsageInterval),
}

// check validates the audit flags, one error per refused value; redisAddr
// is --redis-addr, which the redis sink needs.
func (o *auditOptions) check(given map[string]Given, redisAddr string) error {
	r := refusals{given: given, accepts: auditAccepts}
	bad := r.check
	bad("audit-sink", o.AuditSink == "" || o.AuditSink == "redis" || o.AuditSink == "file" || o.AuditSink == "stdout")
	bad("audit-redis-stream", o.AuditRedisStream != "")
	bad("audit-redis-maxlen", o.AuditRedisMaxLen >= 1 && o.AuditRedisMaxLen <= audit.MaxStreamLen)
	bad("audit-file", o.AuditSink != "file" || o.AuditFile != "")
	_, ok := o.sampleRate()
	bad("audit-sample", ok)
	_, ok = parsePolicySamples(o.AuditSamplePolicy)
	bad("audit-sample-policy", ok)
	bad("audit-queue-size", o.AuditQueueSize >= 1 && o.AuditQueueSize <= audit.MaxQueueSize)
	bad("audit-request-id-key", len(o.AuditRequestIDKey) <= 128)
	bad("audit-usage-interval", o.AuditUsageInterval == 0 || o.AuditUsageInterval >= minAuditUsageInterval && o.AuditUsageInterval <= maxAuditUsageInterval)
	if o.AuditSink == "redis" && redisAddr == "" {
		r.errs = append(r.errs, fmt.Errorf("%s: the redis audit sink needs --redis-addr", Label("audit-sink", given)))
	}
	return r.err()
}

// AuditSampling is the audit sink's sampling: --audit-sample and the
// per-policy shares of --audit-sample-policy.
func (o *auditOptions) AuditSampling() (rate float64, perPolicy map[string]float64) {
	rate, _ = o.sampleRate()                               // checked by check
	perPolicy, _ = parsePolicySamples(o.AuditSamplePolicy) // checked by check
	return rate, perPolicy
}

// sampleRate parses --audit-sample.
func (o *auditOptions) sampleRate() (float64, bool) {
	r, err := strconv.ParseFloat(o.AuditSample, 64)
	return r, err == nil && r > 0 && r <= 1
}

// parsePolicySamples parses --audit-sample-policy.
func parsePolicySamples(s string) (map[string]float64, bool) {
	if strings.TrimSpace(s) == "" {
		return nil, true
	}
	pairs := strings.Split(s, ",")
	if len(pairs) > maxAuditPolicySamples {
		return nil, false
	}
	m := make(map[string]float64, len(pairs))
	for _, p := range pairs {
		id, share, found := strings.Cut(strings.TrimSpace(p), "=")
		r, err := strconv.ParseFloat(share, 64)
		if !found || id == "" || err != nil || !(r > 0 && r <= 1) {
			return nil, false
		}
		m[id] = r
	}
	return m, true
}

// topOptions are the --top-* flags (part of Options): the top consumers
// and usage sketches behind /v1/top and /v1/usage.
type topOptions struct {
	TopCounters     int
	TopMaxPolicies  int
	TopWindow       time.Duration
	TopMetricSeries int
}

// MaxTopMetricSeries bounds --top-metric-series.
const MaxTopMetricSeries = 1000

// topFlags adds the --top-* flags to fs.
func topFlags(fs *flag.FlagSet, o *topOptions) {
	fs.IntVar(&o.TopCounters, "top-counters", topk.DefaultCounters, fmt.Sprintf("top consumers: subjects monitored per policy, per ranking (hits, denials) and window, 1–%d (/v1/top answers at most this many)", topk.MaxCounters))
	fs.IntVar(&o.TopMaxPolicies, "top-max-policies", topk.DefaultMaxPolicies, fmt.Sprintf("top consumers and usage: the most policies tracked, 1–%d; decisions of further policies are counted in envoy_rls_top_untracked_total only", topk.MaxPolicies))
	fs.DurationVar(&o.TopWindow, "top-window", topk.DefaultWindow, "top consumers: the length of each of the two rotating windows; /v1/top covers the current and the previous one (at least 1s)")
	fs.IntVar(&o.TopMetricSeries, "top-metric-series", 0, fmt.Sprintf("export the heaviest subjects as envoy_rls_top_subject_hits, at most this many series in all, 0–%d (0: off); labels carry an 8-hex digest prefix, never a value", MaxTopMetricSeries))
}

// topAccepts says what each --top-* flag takes. Read only.
var topAccepts = map[string]string{
	"top-counters":      fmt.Sprintf("an integer from 1 to %d", topk.MaxCounters),
	"top-max-policies":  fmt.Sprintf("an integer from 1 to %d", topk.MaxPolicies),
	"top-window":        "a duration of at least 1s, such as 1m",
	"top-metric-series": fmt.Sprintf("an integer from 0 to %d", MaxTopMetricSeries),
}

// check validates the --top-* flags, one error per refused value.
func (o *topOptions) check(given map[string]Given) error {
	r := refusals{given: given, accepts: topAccepts}
	r.check("top-counters", o.TopCounters >= 1 && o.TopCounters <= topk.MaxCounters)
	r.check("top-max-policies", o.TopMaxPolicies >= 1 && o.TopMaxPolicies <= topk.MaxPolicies)
	r.check("top-window", o.TopWindow >= time.Second)
	r.check("top-metric-series", o.TopMetricSeries >= 0 && o.TopMetricSeries <= MaxTopMetricSeries)
	return r.err()
}

// TopConfig is the tracker's configuration of the --top-* flags.
func (o *topOptions) TopConfig() topk.Config {
	return topk.Config{Counters: o.TopCounters, MaxPolicies: o.TopMaxPolicies, Window: o.TopWindow}
}
