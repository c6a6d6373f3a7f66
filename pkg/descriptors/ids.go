package descriptors

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"strconv"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// Policy IDs are stable, bounded and limited to [a-z0-9._:/-], derived from
// configured strings only:
//
//	by rule path:  <domain>/<key>[:<value>]/<key>[:<value>]...
//	by name:       <domain>:<rate_limit.name>   (when the name is unique in its domain)
//	rate_limits:   the first limit of the list as by rule path, limit i >= 1
//	               as <rule path>::<i> (a named limit as by name)
//	override:      <domain>:override:<unit>/<key>/<key>...
//	               (group, the name all of a domain's are reported under:
//	               <domain>:override)
//	calendar:      <one of the above>:calendar:<unit>:<time_zone>
//
// Each configured string is copied with A-Z lowered and every other byte
// outside [a-z0-9._-] (including the separators ':' and '/') replaced by '_'.
// When that changed anything, or the result is longer than 128 bytes, the ID
// becomes a readable prefix plus "--" and 12 hex digits of a SHA-256 over the
// original strings, so that two different rules never share an ID. The limit
// numbers (requests_per_unit, unit_multiplier, burst) and the penalty box are
// not part of the ID: changing them keeps the counters (and a block in force:
// the penalty fields live beside the counters and are only read while the
// rule has a penalty); revision and algorithm roll the state through the
// storage key instead. A calendar window's unit and time zone are part of
// its ID: its window id is its period's start, which another unit or zone
// can share (a month and its first day), so a change must start new
// counters; turning calendar on or off changes the ID too.

const (
	idKindPath     = 'p'
	idKindName     = 'n'
	idKindOverride = 'o'
	idKindCalendar = 'c'
	idHashHex      = 12
	idSuffixLen    = 2 + idHashHex
)

type idBuilder struct {
	out   []byte
	raw   []byte // length-prefixed original strings, hashed on fallback
	lossy bool
}

func newIDBuilder(kind byte) *idBuilder {
	return &idBuilder{raw: []byte{kind}}
}

// sep appends a structural separator (not part of any configured string).
func (b *idBuilder) sep(s string) {
	b.out = append(b.out, s...)
	b.raw = append(b.raw, s...)
}

// str appends a configured string, sanitized.
func (b *idBuilder) str(s string) {
	b.raw = binary.BigEndian.AppendUint32(b.raw, uint32(len(s)))
	b.raw = append(b.raw, s...)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '.', c == '_', c == '-':
		case c >= 'A' && c <= 'Z':
			c += 'a' - 'A'
			b.lossy = true
		default:
			c = '_'
			b.lossy = true
		}
		b.out = append(b.out, c)
	}
}

func (b *idBuilder) id() string {
	if !b.lossy && len(b.out) <= limiter.MaxPolicyIDLength {
		return string(b.out)
	}
	sum := sha256.Sum256(b.raw)
	prefix := b.out
	if len(prefix) > limiter.MaxPolicyIDLength-idSuffixLen {
		prefix = prefix[:limiter.MaxPolicyIDLength-idSuffixLen]
	}
	out := make([]byte, 0, len(prefix)+idSuffixLen)
	out = append(out, prefix...)
	out = append(out, "--"...)
	out = hex.AppendEncode(out, sum[:idHashHex/2])
	return string(out)
}

// pathID derives the ID of a rule from its domain and descriptor path.
func pathID(domain string, path []pathSeg) string {
	return pathBuilder(domain, path).id()
}

func pathBuilder(domain string, path []pathSeg) *idBuilder {
	b := newIDBuilder(idKindPath)
	b.str(domain)
	for _, s := range path {
		b.sep("/")
		b.str(s.key)
		if s.value != "" {
			b.sep(":")
			b.str(s.value)
		}
	}
	return b
}

// limitPathID derives the ID of limit index of a descriptor's rate_limits
// list from its domain and descriptor path: index 0 has the rule's path ID
// (the ID a single rate_limit on that descriptor has), index i >= 1 the path
// ID followed by "::" and i. No path, name or override ID holds "::" (':'
// in a configured string is replaced, and the separators are single), so
// these never collide with another kind.
func limitPathID(domain string, path []pathSeg, index int) string {
	if index == 0 {
		return pathID(domain, path)
	}
	b := pathBuilder(domain, path)
	b.sep("::")
	b.str(strconv.Itoa(index))
	return b.id()
}

// nameID derives the ID of a rule from its domain and rate_limit.name.
func nameID(domain, name string) string {
	b := newIDBuilder(idKindName)
	b.str(domain)
	b.sep(":")
	b.str(name)
	return b.id()
}

// calendarID derives the ID of a calendar window's rule from the ID its
// rule would have without a calendar, its unit and its time zone name.
func calendarID(base, unit, zone string) string {
	b := newIDBuilder(idKindCalendar)
	b.sep(base) // already an ID: kept as it is
	b.sep(":calendar:")
	b.str(unit)
	b.sep(":")
	b.str(zone)
	return b.id()
}

// overrideID derives the ID of a request-supplied limit override from the
// domain, the unit and the descriptor's keys (never its values).
func overrideID(domain string, unit Unit, multiplier uint32, entries []Entry) string {
	b := newIDBuilder(idKindOverride)
	b.str(domain)
	b.sep(":override:")
	b.str(unit.String())
	if multiplier > 1 {
		// Another window length is another counter.
		b.sep("x")
		b.str(strconv.FormatUint(uint64(multiplier), 10))
	}
	for _, e := range entries {
		b.sep("/")
		b.str(e.Key)
	}
	return b.id()
}

// overrideGroup is the group (limiter.PolicySpec.Group) of every override
// of a domain, "<domain>:override": the prefix of their IDs, the one name
// they are reported under, made of the configured domain alone.
func overrideGroup(domain string) string {
	b := newIDBuilder(idKindOverride)
	b.str(domain)
	b.sep(":override")
	return b.id()
}

type pathSeg struct {
	key, value string
}
