package rls

import (
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

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

// markLeases tells Envoy, in the answer's dynamic_metadata, that the call
// took a lease: the field descriptors.ReleaseKey holds
// descriptors.ReleaseValue. Envoy keeps it under the namespace
// envoy.filters.http.ratelimit, where the stream-done rate limit reads it
// with a metadata action (docs/config.md, "Concurrency"): a call that took
// no lease (denied, failed open, or not a concurrency limit) has no such
// field, so its stream-done descriptor is not sent and releases nothing.
func markLeases(resp *rlsv3.RateLimitResponse, sc *scratch) {
	took := false
	for i := range sc.descs {
		ds := &sc.descs[i]
		if ds.kind == statusStore && !ds.release && ds.match.Rule.Policy.Leases() {
			if o := &sc.outs[ds.batch]; o.Kind == limiter.Evaluated && o.Decision.Consumed {
				took = true
				break
			}
		}
	}
	if !took {
		return
	}
	if resp.DynamicMetadata == nil {
		resp.DynamicMetadata = &structpb.Struct{}
	}
	if resp.DynamicMetadata.Fields == nil {
		resp.DynamicMetadata.Fields = map[string]*structpb.Value{}
	}
	resp.DynamicMetadata.Fields[descriptors.ReleaseKey] = structpb.NewStringValue(descriptors.ReleaseValue)
}
