package rls

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
)

// Response header names. Envoy lower-cases header names; these are the
// spellings of the IETF draft (draft-ietf-httpapi-ratelimit-headers-03).
const (
	headerLimit       = "X-RateLimit-Limit"
	headerRemaining   = "X-RateLimit-Remaining"
	headerReset       = "X-RateLimit-Reset"
	headerRetryAfter  = "Retry-After"
	headerContentType = "Content-Type"
	bodyContentType   = "application/json"
)

// HeaderNames are the names of the limit, remaining and reset headers. An
// empty field takes its default (DefaultHeaderNames).
type HeaderNames struct {
	Limit, Remaining, Reset string
}

// DefaultHeaderNames are the IETF draft's spellings.
func DefaultHeaderNames() HeaderNames {
	return HeaderNames{Limit: headerLimit, Remaining: headerRemaining, Reset: headerReset}
}

// withDefaults fills the empty names and refuses a name that is not an
// HTTP header field name (RFC 9110 token), or names that repeat.
func (n HeaderNames) withDefaults() (HeaderNames, error) {
	for _, f := range []struct {
		name *string
		def  string
	}{{&n.Limit, headerLimit}, {&n.Remaining, headerRemaining}, {&n.Reset, headerReset}} {
		if *f.name == "" {
			*f.name = f.def
		}
		if !ValidHeaderName(*f.name) {
			return n, fmt.Errorf("rls: header name %q: must be an HTTP field name (letters, digits and !#$%%&'*+-.^_`|~)", *f.name)
		}
	}
	if strings.EqualFold(n.Limit, n.Remaining) || strings.EqualFold(n.Limit, n.Reset) || strings.EqualFold(n.Remaining, n.Reset) {
		return n, fmt.Errorf("rls: header names %q, %q and %q must differ", n.Limit, n.Remaining, n.Reset)
	}
	return n, nil
}

