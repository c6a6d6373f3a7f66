package audit

import (
	"encoding/json"
	"strconv"
	"time"
)

// Record kinds: the "kind" field of every record.
const (
	// KindDenial: one denied limit (Event without Usage).
	kindDenial = "denial"
	// KindUsage: one policy's usage totals at a periodic snapshot.
	kindUsage = "usage"
)

// usage is a policy's usage totals since Since, as /v1/usage reports them;
// an Event carrying one is a usage record. It holds no subject.
type usage struct {
	// Key is the descriptor key the policy limits.
	Key string
	// Since is the start of the period the totals cover.
	Since time.Time
	// Hits is cost-weighted; Decisions counts descriptor decisions.
	Hits, Decisions, Denials, ShadowDenials int64
	// DistinctSubjects is estimated (HyperLogLog).
	DistinctSubjects uint64
	// Reserved and Used are a reserving policy's units held by committed
	// reserves and the usage its settles reported; both 0 for a policy
	// that has not reserved.
	Reserved, Used int64
}

// usageRecord is a usage record's "usage" object.
type usageRecord struct {
	Key              string `json:"key"`
	Since            string `json:"since"`
	Hits             int64  `json:"hits"`
	Decisions        int64  `json:"decisions"`
	Denials          int64  `json:"denials"`
	ShadowDenials    int64  `json:"shadow_denials"`
	DistinctSubjects uint64 `json:"distinct_subjects"`
	// Reserved and Used are present for a policy that has reserved.
	Reserved *int64 `json:"reserved,omitempty"`
	Used     *int64 `json:"used,omitempty"`
}

func (u *usage) record() *usageRecord {
	r := &usageRecord{Key: u.Key, Since: u.Since.UTC().Format(timeFormat), Hits: u.Hits, Decisions: u.Decisions,
		Denials: u.Denials, ShadowDenials: u.ShadowDenials, DistinctSubjects: u.DistinctSubjects}
	if u.Reserved != 0 || u.Used != 0 {
		r.Reserved, r.Used = &u.Reserved, &u.Used
	}
	return r
}

// usageJSON is a usage record as a JSON line: no denial field.
type usageJSON struct {
	Kind     string       `json:"kind"`
	Time     string       `json:"time"`
	Domain   string       `json:"domain"`
	PolicyID string       `json:"policy_id"`
	Usage    *usageRecord `json:"usage"`
}

// denialJSON is Record without its methods, to encode a denial.
type denialJSON Record

// MarshalJSON writes a denial with its fields, a usage record with
// kind, time, domain, policy_id and usage only, and an admin record with
// its own fields (AdminRecord).
func (r Record) MarshalJSON() ([]byte, error) {
	if r.Kind == KindAdmin && r.Admin != nil {
		return marshalAdmin(r.Admin)
	}
	if r.Kind == kindUsage && r.Usage != nil {
		return json.Marshal(usageJSON{Kind: r.Kind, Time: r.Time, Domain: r.Domain, PolicyID: r.PolicyID, Usage: r.Usage})
	}
	return json.Marshal(denialJSON(r))
}

// fields are a usage record's stream fields after those of every record
// (Record.fields).
func (u *usageRecord) fields() [][2]string {
	f := [][2]string{
		{"key", u.Key},
		{"since", u.Since},
		{"hits", strconv.FormatInt(u.Hits, 10)},
		{"decisions", strconv.FormatInt(u.Decisions, 10)},
		{"denials", strconv.FormatInt(u.Denials, 10)},
		{"shadow_denials", strconv.FormatInt(u.ShadowDenials, 10)},
		{"distinct_subjects", strconv.FormatUint(u.DistinctSubjects, 10)},
	}
	if u.Reserved != nil {
		f = append(f, [2]string{"reserved", strconv.FormatInt(*u.Reserved, 10)}, [2]string{"used", strconv.FormatInt(*u.Used, 10)})
	}
	return f
}
