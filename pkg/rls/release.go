package rls

import "github.com/envoy-rls/envoy-rls/pkg/descriptors"

// matchRelease matches one descriptor. A descriptor that ends with the
// release marker (descriptors.Release) and whose other entries match a
// concurrency limit is a release of that limit (release true); any other
// descriptor, the marker included, is matched as it is.
func matchRelease(rules Rules, domain string, entries []descriptors.Entry) (m descriptors.Match, ok, release bool) {
	if rest, marked := descriptors.Release(entries); marked {
		if m, ok = rules.Match(domain, rest); ok && leases(m.Rule) {
			return m, true, true
		}
	}
	m, ok = rules.Match(domain, entries)
	return m, ok, false
}

// leases reports whether a matched rule holds a concurrency limit (itself
// or one of its rate_limits).
func leases(r *descriptors.Rule) bool {
	if r == nil {
		return false
	}
	if r.Policy != nil && r.Policy.Leases() {
		return true
	}
	for _, l := range r.Limits {
		if l.Policy != nil && l.Policy.Leases() {
			return true
		}
	}
	return false
}