// ValidHeaderName reports whether s is an HTTP field name: a non-empty
// RFC 9110 token, at most 128 bytes.
func ValidHeaderName(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// addHeadersAndBody writes the rate-limit headers of the most restrictive
// status and, on OVER_LIMIT, Retry-After and the JSON body.
func (s *Server) addHeadersAndBody(resp *rlsv3.RateLimitResponse, sc *scratch, space *answerSpace) {
	mode := descriptors.HeadersFull
	chosen := -1
	var retry time.Duration
	for i := range sc.descs {
		ds := &sc.descs[i]
		if !ds.eligible() {
			continue
		}
		mode = stricterHeaders(mode, s.headerMode(ds.match.Rule))
		if chosen < 0 {
			chosen = i
			if ds.reported {
				retry = ds.retry
			}
			continue
		}
		c := &sc.descs[chosen]
		switch {
		case ds.reported && (!c.reported || ds.retry > c.retry):
			chosen = i
		case !ds.reported && !c.reported && (ds.remaining < c.remaining || ds.remaining == c.remaining && ds.reset > c.reset):
			chosen = i
		}
		if ds.reported {
			retry = max(retry, ds.retry)
		}
	}
	if chosen < 0 {
		return
	}
	over := resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT
	c := &sc.descs[chosen]
	retrySecs := max(ceilSeconds(retry), 1)

	// The headers' names and values, copied once into the response's
	// header messages when their number is known.
	var hv [5]struct{ key, value string }
	nh := 0
	buf := sc.buf[:0]
	if mode == descriptors.HeadersFull {
		buf = strconv.AppendUint(buf, uint64(c.match.Rule.RequestsPerUnit), 10)
		for i := range sc.descs {
			ds := &sc.descs[i]
			if !ds.eligible() || duplicatePolicy(sc.descs[:i], ds) {
				continue
			}
			buf = append(buf, ", "...)
			buf = strconv.AppendUint(buf, uint64(ds.match.Rule.RequestsPerUnit), 10)
			if !ds.match.Rule.Policy.Leases() {
				// A concurrency limit has no window (its lease TTL is
				// none): the quota policy is the limit alone.
				buf = append(buf, ";w="...)
				buf = strconv.AppendInt(buf, ceilSeconds(ds.match.Rule.Window()), 10)
			}
			if capacity := ds.match.Rule.Policy.Limit(); capacity > int64(ds.match.Rule.RequestsPerUnit) {
				// A token bucket with a burst above its rate.
				buf = append(buf, ";burst="...)
				buf = strconv.AppendInt(buf, capacity, 10)
			}
		}
		// The three values in one string.
		limitEnd := len(buf)
		buf = strconv.AppendUint(buf, uint64(c.remaining), 10)
		remainingEnd := len(buf)
		buf = strconv.AppendInt(buf, ceilSeconds(c.reset), 10)
		values := string(buf)
		hv[nh].key, hv[nh].value = s.headerNames.Limit, values[:limitEnd]
		nh++
		hv[nh].key, hv[nh].value = s.headerNames.Remaining, values[limitEnd:remainingEnd]
		nh++
		hv[nh].key, hv[nh].value = s.headerNames.Reset, values[remainingEnd:]
		nh++
	}
	if over && mode != descriptors.HeadersNone {
		hv[nh].key, hv[nh].value = headerRetryAfter, strconv.FormatInt(retrySecs, 10)
		nh++
	}
	if over {
		// The body names the policy and the wait, never the subject. In
		// `none` mode it says only that the request was limited.
		buf = append(buf[:0], `{"error":"rate_limited"`...)
		if mode != descriptors.HeadersNone {
			buf = append(buf, `,"policy":"`...)
			buf = append(buf, c.match.Rule.Policy.ID()...) // [a-z0-9._:/-]: no escaping needed
			buf = append(buf, `","retry_after_seconds":`...)
			buf = strconv.AppendInt(buf, retrySecs, 10)
		}
		buf = append(buf, '}')
		resp.RawBody = append([]byte(nil), buf...)
		// Envoy lets the service's content-type replace the local reply's.
		hv[nh].key, hv[nh].value = headerContentType, bodyContentType
		nh++
	}
	sc.buf = buf
	if nh == 0 {
		return
	}
	backing, ptrs := space.headers(nh)
	for i := 0; i < nh; i++ {
		backing[i].Key, backing[i].Value = hv[i].key, hv[i].value
		ptrs[i] = &backing[i]
	}
	resp.ResponseHeadersToAdd = ptrs
}

// duplicatePolicy reports whether an earlier eligible descriptor already listed the
// same (limit, window or concurrency) quota policy.
func duplicatePolicy(earlier []descStatus, ds *descStatus) bool {
	for i := range earlier {
		e, r := earlier[i].match.Rule, ds.match.Rule
		if earlier[i].eligible() && e.RequestsPerUnit == r.RequestsPerUnit && e.Window() == r.Window() && e.Policy.Leases() == r.Policy.Leases() {
			return true
		}
	}
	return false
}

func (s *Server) headerMode(r *descriptors.Rule) descriptors.HeaderMode {
	if r.Headers == descriptors.HeadersDefault {
		return s.defaultHeaders
	}
	return r.Headers
}

// stricterHeaders returns the mode that reveals less: none < retry_after < full.
func stricterHeaders(a, b descriptors.HeaderMode) descriptors.HeaderMode {
	rank := func(m descriptors.HeaderMode) int {
		switch m {
		case descriptors.HeadersNone:
			return 0
		case descriptors.HeadersRetryAfter:
			return 1
		}
		return 2
	}
	if rank(b) < rank(a) {
		return b
	}
	return a
}

// nearLimit reports whether 80% or more of limit is used.
func nearLimit(limit, remaining int64) bool {
	if limit <= 0 {
		return false
	}
	used := limit - remaining
	return used*5 >= limit*4
}

func clampUint32(v int64) uint32 {
	switch {
	case v <= 0:
		return 0
	case v >= math.MaxUint32:
		return math.MaxUint32
	}
	return uint32(v)
}

// ceilSeconds rounds d up to whole seconds.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// untilWindowEnd is the time to the end of the epoch-aligned window that
// contains now (the fixed-window reset point).
func untilWindowEnd(now time.Time, window time.Duration) time.Duration {
	if window <= 0 {
		return time.Second
	}
	ms := window.Milliseconds()
	if ms <= 0 {
		return window
	}
	rem := now.UnixMilli() % ms
	return time.Duration(ms-rem) * time.Millisecond
}
