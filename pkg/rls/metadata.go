package rls

import (
	"iter"
	"strconv"
	"strings"
	"unicode/utf8"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// Bounds on the request text the dynamic metadata repeats (Config.DynamicMetadata).
const (
	// metadataEntryBytes bounds one entry's "key=value" text: a longer one
	// is cut to this many bytes (at a UTF-8 boundary).
	metadataEntryBytes = 256
	// metadataEntriesBytes bounds the entries' text of one response: the
	// entries past it are left out, and each descriptor that lost some
	// says how many in "entriesDropped".
	metadataEntriesBytes = 4096
)

// Field names of the dynamic metadata. The first ones are those of
// envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA; code and limitName
// those its open proposal adds; the rest are this service's.
const (
	mdDomain         = "domain"
	mdDescriptors    = "descriptors"
	mdHitsAddend     = "hitsAddend"
	mdMetadata       = "metadata"
	mdEntries        = "entries"
	mdLimit          = "limit"
	mdCode           = "code"
	mdLimitName      = "limitName"
	mdPolicy         = "policy"
	mdResult         = "result"
	mdRemaining      = "remaining"
	mdReset          = "resetSeconds"
	mdRetryAfter     = "retryAfterSeconds"
	mdBlocked        = "blocked"
	mdFailureMode    = "failureMode"
	mdEntriesDropped = "entriesDropped"
	// Results of a descriptor without a decided limit, beside the
	// decision results (resultLabelOK, ResultOverLimit, ResultShadowOverLimit).
	resultUnmatched    = "unmatched"
	resultReplaced     = "replaced"
	resultNotEvaluated = "not_evaluated"
)

// descGroups yields, for each request descriptor in order, the bounds
// [lo, hi) of its limits' statuses in descs.
func descGroups(descs []descStatus) iter.Seq2[int, int] {
	return func(yield func(int, int) bool) {
		for lo := 0; lo < len(descs); {
			hi := lo + 1
			for hi < len(descs) && descs[hi].desc == descs[lo].desc {
				hi++
			}
			if !yield(lo, hi) {
				return
			}
			lo = hi
		}
	}
}

// buildDynamicMetadata is the response's dynamic_metadata (Config.DynamicMetadata):
// the domain, each descriptor's entries and hits_addend (and its limit
// override), the call's hits_addend and the merged `metadata` of the rules
// of the descriptors answered OK, as envoyproxy/ratelimit returns them;
// and, per descriptor, what decided it: its code, the limit that binds it
// (policy, name, result, remaining, reset and, when over, retry; blocked
// by a penalty box; answered by a failure mode). Envoy writes it to its
// access logs: the entries are the request's own values, bounded by
// MetadataEntryBytes and MetadataEntriesBytes. Strings are made valid
// UTF-8 (a protobuf string must be).
func (s *Server) buildDynamicMetadata(req *rlsv3.RateLimitRequest, statuses []rlsv3.RateLimitResponse_DescriptorStatus, sc *scratch) *structpb.Struct {
	budget := metadataEntriesBytes
	list := make([]*structpb.Value, 0, len(req.Descriptors))
	var merged *structpb.Struct
	// Every descriptor has at least one status, in descriptor order.
	for lo, hi := range descGroups(sc.descs) {
		i := sc.descs[lo].desc
		f := map[string]*structpb.Value{}
		describeRequest(f, req.Descriptors[i], &budget)
		code := statuses[i].Code
		f[mdCode] = structpb.NewStringValue(code.String())
		if b := bindingLimit(sc.descs[lo:hi]); b >= 0 {
			describeDecision(f, &sc.descs[lo+b])
			if code == rlsv3.RateLimitResponse_OK {
				merged = mergeRuleMetadata(merged, sc.descs[lo+b].match.Rule.Metadata)
			}
		} else {
			describeUndecided(f, &sc.descs[lo])
		}
		list = append(list, structpb.NewStructValue(&structpb.Struct{Fields: f}))
	}
	top := map[string]*structpb.Value{
		mdDomain:      structpb.NewStringValue(validUTF8(req.Domain)),
		mdDescriptors: structpb.NewListValue(&structpb.ListValue{Values: list}),
	}
	if req.HitsAddend != 0 {
		top[mdHitsAddend] = structpb.NewNumberValue(float64(req.HitsAddend))
	}
	if merged != nil {
		top[mdMetadata] = structpb.NewStructValue(merged)
	}
	return &structpb.Struct{Fields: top}
}

// describeRequest sets the request's fields of descriptor d: its entries
// ("key=value", within the budget of entry bytes), its hits_addend and its
// limit override.
func describeRequest(f map[string]*structpb.Value, d *rlv3.RateLimitDescriptor, budget *int) {
	entries := make([]*structpb.Value, 0, len(d.Entries))
	dropped := 0
	for _, e := range d.Entries {
		text := truncateUTF8(validUTF8(e.Key+"="+e.Value), metadataEntryBytes)
		if len(text) > *budget {
			dropped++
			*budget = 0
			continue
		}
		*budget -= len(text)
		entries = append(entries, structpb.NewStringValue(text))
	}
	f[mdEntries] = structpb.NewListValue(&structpb.ListValue{Values: entries})
	if dropped > 0 {
		f[mdEntriesDropped] = structpb.NewNumberValue(float64(dropped))
	}
	if h := d.HitsAddend; h != nil {
		f[mdHitsAddend] = structpb.NewNumberValue(float64(h.Value))
	}
	if l := d.Limit; l != nil {
		text := "requests_per_unit:" + strconv.FormatUint(uint64(l.RequestsPerUnit), 10) + " unit:" + l.Unit.String()
		if m := l.GetUnitMultiplier().GetValue(); m > 1 {
			text += " unit_multiplier:" + strconv.FormatUint(uint64(m), 10)
		}
		f[mdLimit] = structpb.NewStringValue(text)
	}
}

// describeDecision sets what decided a descriptor: its binding limit ds.
func describeDecision(f map[string]*structpb.Value, ds *descStatus) {
	rule := ds.match.Rule
	if rule.Name != "" {
		f[mdLimitName] = structpb.NewStringValue(rule.Name)
	}
	if ds.kind == statusUnlimited {
		f[mdPolicy] = structpb.NewStringValue(unlimitedPolicy)
		f[mdResult] = structpb.NewStringValue(resultLabelOK)
		return
	}
	f[mdPolicy] = structpb.NewStringValue(ds.policyLabel())
	f[mdResult] = structpb.NewStringValue(resultLabels[ds.result])
	f[mdRemaining] = structpb.NewNumberValue(float64(ds.remaining))
	f[mdReset] = structpb.NewNumberValue(float64(ceilSeconds(ds.reset)))
	if ds.over {
		f[mdRetryAfter] = structpb.NewNumberValue(float64(max(ceilSeconds(ds.retry), 1)))
	}
	if ds.blocked {
		f[mdBlocked] = structpb.NewBoolValue(true)
	}
	if ds.failedOver {
		f[mdFailureMode] = structpb.NewStringValue(ds.fallback.String())
	}
}

// describeUndecided sets the result of a descriptor none of whose limits
// has a current limit (ds is its first): unmatched, replaced by another
// rule, not evaluated (a refund, the request id), unlimited, or a
// fail-open answer to a store failure.
func describeUndecided(f map[string]*structpb.Value, ds *descStatus) {
	switch {
	case ds.kind == statusUnlimited:
		describeDecision(f, ds)
	case ds.failedOver:
		f[mdPolicy] = structpb.NewStringValue(ds.policyLabel())
		f[mdResult] = structpb.NewStringValue(resultLabelOK)
		f[mdFailureMode] = structpb.NewStringValue(ds.fallback.String())
	case ds.kind == statusReplaced:
		f[mdResult] = structpb.NewStringValue(resultReplaced)
	case ds.kind == statusNegative || ds.kind == statusRequestID || ds.kind == statusNoLease:
		f[mdResult] = structpb.NewStringValue(resultNotEvaluated)
	default:
		f[mdResult] = structpb.NewStringValue(resultUnmatched)
	}
}

// mergeRuleMetadata merges a rule's `metadata` into dst (nil: none yet),
// as the reference does: a key already present keeps its value, but two
// maps under one key merge. The rule's map is converted, never shared.
func mergeRuleMetadata(dst *structpb.Struct, m map[string]any) *structpb.Struct {
	if len(m) == 0 {
		return dst
	}
	src, err := structpb.NewStruct(m)
	if err != nil {
		// The compiler keeps only YAML values, all of which convert.
		return dst
	}
	if dst == nil {
		return src
	}
	mergeStruct(dst, src)
	return dst
}

func mergeStruct(dst, src *structpb.Struct) {
	for k, v := range src.Fields {
		have, ok := dst.Fields[k]
		if !ok {
			dst.Fields[k] = v
			continue
		}
		if a, b := have.GetStructValue(), v.GetStructValue(); a != nil && b != nil {
			mergeStruct(a, b)
		}
	}
}

// validUTF8 is s with each invalid byte sequence replaced by U+FFFD: Envoy
// passes header bytes through as descriptor values, and a protobuf string
// must be UTF-8.
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// truncateUTF8 cuts valid UTF-8 s to at most n bytes, at a rune boundary.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
