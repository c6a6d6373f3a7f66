package descriptors

import (
	"errors"
	"slices"
	"time"
)

// Reload results, usable as the `result` label of a reload counter.
const (
	resultSuccess = "success"
	resultFailure = "failure"
)

// TriggerInitial is the trigger of a rule source's first load. Each source
// names its other triggers (package rulefile: manual and watch; package
// xds: xds).
const TriggerInitial = "initial"

// ReloadResult describes one load attempt of a rule source.
type ReloadResult struct {
	Time    time.Time
	Trigger string
	OK      bool
	// Err is nil when OK; otherwise a *ConfigError or a read error. The
	// previous snapshot stays in service.
	Err error
	// Problems lists Err's problems when it is a *ConfigError.
	Problems []Problem
	// Fingerprint, Domains and Rules describe the snapshot in service after
	// the attempt.
	Fingerprint string
	Domains     int
	Rules       int
}

// NewReloadResult is the ReloadResult of a load attempt of trigger that
// ended with err (nil: it succeeded); s is the snapshot in service after it
// (nil: none).
func NewReloadResult(trigger string, s *Snapshot, err error) ReloadResult {
	res := ReloadResult{Time: time.Now(), Trigger: trigger, OK: err == nil, Err: err}
	var ce *ConfigError
	if errors.As(err, &ce) {
		res.Problems = slices.Clone(ce.Problems)
	}
	if s != nil {
		res.Fingerprint = s.Fingerprint()
		res.Domains, res.Rules = s.Size()
	}
	return res
}

// Result is resultSuccess or resultFailure.
func (r ReloadResult) Result() string {
	if r.OK {
		return resultSuccess
	}
	return resultFailure
}
