package store

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/denycache"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/failover"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/journal"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/memory"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/redis"
)

// Metrics are the stores' collectors, each built by its owner. Every one
// is registered whatever the store and the deny cache, so that dashboards
// and alerts see a zero instead of a missing series.
type Metrics struct {
	Memory   *memory.Metrics
	Cache    *denycache.Metrics
	Redis    *redis.Metrics
	Journal  *journal.Metrics
	Failover *failover.Metrics
}

// NewMetrics registers the stores' collectors on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	var m Metrics
	var err error
	if m.Memory, err = memory.NewMetrics(reg); err != nil {
		return nil, err
	}
	if m.Cache, err = denycache.NewMetrics(reg); err != nil {
		return nil, err
	}
	if m.Redis, err = redis.NewMetrics(reg); err != nil {
		return nil, err
	}
	if m.Journal, err = journal.NewMetrics(reg); err != nil {
		return nil, err
	}
	if m.Failover, err = failover.NewMetrics(reg); err != nil {
		return nil, err
	}
	return &m, nil
}

// journalStopTimeout bounds the journal's last replay at stop, after the
// drain: within the Helm chart's default grace (30 s) beyond its preStop
// sleep and drain (5 s + 15 s).
const journalStopTimeout = 2 * time.Second

// Answering is the store the service evaluates with: st behind
// failover, which answers every failure by its policy's failure mode;
// with the Redis store, also behind the charge journal
// (pkg/limiter/journal), which keeps the charges and lease releases Redis
// could not record and applies them when it answers again. The journal's
// file, when set, is read back against policies (the rules in service);
// its replay runs until ctx ends. stop, called once ctx has ended and
// before st closes, waits for the replay and replays what is left (at
// most journalStopTimeout), saving or reporting what it could not. The
// memory store needs no journal: it decides within the call, and refuses
// only at capacity.
func (f *Flags) Answering(ctx context.Context, st limiter.Store, policies []*limiter.Policy, c Config) (answering limiter.Store, stop func(), err error) {
	var j *journal.Journal
	if c.Kind == "redis" {
		if j, err = f.newJournal(st, policies, c); err != nil {
			return nil, nil, err
		}
		st = j
	}
	answering, err = failover.New(st, failover.Config{
		Replicas: f.ReplicasHint, MaxEntries: f.LocalFallbackMaxEntries,
		Clock: c.Clock, Observer: localLog{c.Log.Named("rls")}, Metrics: c.Metrics.Failover,
	})
	if err != nil || j == nil {
		return answering, func() {}, err
	}
	replayed := make(chan struct{})
	go func() {
		defer close(replayed)
		j.Run(ctx)
	}()
	return answering, func() {
		<-replayed
		stopJournal(j, f.JournalFile, c.Log.Named("journal"))
	}, nil
}

// newJournal is the charge journal over st, with the entries of its file
// restored.
func (f *Flags) newJournal(st limiter.Store, policies []*limiter.Policy, c Config) (*journal.Journal, error) {
	j, err := journal.New(journal.Config{MaxEntries: f.JournalMaxEntries, File: f.JournalFile, Store: st, Clock: c.Clock, Observer: c.Metrics.Journal})
	if err != nil {
		return nil, fmt.Errorf("--journal-file: %w", err)
	}
	if f.JournalFile != "" {
		log := c.Log.Named("journal")
		n, err := j.Restore(policies)
		if err != nil {
			log.Error("journal file not restored", zap.String("file", f.JournalFile), zap.Error(err))
		} else if n > 0 {
			log.Info("journal restored: applying the charges and releases of the last stop", zap.String("file", f.JournalFile), zap.Int("entries", n))
		}
	}
	return j, nil
}

// stopJournal replays what the journal holds, within journalStopTimeout,
// and saves or reports what is left.
func stopJournal(j *journal.Journal, file string, log *zap.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), journalStopTimeout)
	defer cancel()
	left, saved, err := j.Stop(ctx)
	switch {
	case left == 0:
	case saved:
		log.Warn("journal: charges and releases Redis could not record written to the journal file, for the next start", zap.String("file", file), zap.Int("entries", left))
	default:
		log.Error("journal: charges and releases Redis could not record are lost at stop (set --journal-file to keep them)", zap.Int("entries", left), zap.Error(err))
	}
}

// Log messages of the local fallback.
const (
	msgLocalStarted = "store failed: deciding failure_mode local limits with this replica's share"
	msgLocalDropped = "store decides again: local fallback state dropped"
)

// localLog is failover's observer: it logs when the local limiter starts
// and stops deciding.
type localLog struct{ log *zap.Logger }

func (l localLog) LocalStarted(replicas int) {
	l.log.Warn(msgLocalStarted, zap.Int("replicas_hint", replicas))
}

func (l localLog) LocalDropped() { l.log.Info(msgLocalDropped) }
