package app

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/envoy-rls/envoy-rls/internal/observe"
	"github.com/envoy-rls/envoy-rls/pkg/audit"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/redis"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
)

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
	fs.StringVar(&o.AuditSink, "audit-sink", "", "write an event per denial (shadow ones included) to: redis (a Redis Stream, through the --redis-* connection settings), file (JSON lines, --audit-file) or stdout (JSON lines); empty: off (docs/operations.md, Audit stream)")
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
func (o *auditOptions) check(given map[string]given, redisAddr string) error {
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
		r.errs = append(r.errs, fmt.Errorf("%s: the redis audit sink needs --redis-addr", label("audit-sink", given)))
	}
	return r.err()
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

// startAudit starts the audit sink when --audit-sink is set: it returns
// the auditor to give the rls server (nil when off) and the function that
// writes what is queued (bounded by observe.AuditDrainTimeout) and stops it.
// The audit metrics are registered either way.
func (s *server) startAudit(stdout io.Writer) (rls.Auditor, func(), error) {
	o := &s.opts.auditOptions
	w, where, err := s.openAuditWriter(stdout)
	if err != nil {
		return nil, nil, err
	}
	rate, _ := o.sampleRate()                             // checked by check
	samples, _ := parsePolicySamples(o.AuditSamplePolicy) // checked by check
	sink, err := observe.StartAudit(observe.AuditConfig{
		Writer: w, Sink: o.AuditSink, Where: where,
		Sample: rate, PolicySample: samples, QueueSize: o.AuditQueueSize,
		UsageInterval: o.AuditUsageInterval,
		Registerer:    s.reg,
		Log:           s.log,
	})
	if err != nil || sink == nil {
		return nil, func() {}, err
	}
	s.audit = sink
	stopUsage := s.startUsageRecords(sink)
	stop := func() {
		stopUsage()
		observe.CloseAudit(sink, s.log)
	}
	return observe.Auditor(sink), stop, nil
}

// openAuditWriter opens the writer of --audit-sink and says where it
// writes; nil when the sink is off.
func (s *server) openAuditWriter(stdout io.Writer) (audit.Writer, string, error) {
	o := &s.opts.auditOptions
	switch o.AuditSink {
	case "stdout":
		if stdout == nil {
			stdout = os.Stdout
		}
		return audit.NewJSONLines(stdout, false), "stdout", nil
	case "file":
		f, err := os.OpenFile(o.AuditFile, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return nil, "", fmt.Errorf("%s: must be a file this process can append to: %w", label("audit-file", s.opts.given), err)
		}
		return audit.NewJSONLines(f, true), o.AuditFile, nil
	case "redis":
		cfg, err := s.opts.redisConfig()
		if err != nil {
			return nil, "", fmt.Errorf("audit sink: %w", err)
		}
		dial := func() (rueidis.Client, error) { return redis.NewClient(cfg) }
		w, err := audit.NewRedisStream(dial, o.AuditRedisStream, o.AuditRedisMaxLen, nil)
		return w, o.AuditRedisStream, err
	}
	return nil, "", nil
}

// startUsageRecords writes a usage record per tracked policy to sink every
// --audit-usage-interval (nothing when 0); it returns the function that
// stops the writer, waits for it and queues a last record per policy (the
// totals up to the shutdown), to call before the sink closes.
func (s *server) startUsageRecords(sink *audit.Sink) func() {
	d := s.opts.AuditUsageInterval
	if d <= 0 || s.top == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		every(ctx, d, func(now time.Time) { observe.OfferUsage(sink, s.top, now) })
	}()
	return func() {
		cancel()
		<-done
		observe.OfferUsage(sink, s.top, time.Now())
	}
}
