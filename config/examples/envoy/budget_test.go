package envoy_test

import (
	"strings"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
)

// TestTokenBudgetRoute checks the AI-gateway example: its Envoy route
// configuration (ai-gateway/envoy-route.yaml) is valid Envoy
// configuration, sends a request-phase check (hits_addend 0) and a charge
// at stream end (hits_addend from dynamic metadata) for one descriptor, and
// that descriptor meets the budget rule of 12-ai-token-budget.yaml, which
// charges always.
func TestTokenBudgetRoute(t *testing.T) {
	per := routeRateLimits(t, "../ai-gateway/envoy-route.yaml")
	rls := per.GetRateLimits()
	if len(rls) != 2 {
		t.Fatalf("%d rate limits, want a check and a charge", len(rls))
	}
	check, charge := rls[0], rls[1]
	if check.GetApplyOnStreamDone() || check.GetHitsAddend().GetNumber() == nil || check.GetHitsAddend().GetNumber().GetValue() != 0 {
		t.Errorf("the check: %v, want hits_addend 0 in the request phase", check)
	}
	if !charge.GetApplyOnStreamDone() || !strings.HasPrefix(charge.GetHitsAddend().GetFormat(), "%DYNAMIC_METADATA(") {
		t.Errorf("the charge: %v, want hits_addend from dynamic metadata at stream end", charge)
	}
	var keys []string
	for _, r := range rls {
		if len(r.GetActions()) != 1 || r.GetActions()[0].GetRequestHeaders() == nil {
			t.Fatalf("rate limit %v: want one request_headers action", r)
		}
		keys = append(keys, r.GetActions()[0].GetRequestHeaders().GetDescriptorKey())
	}
	if keys[0] != keys[1] {
		t.Fatalf("the check and the charge send %v: they must share one descriptor", keys)
	}

	// The descriptor Envoy builds meets the rule, which charges always.
	snap, err := descriptors.Load("../12-ai-token-budget.yaml", descriptors.Options{Secret: []byte(strings.Repeat("s", 32))})
	if err != nil {
		t.Fatal(err)
	}
	m, ok := snap.Match(per.GetDomain(), []descriptors.Entry{{Key: keys[0], Value: "acme"}})
	if !ok || m.Rule.Policy == nil {
		t.Fatalf("domain %s, %s=acme: no rule", per.GetDomain(), keys[0])
	}
	p := m.Rule.Policy
	if !p.ChargeAlways() || p.Limit() != 100_000 || p.WindowMillis() != time.Hour.Milliseconds() {
		t.Errorf("the budget: charge always %v, %d per %d ms", p.ChargeAlways(), p.Limit(), p.WindowMillis())
	}
}

// TestTokenReserveRoute checks the reservation example's Envoy route
// (ai-gateway/envoy-route-reserve.yaml): valid Envoy configuration, a
// request-phase rate limit whose hits_addend is the request's announced
// tokens, and a stream-done one that sends the same descriptor followed by
// the release marker read from the rate-limit filter's dynamic metadata
// (field lease) and the usage as hits_addend; the descriptor meets the
// reserving rule of 13-token-budget-reserve.yaml, and the stream-done one
// is a settle of it.
func TestTokenReserveRoute(t *testing.T) {
	per := routeRateLimits(t, "../ai-gateway/envoy-route-reserve.yaml")
	rls := per.GetRateLimits()
	if len(rls) != 2 {
		t.Fatalf("%d rate limits, want a reserve and a settle", len(rls))
	}
	reserve, settle := rls[0], rls[1]
	if reserve.GetApplyOnStreamDone() || !strings.HasPrefix(reserve.GetHitsAddend().GetFormat(), "%REQ(") {
		t.Errorf("the reserve: %v, want hits_addend from a request header in the request phase", reserve)
	}
	if !settle.GetApplyOnStreamDone() || !strings.HasPrefix(settle.GetHitsAddend().GetFormat(), "%DYNAMIC_METADATA(") {
		t.Errorf("the settle: %v, want hits_addend from dynamic metadata at stream end", settle)
	}
	ra, sa := reserve.GetActions(), settle.GetActions()
	if len(ra) != 1 || len(sa) != 2 || ra[0].GetRequestHeaders() == nil || sa[0].GetRequestHeaders().GetDescriptorKey() != ra[0].GetRequestHeaders().GetDescriptorKey() {
		t.Fatalf("reserve actions %v, settle actions %v: want the same header descriptor, then the marker", ra, sa)
	}
	md := sa[1].GetMetadata()
	if md.GetDescriptorKey() != "lease" || md.GetMetadataKey().GetKey() != "envoy.filters.http.ratelimit" ||
		len(md.GetMetadataKey().GetPath()) != 1 || md.GetMetadataKey().GetPath()[0].GetKey() != "lease" {
		t.Fatalf("the settle's last action %v: want the marker (field lease of the filter's dynamic metadata) as entry lease", sa[1])
	}

	snap, err := descriptors.Load("../13-token-budget-reserve.yaml", descriptors.Options{Secret: []byte(strings.Repeat("s", 32))})
	if err != nil {
		t.Fatal(err)
	}
	key := ra[0].GetRequestHeaders().GetDescriptorKey()
	m, ok := snap.Match(per.GetDomain(), []descriptors.Entry{{Key: key, Value: "acme"}})
	if !ok || m.Rule.Policy == nil || !m.Rule.Policy.Reserve().On() {
		t.Fatalf("domain %s, %s=acme: %v, want a reserving rule", per.GetDomain(), key, m.Rule)
	}
}

// routeRateLimits reads the route configuration at path and returns its
// first route's rate-limit filter config (RateLimitPerRoute, where Envoy
// reads hits_addend), checked with go-control-plane's validation.
func routeRateLimits(t *testing.T, path string) *ratelimitv3.RateLimitPerRoute {
	t.Helper()
	rc := &routev3.RouteConfiguration{}
	decodeYAML(t, path, readYAML(t, path), rc)
	route := rc.GetVirtualHosts()[0].GetRoutes()[0]
	per := &ratelimitv3.RateLimitPerRoute{}
	if err := route.GetTypedPerFilterConfig()["envoy.filters.http.ratelimit"].UnmarshalTo(per); err != nil {
		t.Fatalf("%s: the route's rate limit filter config: %v", path, err)
	}
	if err := per.ValidateAll(); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return per
}
