package xds

import (
	"errors"
	"fmt"
	"strings"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
)

// errNil is returned for a nil resource.
var errNil = errors.New("xds: nil RateLimitConfig")

// documents turns resources into the rule documents descriptors.Compile
// takes, one per resource, named "xds:" and the resource's name (its domain
// when the name is empty): the domain, and the descriptors with their keys,
// values, rate limits (unit, requests_per_unit, unlimited, name, replaces),
// shadow_mode and detailed_metric. Two resources of one name are refused.
// Descriptors nested deeper than descriptors.MaxDepth are not converted
// (Compile refuses the level below it).
func documents(cs []*rlsconf.RateLimitConfig) ([]descriptors.Document, error) {
	out := make([]descriptors.Document, 0, len(cs))
	seen := make(map[string]bool, len(cs))
	for _, c := range cs {
		if c == nil {
			return nil, errNil
		}
		name := c.GetName()
		if name == "" {
			name = c.GetDomain()
		}
		if seen[name] {
			return nil, fmt.Errorf("xds: two resources are named %q", name)
		}
		seen[name] = true
		out = append(out, descriptors.Document{Name: "xds:" + name, Domain: c.GetDomain(), Descriptors: descList(c.GetDescriptors(), 1)})
	}
	return out, nil
}

func descList(ds []*rlsconf.RateLimitDescriptor, depth int) []descriptors.DocDescriptor {
	if len(ds) == 0 {
		return nil
	}
	out := make([]descriptors.DocDescriptor, 0, len(ds))
	for _, d := range ds {
		if d == nil {
			continue
		}
		doc := descriptors.DocDescriptor{Key: d.GetKey(), Value: d.GetValue(), RateLimit: limit(d.GetRateLimit()),
			ShadowMode: d.GetShadowMode(), DetailedMetric: d.GetDetailedMetric()}
		if depth <= descriptors.MaxDepth {
			doc.Descriptors = descList(d.GetDescriptors(), depth+1)
		}
		out = append(out, doc)
	}
	return out
}

func limit(rl *rlsconf.RateLimitPolicy) *descriptors.DocLimit {
	if rl == nil {
		return nil
	}
	l := &descriptors.DocLimit{RequestsPerUnit: rl.GetRequestsPerUnit(), Unlimited: rl.GetUnlimited(), Name: rl.GetName()}
	if rl.GetUnit() != rlsconf.RateLimitUnit_UNKNOWN {
		// SECOND, MINUTE, ...; a number the enum does not name is refused
		// by the compiler as an invalid unit.
		l.Unit = strings.ToLower(rl.GetUnit().String())
	}
	for _, r := range rl.GetReplaces() {
		if r != nil {
			l.Replaces = append(l.Replaces, r.GetName())
		}
	}
	return l
}

// compile compiles resources as one rule set through descriptors.Compile:
// the same validation and policy IDs as the same rules in files. A problem
// names the resource and the field, e.g.
// xds:edge:descriptors[1].rate_limit.unit: rate_limit: invalid rate limit unit "42" (…).
func compile(cs []*rlsconf.RateLimitConfig, opts descriptors.Options) (*descriptors.Snapshot, error) {
	docs, err := documents(cs)
	if err != nil {
		return nil, err
	}
	return descriptors.Compile(docs, opts)
}
