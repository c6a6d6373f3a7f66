package app

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/journal"
)

// journalStopTimeout bounds the journal's last replay at stop, after the
// drain: within the Helm chart's default grace (30 s) beyond its preStop
// sleep and drain (5 s + 15 s).
const journalStopTimeout = 2 * time.Second

// startJournal returns the store the service evaluates with. With the
// Redis store it is s.store behind the charge journal (pkg/limiter/journal):
// the charges and lease releases Redis could not record are kept and
// applied when it answers again. The journal's file, when set, is read
// back against the rules in service; its replay runs in wg until ctx ends;
// its Stop runs before the store closes (it is put in front of
// *closeStore). The memory store needs no journal: it decides within the
// call, and refuses only at capacity.
func (s *server) startJournal(ctx context.Context, wg *sync.WaitGroup, closeStore *func()) (limiter.Store, error) {
	if s.opts.Store != "redis" {
		return s.store, nil
	}
	cfg := s.opts.JournalConfig()
	cfg.Store, cfg.Clock, cfg.Observer = s.store, s.clock, s.metrics.Journal
	j, err := journal.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("--journal-file: %w", err)
	}
	log := s.log.Named("journal")
	if cfg.File != "" {
		n, err := j.Restore(s.rules.Current().Policies())
		if err != nil {
			log.Error("journal file not restored", zap.String("file", cfg.File), zap.Error(err))
		} else if n > 0 {
			log.Info("journal restored: applying the charges and releases of the last stop", zap.String("file", cfg.File), zap.Int("entries", n))
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		j.Run(ctx)
	}()
	closeFn := *closeStore
	*closeStore = func() {
		stopJournal(j, cfg.File, log)
		closeFn()
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
