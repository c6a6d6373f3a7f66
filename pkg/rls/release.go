package rls

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"strconv"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// The release marker: a descriptor whose last entry has the key
// releaseKey and whose other entries match a concurrency rule gives back
// leases of that rule instead of taking one (splitRelease), when the entry's
// value is a marker the service wrote  or releaseValue. Envoy
// sends it from a rate limit with apply_on_stream_done, whose last action
// is a metadata action reading the field "lease" of the take's answer.
const (
	releaseKey   = "lease"
	releaseValue = "release"
)

// splitRelease reports whether entries end with an entry of the key
// releaseKey (after at least one other), and returns the others and that
// entry's value. The caller checks the value, matches the rest and treats
// the descriptor as a release only when both hold; otherwise the whole
// descriptor is matched as any other.
func splitRelease(entries []descriptors.Entry) (rest []descriptors.Entry, value string, ok bool) {
	n := len(entries)
	if n < 2 || entries[n-1].Key != releaseKey {
		return entries, "", false
	}
	return entries[:n-1], entries[n-1].Value, true
}

// The release marker is the value of the field releaseKey that
// a take's answer carries in its dynamic metadata, and that Envoy sends
// back as the last entry of the stream-done release. It names every lease
// the take took: per lease, markerEntryLen bytes of
//
//	holder   1 byte: markerStore (the store: Redis or the memory store),
//	         markerLocal (this replica's local fallback) or markerCharge (a
//	         reserve its failure mode let through open: no reservation
//	         is held, and the settle is a plain charge of the usage)
//	expiry   markerExpiryLen base-36 digits: the leases' expiry in Unix ms,
//	         their identity in the lease set (limiter.Request.LeaseAt)
//	tag      markerTagLen base64url digits: the first 6 bytes of an HMAC
//	         keyed with the limit's subject digest over the holder, the
//	         policy's ID and revision, the expiry and, for a local lease,
//	         this process's instance key
//
// A release gives back, of each concurrency limit it matches, the leases of
// the entry whose tag is that limit's: the tag binds the entry to the take
// (its limit, subject and expiry) and, for a local lease, to the replica
// that holds it. A forged or altered entry frees nothing; a replayed one
// frees only leases of the same expiry (taken in the same millisecond),
// never more than the value releaseValue frees, which stays a
// release of the store's soonest-expiring leases.
const (
	markerStore  = 's'
	markerLocal  = 'l'
	markerCharge = 'c'
	// chargeExpiry is the expiry field of a markerCharge entry, which
	// names no reservation.
	chargeExpiry    = 1
	markerExpiryLen = 9 // base 36: Unix ms up to year 5138
	markerTagLen    = 8 // 6 bytes, base64url without padding
	markerEntryLen  = 1 + markerExpiryLen + markerTagLen
	// maxLeasesPerCall bounds the leases one call may take: its marker
	// must fit in an entry value of the release (MaxValueBytes). A call
	// whose takes exceed it is refused for the takes beyond it.
	maxLeasesPerCall = MaxValueBytes / markerEntryLen
	// maxMarkerChecks bounds the tags one call's releases compute: the
	// entries of a marker times the limits it is checked against.
	maxMarkerChecks = 4 * maxLeasesPerCall
)

// markerKeys keys the tags of a Server's markers.
type markerKeys struct {
	// instance is this process's own key, random at start: a local lease's
	// tag verifies only on the replica that took it.
	instance [32]byte
}

// tag is the tag of one marker entry: holder, expiry, the limit's policy
// and subject.
func (k *markerKeys) tag(holder byte, expiry int64, p *limiter.Policy, subject *limiter.SubjectDigest) [markerTagLen]byte {
	h := hmac.New(sha256.New, subject[:])
	var b [1 + 4 + 8]byte
	b[0] = holder
	binary.BigEndian.PutUint32(b[1:5], p.Revision())
	binary.BigEndian.PutUint64(b[5:], uint64(expiry))
	h.Write(b[:])
	h.Write([]byte(p.ID()))
	if holder == markerLocal {
		h.Write(k.instance[:])
	}
	var sum [sha256.Size]byte
	var tag [markerTagLen]byte
	base64.RawURLEncoding.Encode(tag[:], h.Sum(sum[:0])[:6])
	return tag
}

// appendEntry appends the marker entry of leases expiring at expiry held
// by holder.
func (k *markerKeys) appendEntry(dst []byte, holder byte, expiry int64, p *limiter.Policy, subject *limiter.SubjectDigest) []byte {
	dst = append(dst, holder)
	var digits [16]byte
	e := strconv.AppendInt(digits[:0], expiry, 36)
	for range markerExpiryLen - len(e) {
		dst = append(dst, '0')
	}
	dst = append(dst, e...)
	tag := k.tag(holder, expiry, p, subject)
	return append(dst, tag[:]...)
}

// isMarker reports whether v is a release marker: releaseValue,
// or whole entries of a known holder and a base-36 expiry.
func isMarker(v string) bool {
	if v == releaseValue {
		return true
	}
	if v == "" || len(v)%markerEntryLen != 0 {
		return false
	}
	for i := 0; i < len(v); i += markerEntryLen {
		if v[i] != markerStore && v[i] != markerLocal && v[i] != markerCharge {
			return false
		}
		if _, err := strconv.ParseInt(v[i+1:i+1+markerExpiryLen], 36, 64); err != nil {
			return false
		}
	}
	return true
}

