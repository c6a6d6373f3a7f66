package descriptors

import (
	"crypto/rand"
	"fmt"
	"strings"
	"time"
)

// DomainInfo describes one domain for the admin configuration page. It holds
// configured strings only: no secret and no request value.
type DomainInfo struct {
	Domain string     `json:"domain"`
	File   string     `json:"file"`
	Rules  []ruleInfo `json:"rules"`
	// Policies lists the named policies defined in the domain's file.
	Policies []string `json:"policies,omitempty"`
}

// ruleInfo describes one rule (a descriptor with a rate_limit or policy).
type ruleInfo struct {
	Path            string   `json:"path"`
	Source          string   `json:"source"`
	PolicyID        string   `json:"policy_id,omitempty"`
	PolicyName      string   `json:"policy,omitempty"`
	Name            string   `json:"name,omitempty"`
	Replaces        []string `json:"replaces,omitempty"`
	Unlimited       bool     `json:"unlimited,omitempty"`
	Algorithm       string   `json:"algorithm,omitempty"`
	RequestsPerUnit uint32   `json:"requests_per_unit"`
	Unit            string   `json:"unit,omitempty"`
	UnitMultiplier  uint32   `json:"unit_multiplier,omitempty"`
	Window          string   `json:"window,omitempty"`
	// Calendar: the window is the calendar period of TimeZone.
	Calendar       bool           `json:"calendar,omitempty"`
	TimeZone       string         `json:"time_zone,omitempty"`
	Burst          uint32         `json:"burst,omitempty"`
	Revision       uint32         `json:"revision,omitempty"`
	FailureMode    string         `json:"failure_mode,omitempty"`
	Headers        string         `json:"headers,omitempty"`
	ShadowMode     bool           `json:"shadow_mode,omitempty"`
	QuotaMode      bool           `json:"quota_mode,omitempty"`
	ShareThreshold bool           `json:"share_threshold,omitempty"`
	DetailedMetric bool           `json:"detailed_metric,omitempty"`
	ValueToMetric  bool           `json:"value_to_metric,omitempty"`
	Metadata       map[string]any `json:"metadata,omitempty"`
	// LimitIndex and LimitCount place a limit of a descriptor's
	// rate_limits list: its position (from 0) and the list's length
	// (LimitCount is 0 for a descriptor with one rate_limit).
	LimitIndex int `json:"limit_index,omitempty"`
	LimitCount int `json:"limit_count,omitempty"`
	// Penalty is the penalty box, durations as Go duration strings.
	Penalty *penaltyInfo `json:"penalty,omitempty"`
	// Concurrency and LeaseTTL describe a concurrency limit (then
	// RequestsPerUnit is Concurrency, and Unit and Window are empty).
	Concurrency uint32 `json:"concurrency,omitempty"`
	LeaseTTL    string `json:"lease_ttl,omitempty"`
	// Reserve is a budget's reservations (limiter.Reserve).
	Reserve *reserveInfo `json:"reserve,omitempty"`
}

// reserveInfo describes a rule's reserve: the ttl as a Go duration string;
// an estimate of 0 reserves each request's own hits_addend.
type reserveInfo struct {
	TTL      string `json:"ttl"`
	Estimate int64  `json:"estimate"`
}

// penaltyInfo describes a rule's penalty box (limiter.Penalty).
type penaltyInfo struct {
	Duration    string `json:"duration"`
	MaxDuration string `json:"max_duration"`
	Decay       string `json:"decay"`
}

// Domains describes every domain, sorted by name, rules in file order. The
// result is a fresh copy except for Metadata maps, which are shared and must
// not be modified.
func (s *Snapshot) Domains() []DomainInfo {
	if s == nil {
		return nil
	}
	out := make([]DomainInfo, 0, len(s.order))
	for _, d := range s.order {
		di := DomainInfo{Domain: d.name, File: d.file, Rules: make([]ruleInfo, 0, len(d.rules))}
		di.Policies = append(di.Policies, d.policyNames...)
		for _, r := range d.rules {
			di.Rules = append(di.Rules, r.info())
		}
		out = append(out, di)
	}
	return out
}

