package app

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/redis/rueidis"

	"github.com/envoy-rls/envoy-rls/internal/observe"
	"github.com/envoy-rls/envoy-rls/internal/options"
	"github.com/envoy-rls/envoy-rls/pkg/audit"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/redis"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
)

// startAudit starts the audit sink when --audit-sink is set: it returns
// the auditor to give the rls server (nil when off) and the function that
// writes what is queued (bounded by observe.AuditDrainTimeout) and stops it.
// The audit metrics are registered either way.
func (s *server) startAudit(stdout io.Writer) (rls.Auditor, func(), error) {
	o := s.opts
	w, where, err := s.openAuditWriter(stdout)
	if err != nil {
		return nil, nil, err
	}
	rate, samples := o.AuditSampling()
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
	o := s.opts
	switch o.AuditSink {
	case "stdout":
		if stdout == nil {
			stdout = os.Stdout
		}
		return audit.NewJSONLines(stdout, false), "stdout", nil
	case "file":
		f, err := os.OpenFile(o.AuditFile, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return nil, "", fmt.Errorf("%s: must be a file this process can append to: %w", options.Label("audit-file", s.opts.Given), err)
		}
		return audit.NewJSONLines(f, true), o.AuditFile, nil
	case "redis":
		cfg, err := s.opts.RedisConfig()
		if err != nil {
			return nil, "", fmt.Errorf("audit sink: %w", err)
		}
		dial := func() (rueidis.Client, error) { return redis.NewClient(cfg, "envoy-rls-audit") }
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