// leaseOf finds, in release marker v (isMarker), the leases of the limit of
// policy p and subject: their expiry and whether the local fallback holds
// them. ok is false when v names none of them (nothing to give back);
// v releaseValue names the store's soonest-expiring leases
// (expiry 0). *checks counts the tags computed for the call, and a call
// past maxMarkerChecks finds nothing more.
func (k *markerKeys) leaseOf(v string, p *limiter.Policy, subject *limiter.SubjectDigest, checks *int) (expiry int64, local, ok bool) {
	if v == releaseValue {
		return 0, false, true
	}
	for i := 0; i+markerEntryLen <= len(v); i += markerEntryLen {
		if *checks >= maxMarkerChecks {
			return 0, false, false
		}
		*checks++
		e := v[i : i+markerEntryLen]
		at, err := strconv.ParseInt(e[1:1+markerExpiryLen], 36, 64)
		if err != nil || at <= 0 || at > limiter.MaxSafeInteger {
			continue
		}
		tag := k.tag(e[0], at, p, subject)
		if !hmac.Equal(tag[:], []byte(e[1+markerExpiryLen:])) {
			continue
		}
		if e[0] == markerCharge {
			// No reservation to settle: a plain charge of the usage.
			return 0, false, p.Reserve().On()
		}
		return at, e[0] == markerLocal, true
	}
	return 0, false, false
}

// matchRelease matches one descriptor. A descriptor whose last entry is
// the release marker's key with a release marker as its value (isMarker),
// and whose other entries match a concurrency limit, is a release of that
// limit (release true, marker the value); any other descriptor, the
// marker's key included, is matched as it is.
func matchRelease(rules Rules, domain string, entries []descriptors.Entry) (m descriptors.Match, ok, release bool, marker string) {
	if rest, v, marked := splitRelease(entries); marked && isMarker(v) {
		if m, ok = rules.Match(domain, rest); ok && holdsLeases(m.Rule) {
			return m, true, true, v
		}
	}
	m, ok = rules.Match(domain, entries)
	return m, ok, false, ""
}

// holdsLeases reports whether a matched rule holds a concurrency limit or
// a reserving one (itself or one of its rate_limits).
func holdsLeases(r *descriptors.Rule) bool {
	if r == nil {
		return false
	}
	if settles(r.Policy) {
		return true
	}
	for _, l := range r.Limits {
		if settles(l.Policy) {
			return true
		}
	}
	return false
}

// settles reports whether p's takes are named in the release marker and
// given back or settled by a release: a concurrency limit's leases, a
// reserving limit's reservations (limiter.Reserve).
func settles(p *limiter.Policy) bool {
	return p != nil && (p.Leases() || p.Reserve().On())
}

// takesLease reports whether ds is a take of a concurrency limit or a
// reserve of a reserving one, which holds something when its call
// commits.
func (ds *descStatus) takesLease(r *limiter.Request) bool {
	return ds.kind == statusStore && !ds.release && settles(ds.match.Rule.Policy) && r.EffectiveRole().Consumes()
}

// heldAt is the marker entry of a take of ds: who holds it and its
// identity (a reservation's HoldAt, or the expiry of a take's leases, its
// ResetAt); ok is false when it holds nothing. A reserve that its failure
// mode let through open holds nothing but still gets an entry
// (markerCharge), so that its settle charges the usage.
func (ds *descStatus) heldAt(o *limiter.Outcome) (holder byte, at int64, ok bool) {
	d := &o.Decision
	if o.Kind != limiter.Evaluated {
		return 0, 0, false
	}
	if ds.match.Rule.Policy.Reserve().On() {
		if d.Allowed && d.Source == limiter.SourceFallback && d.Fallback == limiter.FailOpen {
			return markerCharge, chargeExpiry, true
		}
		if !d.Consumed || d.HoldAt.IsZero() {
			return 0, 0, false
		}
		at = d.HoldAt.UnixMilli()
	} else if d.Consumed {
		at = d.ResetAt.UnixMilli()
	} else {
		return 0, 0, false
	}
	holder = markerStore
	if d.Source == limiter.SourceFallback && d.Fallback == limiter.FailLocal {
		holder = markerLocal
	}
	return holder, at, true
}

// markLeases tells Envoy, in the answer's dynamic_metadata, which leases
// the call took: the field releaseKey holds their release
// marker. Envoy keeps it under the namespace envoy.filters.http.ratelimit,
// where the stream-done rate limit reads it with a metadata action
// (docs/config.md, "Concurrency"): a call that took no lease (denied,
// failed open, or not a concurrency limit) has no such field, so its
// stream-done descriptor is not sent and releases nothing.
func (s *Server) markLeases(resp *rlsv3.RateLimitResponse, sc *scratch) {
	var marker []byte
	for i := range sc.descs {
		ds := &sc.descs[i]
		if ds.kind != statusStore || ds.release || !settles(ds.match.Rule.Policy) {
			continue
		}
		holder, at, held := ds.heldAt(&sc.outs[ds.batch])
		if !held || !ds.role.Consumes() || holder == markerCharge && resp.OverallCode != rlsv3.RateLimitResponse_OK {
			continue
		}
		if marker == nil {
			marker = make([]byte, 0, markerEntryLen)
		}
		marker = s.markers.appendEntry(marker, holder, at, ds.match.Rule.Policy, &ds.match.Subject)
	}
	if marker == nil {
		return
	}
	if resp.DynamicMetadata == nil {
		resp.DynamicMetadata = &structpb.Struct{}
	}
	if resp.DynamicMetadata.Fields == nil {
		resp.DynamicMetadata.Fields = map[string]*structpb.Value{}
	}
	resp.DynamicMetadata.Fields[releaseKey] = structpb.NewStringValue(string(marker))
}