func (r *Rule) info() ruleInfo {
	ri := ruleInfo{
		Path:            r.Path,
		Source:          r.Source,
		PolicyName:      r.PolicyName,
		Name:            r.Name,
		Replaces:        append([]string(nil), r.Replaces...),
		Unlimited:       r.Unlimited,
		RequestsPerUnit: r.RequestsPerUnit,
		Burst:           r.Burst,
		Headers:         r.Headers.String(),
		ShadowMode:      r.ShadowMode,
		QuotaMode:       r.QuotaMode,
		ShareThreshold:  r.ShareThreshold,
		DetailedMetric:  r.DetailedMetric,
		ValueToMetric:   r.ValueToMetric,
		Metadata:        r.Metadata,
		LimitIndex:      r.LimitIndex,
		LimitCount:      len(r.Limits),
	}
	if r.Policy != nil {
		ri.PolicyID = r.Policy.ID()
		ri.Algorithm = r.Policy.Algorithm().String()
		ri.Unit = r.Unit.String()
		ri.UnitMultiplier = r.UnitMultiplier
		ri.Window = r.Window().String()
		ri.Revision = r.Policy.Revision()
		ri.FailureMode = r.Policy.FailureMode().String()
		if c := r.Policy.Calendar(); c != nil {
			ri.Calendar, ri.TimeZone, ri.Window = true, c.Location.String(), "calendar "+c.Unit.String()
		}
		if pn := r.Policy.Penalty(); pn.On() {
			ri.Penalty = &penaltyInfo{Duration: pn.Duration.String(), MaxDuration: pn.MaxDuration.String(), Decay: pn.Decay.String()}
		}
		if rs := r.Policy.Reserve(); rs.On() {
			ri.Reserve = &reserveInfo{TTL: rs.TTL.String(), Estimate: rs.Estimate}
		}
		if r.Policy.Leases() {
			ri.Concurrency, ri.Unit, ri.UnitMultiplier, ri.Window = r.RequestsPerUnit, "", 0, ""
			ri.LeaseTTL = (time.Duration(r.Policy.LeaseTTLMillis()) * time.Millisecond).String()
		}
	}
	return ri
}

// Validate loads the rule files at path as Load does (with a throw-away
// secret) and, on success, returns a human summary of the domains and
// policies found. On failure the error is the *ConfigError (or a read
// error); its Error method prints one file:line:col: reason per line.
func Validate(path string, lim Limits, note func(*Rule) string) (summary string, err error) {
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return "", fmt.Errorf("descriptors: reading random bytes: %w", err)
	}
	s, err := Load(path, Options{Secret: secret, Limits: lim})
	if err != nil {
		return "", err
	}
	return s.summary(note), nil
}

// Summary describes the snapshot for humans: one line per domain and one
// per rule.
func (s *Snapshot) Summary() string { return s.summary(nil) }

// summary is Summary with, under each rule note returns something for,
// that line.
func (s *Snapshot) summary(note func(*Rule) string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "OK: %d file(s), %d domain(s), %d rule(s) (%d limited)\n", len(s.files), len(s.order), s.rules, s.limited)
	for _, d := range s.order {
		fmt.Fprintf(&b, "domain %s (%s)\n", d.name, d.file)
		if len(d.policyNames) > 0 {
			fmt.Fprintf(&b, "  named policies: %s\n", strings.Join(d.policyNames, ", "))
		}
		for _, r := range d.rules {
			fmt.Fprintf(&b, "  %s\n    %s\n", r.Path, r.info().describe())
			if note != nil {
				if n := note(r); n != "" {
					fmt.Fprintf(&b, "    %s\n", n)
				}
			}
		}
	}
	return b.String()
}

