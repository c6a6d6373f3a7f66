package audit

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Defaults and bounds of the audit flags.
const (
	DefaultRedisStream = "envoy-rls:audit"
	DefaultRedisMaxLen = 100_000
	DefaultSample      = "1"
	// maxPolicySamples bounds --audit-sample-policy's list.
	maxPolicySamples = 1000
	// Bounds of --audit-usage-interval.
	minUsageInterval = 100 * time.Millisecond
	maxUsageInterval = 24 * time.Hour
)

// Flags are the --audit-* flags of the serve command (a group of its
// options, internal/options): where the binary's audit stream goes and
// what it keeps. Start runs the stream they describe.
type Flags struct {
	// Sink is redis, file, stdout, or empty for none.
	Sink        string
	RedisStream string
	RedisMaxLen int64
	File        string
	// Sample and SamplePolicy are kept as given and parsed by Check.
	Sample       string
	SamplePolicy string
	QueueSize    int
	// RequestIDKey is the descriptor key of the request id
	// (rls.Config.RequestIDKey).
	RequestIDKey string
	// UsageInterval is the period of the usage records; 0: none.
	UsageInterval time.Duration
}

// flagAccepts says what each flag takes, as errors put it after "must
// be". Read only.
var flagAccepts = map[string]string{
	"audit-sink":           "redis, file, stdout, or empty for no audit sink",
	"audit-redis-stream":   "a non-empty Redis key",
	"audit-redis-maxlen":   fmt.Sprintf("an integer between 1 and %d", maxStreamLen),
	"audit-file":           "the file to append to (required with --audit-sink file)",
	"audit-sample":         "a number greater than 0 and at most 1, such as 0.1",
	"audit-sample-policy":  fmt.Sprintf("at most %d policy_id=share pairs separated by commas, each share greater than 0 and at most 1", maxPolicySamples),
	"audit-queue-size":     fmt.Sprintf("an integer between 1 and %d", maxQueueSize),
	"audit-request-id-key": "a descriptor key of at most 128 bytes",
	"audit-usage-interval": fmt.Sprintf("0 (no usage records) or a duration from %s to %s, such as 5m", minUsageInterval, maxUsageInterval),
}

// Define defines the flags on fs.
func (f *Flags) Define(fs *flag.FlagSet) map[string]string {
	fs.StringVar(&f.Sink, "audit-sink", "", "write an event per denial (shadow ones included) to: redis (a Redis Stream, through the --redis-* connection settings), file (JSON lines, --audit-file) or stdout (JSON lines); empty: off (docs/observe.md, Audit stream)")
	fs.StringVar(&f.RedisStream, "audit-redis-stream", DefaultRedisStream, "audit sink redis: the stream's key")
	fs.Int64Var(&f.RedisMaxLen, "audit-redis-maxlen", DefaultRedisMaxLen, fmt.Sprintf("audit sink redis: the stream is trimmed to about this many events (XADD MAXLEN ~), 1–%d", maxStreamLen))
	fs.StringVar(&f.File, "audit-file", "", "audit sink file: the file the JSON lines are appended to (created 0600 when missing)")
	fs.StringVar(&f.Sample, "audit-sample", DefaultSample, "the share of denial events written, 0 < share ≤ 1 (random sampling)")
	fs.StringVar(&f.SamplePolicy, "audit-sample-policy", "", "per-policy shares overriding --audit-sample: policy_id=share pairs, comma-separated")
	fs.IntVar(&f.QueueSize, "audit-queue-size", DefaultQueueSize, fmt.Sprintf("audit events waiting to be written, 1–%d; when full, events are dropped (envoy_rls_audit_dropped_total{reason=\"queue_full\"}), never the decision delayed", maxQueueSize))
	fs.DurationVar(&f.UsageInterval, "audit-usage-interval", 0, fmt.Sprintf("write each tracked policy's usage totals (/v1/usage) to the audit sink as a \"kind\":\"usage\" record this often, %s–%s; 0: never", minUsageInterval, maxUsageInterval))
	fs.StringVar(&f.RequestIDKey, "audit-request-id-key", "", "descriptor key whose one-entry descriptor carries the request id (Envoy request_headers action on x-request-id): never matched against the rules, its value is the events' request_id (empty: only x-request-id gRPC metadata)")
	return nil
}

// Check refuses, one error each, the values Start would; the redis sink
// needs --redis-addr (value).
func (f *Flags) Check(check func(string, bool, string), value func(string) string) {
	bad := func(name string, ok bool) { check(name, ok, "must be "+flagAccepts[name]) }
	bad("audit-sink", f.Sink == "" || f.Sink == "redis" || f.Sink == "file" || f.Sink == "stdout")
	bad("audit-redis-stream", f.RedisStream != "")
	bad("audit-redis-maxlen", f.RedisMaxLen >= 1 && f.RedisMaxLen <= maxStreamLen)
	bad("audit-file", f.Sink != "file" || f.File != "")
	_, ok := f.sampleRate()
	bad("audit-sample", ok)
	_, ok = parsePolicySamples(f.SamplePolicy)
	bad("audit-sample-policy", ok)
	bad("audit-queue-size", f.QueueSize >= 1 && f.QueueSize <= maxQueueSize)
	bad("audit-request-id-key", len(f.RequestIDKey) <= 128)
	bad("audit-usage-interval", f.UsageInterval == 0 || f.UsageInterval >= minUsageInterval && f.UsageInterval <= maxUsageInterval)
	check("audit-sink", f.Sink != "redis" || value("redis-addr") != "", "the redis audit sink needs --redis-addr")
}

// sampleRate parses --audit-sample.
func (f *Flags) sampleRate() (float64, bool) {
	r, err := strconv.ParseFloat(f.Sample, 64)
	return r, err == nil && r > 0 && r <= 1
}

// parsePolicySamples parses --audit-sample-policy.
func parsePolicySamples(s string) (map[string]float64, bool) {
	if strings.TrimSpace(s) == "" {
		return nil, true
	}
	pairs := strings.Split(s, ",")
	if len(pairs) > maxPolicySamples {
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
