// Package audit is the audit stream of denials: a Sink takes denial events
// on the request path without ever blocking it (a bounded queue that drops,
// counted, when full), samples them per policy, and a background writer
// sends them in batches to a Writer: a Redis Stream trimmed with
// XADD MAXLEN ~ (redisStream) or JSON lines on a file or stdout
// (JSONLines).
//
// Events carry no raw descriptor value: the subject is its HMAC digest.
package audit

import (
	"encoding/hex"
	"strconv"
	"time"
)

// Outcomes of an event.
const (
	// OutcomeOverLimit: a limit decided the denial (the store, the local
	// deny cache, the local fallback limiter, or a limit that can never
	// fit).
	OutcomeOverLimit = "over_limit"
	// OutcomeFailureMode: the store failed and the policy's failure mode
	// denied; nothing is known of the limit's state.
	OutcomeFailureMode = "failure_mode"
)

// Event is one denied limit.
type Event struct {
	// Time is when the call was answered.
	Time time.Time
	// Domain and PolicyID name the limit (configured strings).
	Domain, PolicyID string
	// Subject is the subject's HMAC digest.
	Subject [32]byte
	// Cost is the hits the descriptor asked for (hits_addend as sent).
	Cost uint64
	// Limit is the limit; Remaining what remained of it.
	Limit, Remaining int64
	// RetryAfter is the wait the answer announced.
	RetryAfter time.Duration
	// RequestID is the call's x-request-id, or empty.
	RequestID string
	// Shadow: the rule is in shadow mode (the call was answered OK).
	Shadow bool
	// Outcome is OutcomeOverLimit or OutcomeFailureMode.
	Outcome string
	// FailureMode is the failure mode that answered when the store failed
	// ("local": the local limiter denied, OutcomeOverLimit; "closed":
	// OutcomeFailureMode), or empty when the store decided.
	FailureMode string
	// Source is "rlqs" for the requests proxies reported denying by the
	// quota the Rate Limit Quota Service assigned them (Cost is how many,
	// since the proxies' last reports); empty for an RLS decision.
	Source string
	// Usage, when set, makes the event a usage record (KindUsage) of
	// Domain and PolicyID at Time: the denial fields are not used.
	Usage *usage
	// Admin, when set, makes the event an admin record (KindAdmin): the
	// denial fields are not used.
	Admin *Admin
}

// Record is an event as written: the JSON object of a JSON line, and the
// field names and values of a stream entry.
type Record struct {
	// Kind is KindDenial or KindUsage.
	Kind          string `json:"kind"`
	Time          string `json:"time"`
	Domain        string `json:"domain"`
	PolicyID      string `json:"policy_id"`
	SubjectDigest string `json:"subject_digest"`
	Cost          uint64 `json:"cost"`
	Limit         int64  `json:"limit"`
	Remaining     int64  `json:"remaining"`
	RetryAfterMs  int64  `json:"retry_after_ms"`
	RequestID     string `json:"request_id,omitempty"`
	Shadow        bool   `json:"shadow"`
	Outcome       string `json:"outcome"`
	FailureMode   string `json:"failure_mode,omitempty"`
	Source        string `json:"source,omitempty"`
	// Usage is a usage record's totals (KindUsage only).
	Usage *usageRecord `json:"-"`
	// Admin is an admin record (KindAdmin only).
	Admin *AdminRecord `json:"-"`
}

// timeFormat is the format of Record.Time: UTC, milliseconds.
const timeFormat = "2006-01-02T15:04:05.000Z07:00"

// Record is the event as written.
func (e *Event) Record() Record {
	if e.Admin != nil {
		return Record{Kind: KindAdmin, Time: e.Time.UTC().Format(timeFormat), Domain: e.Domain, PolicyID: e.PolicyID, Admin: e.adminRecord()}
	}
	if e.Usage != nil {
		return Record{Kind: kindUsage, Time: e.Time.UTC().Format(timeFormat), Domain: e.Domain, PolicyID: e.PolicyID, Usage: e.Usage.record()}
	}
	return Record{
		Kind:          kindDenial,
		Time:          e.Time.UTC().Format(timeFormat),
		Domain:        e.Domain,
		PolicyID:      e.PolicyID,
		SubjectDigest: hex.EncodeToString(e.Subject[:]),
		Cost:          e.Cost,
		Limit:         e.Limit,
		Remaining:     e.Remaining,
		RetryAfterMs:  e.RetryAfter.Milliseconds(),
		RequestID:     e.RequestID,
		Shadow:        e.Shadow,
		Outcome:       e.Outcome,
		FailureMode:   e.FailureMode,
		Source:        e.Source,
	}
}

// fields are the record's stream fields, as name, value pairs in a fixed
// order (request_id and failure_mode only when set).
func (r *Record) fields() [][2]string {
	if r.Kind == KindAdmin && r.Admin != nil {
		return append([][2]string{{"kind", KindAdmin}, {"time", r.Time}}, r.Admin.fields()...)
	}
	kind := kindDenial
	if r.Kind == kindUsage && r.Usage != nil {
		kind = kindUsage
	}
	f := [][2]string{{"kind", kind}, {"time", r.Time}, {"domain", r.Domain}, {"policy_id", r.PolicyID}}
	if kind == kindUsage {
		return append(f, r.Usage.fields()...)
	}
	f = append(f, [][2]string{
		{"subject_digest", r.SubjectDigest},
		{"cost", strconv.FormatUint(r.Cost, 10)},
		{"limit", strconv.FormatInt(r.Limit, 10)},
		{"remaining", strconv.FormatInt(r.Remaining, 10)},
		{"retry_after_ms", strconv.FormatInt(r.RetryAfterMs, 10)},
		{"shadow", strconv.FormatBool(r.Shadow)},
		{"outcome", r.Outcome},
	}...)
	if r.RequestID != "" {
		f = append(f, [2]string{"request_id", r.RequestID})
	}
	if r.FailureMode != "" {
		f = append(f, [2]string{"failure_mode", r.FailureMode})
	}
	if r.Source != "" {
		f = append(f, [2]string{"source", r.Source})
	}
	return f
}