func (r ruleInfo) describe() string {
	if r.Unlimited {
		return "unlimited" + r.flags()
	}
	var b strings.Builder
	if r.LeaseTTL != "" {
		fmt.Fprintf(&b, "policy %s: concurrency %d in flight, lease_ttl %s", r.PolicyID, r.Concurrency, r.LeaseTTL)
		return b.String() + r.flags()
	}
	fmt.Fprintf(&b, "policy %s: %s %d per ", r.PolicyID, r.Algorithm, r.RequestsPerUnit)
	if r.UnitMultiplier > 1 {
		fmt.Fprintf(&b, "%d %ss", r.UnitMultiplier, r.Unit)
	} else {
		b.WriteString(r.Unit)
	}
	if r.Calendar {
		fmt.Fprintf(&b, " (calendar, %s)", r.TimeZone)
	}
	if r.Burst > 0 {
		fmt.Fprintf(&b, ", burst %d", r.Burst)
	}
	if r.Revision > 1 {
		fmt.Fprintf(&b, ", revision %d", r.Revision)
	}
	if pn := r.Penalty; pn != nil {
		fmt.Fprintf(&b, ", penalty %s", pn.Duration)
		if pn.MaxDuration != pn.Duration {
			fmt.Fprintf(&b, " doubling up to %s within %s of the last block", pn.MaxDuration, pn.Decay)
		}
	}
	if rs := r.Reserve; rs != nil && rs.Estimate > 0 {
		fmt.Fprintf(&b, ", reserve %d for %s", rs.Estimate, rs.TTL)
	} else if rs != nil {
		fmt.Fprintf(&b, ", reserve hits_addend for %s", rs.TTL)
	}
	switch r.FailureMode {
	case "open":
		b.WriteString(", fails open")
	case "local":
		b.WriteString(", falls back to a local share")
	}
	if r.Headers != "" {
		fmt.Fprintf(&b, ", headers %s", r.Headers)
	}
	b.WriteString(r.flags())
	return b.String()
}

func (r ruleInfo) flags() string {
	var f []string
	for _, x := range []struct {
		on   bool
		name string
	}{{r.ShadowMode, "shadow_mode"}, {r.QuotaMode, "quota_mode"}, {r.ShareThreshold, "share_threshold"},
		{r.DetailedMetric, "detailed_metric"}, {r.ValueToMetric, "value_to_metric"}} {
		if x.on {
			f = append(f, x.name)
		}
	}
	if r.LimitCount > 0 {
		f = append(f, fmt.Sprintf("rate_limits[%d] of %d", r.LimitIndex, r.LimitCount))
	}
	if r.Name != "" {
		f = append(f, "name="+r.Name)
	}
	if len(r.Replaces) > 0 {
		f = append(f, "replaces="+strings.Join(r.Replaces, ","))
	}
	if r.PolicyName != "" {
		f = append(f, "uses policy "+r.PolicyName)
	}
	if len(f) == 0 {
		return ""
	}
	return " [" + strings.Join(f, ", ") + "]"
}

// DomainsDigested is Domains with every configured descriptor value
// replaced by its digest (configDigest: "hmac:" and 16 hex digits): the
// values of each rule's Path, and a policy ID derived from a path that
// holds a value (a rule without a unique name) is replaced by the digest
// of the ID. It is what /config shows without an admin token.
func (s *Snapshot) DomainsDigested() []DomainInfo {
	out := s.Domains()
	for i, d := range s.order {
		for j, r := range d.rules {
			ri := &out[i].Rules[j]
			valued := false
			digested := make([]pathSeg, len(r.segs))
			for k, seg := range r.segs {
				digested[k] = seg
				if seg.value != "" {
					valued = true
					digested[k].value = s.configDigest('v', seg.key, seg.value)
				}
			}
			if !valued {
				continue
			}
			ri.Path = joinPath(d.name, digested)
			if r.idFromPath && ri.PolicyID != "" {
				ri.PolicyID = s.configDigest('i', "", ri.PolicyID)
			}
		}
	}
	return out
}
