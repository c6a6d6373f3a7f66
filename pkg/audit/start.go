package audit

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/rueidis"
	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/pkg/limiter/redis"
	"github.com/envoy-rls/envoy-rls/pkg/topk"
)

// drainTimeout bounds writing the queued events when the binary stops,
// after the in-flight calls have drained.
const drainTimeout = 2 * time.Second

// StartConfig is what Start takes besides the flags.
type StartConfig struct {
	// Registerer takes the audit metrics, registered with or without a
	// sink. (Required)
	Registerer prometheus.Registerer
	// Log receives the sink's start line and write failures. (Required)
	Log *zap.Logger
	// Label names a flag as the user set it, for errors. (Required)
	Label func(flag string) string
	// Stdout is the stdout sink's writer. (Optional, default os.Stdout)
	Stdout io.Writer
	// Redis reads the Redis connection settings the redis sink writes
	// through (read only for that sink). (Required with it)
	Redis func() (redis.Config, error)
	// Top is the tracker whose usage the usage records write. (Optional:
	// no usage records without it)
	Top *topk.Tracker
}

// Start runs the audit stream of the checked f: it returns the sink (nil
// when --audit-sink is empty) and the function that stops the usage
// records, writes what is queued (within DrainTimeout) and closes the
// sink. The audit metrics are registered either way.
func Start(f *Flags, c StartConfig) (*Sink, func(), error) {
	w, where, err := f.openWriter(c)
	if err != nil {
		return nil, nil, err
	}
	m, err := NewMetrics(c.Registerer)
	if err != nil || w == nil {
		if w != nil {
			_ = w.Close()
		}
		return nil, func() {}, err
	}
	rate, _ := f.sampleRate()                          // checked by Check
	perPolicy, _ := parsePolicySamples(f.SamplePolicy) // checked by Check
	sink, err := New(Config{Writer: w, Metrics: m, QueueSize: f.QueueSize, Sample: rate, PolicySample: perPolicy, Logger: c.Log})
	if err != nil {
		_ = w.Close()
		return nil, nil, err
	}
	c.Log.Info("writing denial events to the audit sink",
		zap.String("sink", f.Sink),
		zap.String("to", where),
		zap.Float64("sample", rate),
		zap.Int("policy_samples", len(perPolicy)),
		zap.Int("queue_size", f.QueueSize),
		zap.Duration("usage_interval", f.UsageInterval))
	stopUsage := sink.writeUsage(c.Top, f.UsageInterval)
	return sink, func() {
		stopUsage()
		if err := sink.Close(drainTimeout); err != nil {
			c.Log.Warn("audit sink: closing", zap.Error(err))
		}
	}, nil
}

// openWriter opens the writer of --audit-sink and says where it writes;
// nil when the sink is off.
func (f *Flags) openWriter(c StartConfig) (writer, string, error) {
	switch f.Sink {
	case "stdout":
		out := c.Stdout
		if out == nil {
			out = os.Stdout
		}
		return NewJSONLines(out, false), "stdout", nil
	case "file":
		file, err := os.OpenFile(f.File, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return nil, "", fmt.Errorf("%s: must be a file this process can append to: %w", c.Label("audit-file"), err)
		}
		return NewJSONLines(file, true), f.File, nil
	case "redis":
		cfg, err := c.Redis()
		if err != nil {
			return nil, "", fmt.Errorf("audit sink: %w", err)
		}
		dial := func() (rueidis.Client, error) { return redis.NewClient(cfg, "envoy-rls-audit") }
		w, err := newRedisStream(dial, f.RedisStream, f.RedisMaxLen, nil)
		return w, f.RedisStream, err
	}
	return nil, "", nil
}

// writeUsage queues a usage record per policy top tracks every interval
// (nothing when 0 or top is nil); it returns the function that stops it,
// waits for it and queues a last record per policy (the totals up to the
// stop), to call before the sink closes.
func (s *Sink) writeUsage(top *topk.Tracker, interval time.Duration) func() {
	if interval <= 0 || top == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				s.recordUsage(top, now)
			}
		}
	}()
	return func() {
		cancel()
		<-done
		s.recordUsage(top, time.Now())
	}
}

// recordUsage queues one usage record per policy top tracks, stamped now.
func (s *Sink) recordUsage(top *topk.Tracker, now time.Time) {
	for _, u := range top.Usage(topk.Filter{}) {
		s.offerUsage(Event{Time: now, Domain: u.Domain, PolicyID: u.Policy, Usage: &usage{
			Key: u.Key, Since: u.Since, Hits: u.Hits, Decisions: u.Decisions, Denials: u.Denials,
			ShadowDenials: u.ShadowDenials, DistinctSubjects: u.DistinctSubjects, Reserved: u.Reserved, Used: u.Used,
		}})
	}
}
