package app

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
)

// reloadDoc is a load attempt as shown on /config.
type reloadDoc struct {
	Time        time.Time             `json:"time"`
	Trigger     string                `json:"trigger"`
	OK          bool                  `json:"ok"`
	Error       string                `json:"error,omitempty"`
	Problems    []descriptors.Problem `json:"problems,omitempty"`
	Fingerprint string                `json:"fingerprint,omitempty"`
	Domains     int                   `json:"domains"`
	Rules       int                   `json:"rules"`
}

func newReloadDoc(r descriptors.ReloadResult) reloadDoc {
	d := reloadDoc{
		Time: r.Time.UTC(), Trigger: r.Trigger, OK: r.OK, Problems: r.Problems,
		Fingerprint: r.Fingerprint, Domains: r.Domains, Rules: r.Rules,
	}
	var ce *descriptors.ConfigError
	switch {
	case r.Err == nil:
	case errors.As(r.Err, &ce):
		d.Error = "invalid configuration"
	case limitMessage(r.Err) != "":
		d.Error = limitMessage(r.Err)
	default:
		d.Error = r.Err.Error()
	}
	return d
}

// ruleSet is the descriptors.Watcher of --config, seen by the server.
type ruleSet struct {
	w *descriptors.Watcher
}

// newRuleSet loads path (the first load must succeed) and reports every
// later reload to onReload.
func newRuleSet(path string, opts descriptors.Options, onReload func(descriptors.ReloadResult)) (*ruleSet, error) {
	w, err := descriptors.NewWatcher(path, opts, onReload)
	if err != nil {
		return nil, err
	}
	return &ruleSet{w: w}, nil
}

func (rs *ruleSet) current() *descriptors.Snapshot { return rs.w.Current() }

// rules is the rls.Config.Rules function.
func (rs *ruleSet) rules() rls.Rules {
	if s := rs.w.Current(); s != nil {
		return s
	}
	return nil
}

func (rs *ruleSet) reload() descriptors.ReloadResult { return rs.w.Reload() }

func (rs *ruleSet) lastResult() reloadDoc { return newReloadDoc(rs.w.Last()) }

// watch reloads when the rule files change, until ctx ends.
func (rs *ruleSet) watch(ctx context.Context) error { return rs.w.Run(ctx) }

// onReload counts and logs one load attempt.
func (s *server) onReload(r descriptors.ReloadResult) {
	s.metrics.reload(r.OK)
	if r.OK {
		s.log.Info("rules loaded", zap.String("config", s.opts.Config), zap.String("trigger", r.Trigger),
			zap.String("fingerprint", r.Fingerprint), zap.Int("domains", r.Domains), zap.Int("rules", r.Rules))
		return
	}
	problems := make([]string, 0, min(len(r.Problems), 50))
	for i, p := range r.Problems {
		if i == 50 {
			break
		}
		problems = append(problems, p.String())
	}
	errField := zap.Error(r.Err)
	if msg := limitMessage(r.Err); msg != "" {
		errField = zap.String("error", msg)
	}
	s.log.Error("rules not reloaded; keeping the previous rules", zap.String("config", s.opts.Config),
		zap.String("trigger", r.Trigger), errField, zap.Strings("problems", problems))
}
