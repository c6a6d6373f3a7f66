package descriptors

import (
	"slices"
	"strings"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// This file is the contract pkg/rls consumes. Keep these names and shapes
// stable; the implementation lives in the other files of the package.

// Entry is one (key, value) pair of an Envoy rate-limit descriptor.
type Entry struct {
	Key   string
	Value string
}

// Unit is a rate_limit unit.
type Unit uint8

const (
	UnitSecond Unit = iota + 1
	UnitMinute
	UnitHour
	UnitDay
	UnitWeek  // extension: 7 days, epoch-aligned
	UnitMonth // extension: 30 days, epoch-aligned
	UnitYear  // extension: 365 days, epoch-aligned
)

// HeaderMode is the rate_limit `headers` extension.
type HeaderMode uint8

const (
	// HeadersDefault means "not set in the rule file": the serve flag decides.
	HeadersDefault HeaderMode = iota
	HeadersFull
	HeadersRetryAfter
	HeadersNone
)

// Rule is one compiled descriptor rule that carries a rate_limit. A Rule is
// shared by every request it matches: its fields are read-only.
type Rule struct {
	// Policy is nil for an unlimited rule.
	Policy *limiter.Policy
	// Name is rate_limit.name ("" when unset).
	Name string
	// Replaces lists the names of rules this one replaces when both match.
	Replaces []string
	// Unit, UnitMultiplier and RequestsPerUnit are as configured; they are
	// reported to Envoy in current_limit.
	Unit            Unit
	UnitMultiplier  uint32
	RequestsPerUnit uint32
	Unlimited       bool
	// ShadowMode is shadow_mode, kept for display: Policy is built with
	// limiter.PolicySpec.Shadow set to it, and evaluation takes the role
	// from the policy (limiter.Request.Role).
	ShadowMode bool
	// QuotaMode is quota_mode: the limit's requests are limiter.RoleQuota.
	QuotaMode bool
	// DetailedMetric is the reference's detailed_metric flag. It is kept for
	// display: every rule has its own metric series (by policy ID) anyway,
	// and per-value series are never produced.
	DetailedMetric bool
	Headers        HeaderMode
	// Path is the rule path used in logs and metric labels, e.g.
	// "domain/key1=value/key2" (configured strings only, never request values).
	Path string
	// Key is the descriptor key of the rule's own level (the last key of
	// Path; "" for a request-supplied limit override).
	Key string

	// Domain is the rule's domain.
	Domain string
	// ValueToMetric is the reference's value_to_metric flag. It is kept for
	// display only: request values never become metric labels here.
	ValueToMetric bool
	// ShareThreshold: every value matching the wildcard shares one counter.
	ShareThreshold bool
	// Burst is the configured token bucket capacity or GCRA burst (0 when
	// not set).
	Burst uint32
	// PolicyName is the named policy (top-level `policies:`) this rule uses,
	// "" when the rule writes its own rate_limit.
	PolicyName string
	// Metadata is the descriptor's free-form metadata map (nil when absent).
	// It is shared by all readers: do not modify it.
	Metadata map[string]any
	// Source is "file:line" of the descriptor that defines the rule, or
	// "name:field" for a rule of a Document (e.g. "xds:edge:descriptors[2]").
	Source string
	// Colocate is the `colocate` extension: the key of an entry of this
	// descriptor or an enclosing one ("" when unset). The limit's Redis
	// Cluster hash tag (Match.Tag) is then an HMAC of that entry's key and
	// value, so that every limit colocated on one entry value (a tenant's
	// limit and its users' limits, say) shares a slot and is evaluated in
	// one atomic program.
	Colocate string
	// colocateAt is the index, in the matched entries, of the Colocate entry.
	colocateAt int
	// Limits lists every limit of a descriptor with rate_limits, in list
	// order; nil for a descriptor with one rate_limit or a policy. Each
	// limit is a Rule of its own (its own policy, numbers, name and
	// replaces) sharing the descriptor's fields; Limits[0] is the rule the
	// descriptor matches (Match.Rule), and every limit holds the same slice.
	Limits []*Rule
	// LimitIndex is the rule's position in Limits (0 when Limits is nil).
	LimitIndex int
	// StatKey is the reference service's stat key of the rule: the domain
	// and, for each descriptor level down to the rule, its key, or
	// key_value when the level names a value, joined by '.'; e.g.
	// "domain.path_/foo.user". Configured strings only, never request
	// values ("" for a request-supplied limit override).
	StatKey string
	// segs are the levels of Path; idFromPath says the policy ID was
	// derived from them (not from Name), so holds their values.
	segs       []pathSeg
	idFromPath bool
}

// Match is the result of matching one descriptor.
type Match struct {
	Rule *Rule
	// Subject is the HMAC digest of the policy ID and the matched entries.
	Subject limiter.SubjectDigest
	// Tag is the Redis Cluster hash tag of the limit's state: zero (derive
	// it from Subject) unless the rule sets `colocate`, in which case it is
	// an HMAC of the named entry's key and value, shared by every limit that
	// co-locates on that entry.
	Tag limiter.Tag
	// Subjects, for a Rule with Limits, holds the subject digest of each
	// limit: Subjects[i] is that of Rule.Limits[i] (Subjects[0] is
	// Subject), and Tag is shared by all of them. Nil otherwise.
	Subjects []limiter.SubjectDigest
}

// Window returns the window (fixed and sliding), refill period (token
// bucket), period (GCRA) or lease TTL (concurrency).
func (r *Rule) Window() time.Duration {
	if r.Policy != nil && r.Policy.Leases() {
		return time.Duration(r.Policy.LeaseTTLMillis()) * time.Millisecond
	}
	return r.Unit.Duration() * time.Duration(max(r.UnitMultiplier, 1))
}

// units are the units' configuration names and lengths; a Unit is its
// index, and index 0 stands for any value that is not a Unit.
var units = [...]struct {
	name   string
	length time.Duration
}{
	{"unknown", 0},
	UnitSecond: {"second", time.Second},
	UnitMinute: {"minute", time.Minute},
	UnitHour:   {"hour", time.Hour},
	UnitDay:    {"day", 24 * time.Hour},
	UnitWeek:   {"week", 7 * 24 * time.Hour},
	UnitMonth:  {"month", 30 * 24 * time.Hour},
	UnitYear:   {"year", 365 * 24 * time.Hour},
}

func (u Unit) index() int {
	if int(u) < len(units) {
		return int(u)
	}
	return 0
}

// Duration returns the length of one unit (0 for a value that is not a
// Unit).
func (u Unit) Duration() time.Duration { return units[u.index()].length }

// String returns the lower-case configuration name of the unit.
func (u Unit) String() string { return units[u.index()].name }

// parseUnit parses a rate_limit unit, case-insensitively: second, minute,
// hour, day, and the extensions week, month, year.
func parseUnit(s string) (Unit, bool) {
	for u := UnitSecond; u <= UnitYear; u++ {
		if strings.EqualFold(s, u.String()) {
			return u, true
		}
	}
	return 0, false
}

// headerModes are the header modes' configuration names, by HeaderMode.
var headerModes = [...]string{HeadersDefault: "", HeadersFull: "full", HeadersRetryAfter: "retry_after", HeadersNone: "none"}

// String returns the configuration name of the header mode ("" for
// HeadersDefault).
func (h HeaderMode) String() string {
	if int(h) < len(headerModes) {
		return headerModes[h]
	}
	return ""
}

// ParseHeaderMode parses full, retry_after or none.
func ParseHeaderMode(s string) (HeaderMode, bool) {
	i := slices.Index(headerModes[:], s)
	return HeaderMode(max(i, 0)), i > 0
}
