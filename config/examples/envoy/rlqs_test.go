package envoy_test

import (
	"encoding/json"
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	rlqfv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rate_limit_quota/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/envoy-rls/envoy-rls/internal/deploytest"
	"github.com/envoy-rls/envoy-rls/internal/options"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/rlqs"
)

// rlqsEnvoy is what TestRLQSExample needs from rlqs.yaml.
type rlqsEnvoy struct {
	filters  []string // the HTTP filters' names, in order
	rlq      *rlqfv3.RateLimitQuotaFilterConfig
	clusters map[string]*clusterv3.Cluster
	routes   []string // the clusters the routes go to
}

// loadRLQSEnvoy reads the bootstrap at path (YAML → JSON → protojson,
// unknown fields refused), runs the validators on it and on every message
// inside its Any fields, and returns its one HTTP connection manager's
// filters and the clusters.
func loadRLQSEnvoy(t *testing.T, path string) rlqsEnvoy {
	t.Helper()
	js, err := json.Marshal(readYAML(t, path))
	if err != nil {
		t.Fatal(err)
	}
	bs := &bootstrapv3.Bootstrap{}
	if err := protojson.Unmarshal(js, bs); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	deploytest.ValidateProto(t, path, bs)
	d := rlqsEnvoy{clusters: map[string]*clusterv3.Cluster{}}
	for _, c := range bs.GetStaticResources().GetClusters() {
		d.clusters[c.GetName()] = c
	}
	ls := bs.GetStaticResources().GetListeners()
	if len(ls) != 1 || len(ls[0].GetFilterChains()) != 1 || len(ls[0].GetFilterChains()[0].GetFilters()) != 1 {
		t.Fatalf("%s: want one listener with one filter chain and one network filter", path)
	}
	hcm := &hcmv3.HttpConnectionManager{}
	if err := ls[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(hcm); err != nil {
		t.Fatalf("%s: the network filter is not the HTTP connection manager: %v", path, err)
	}
	for _, f := range hcm.GetHttpFilters() {
		d.filters = append(d.filters, f.GetName())
		if f.GetName() == "envoy.filters.http.rate_limit_quota" {
			d.rlq = &rlqfv3.RateLimitQuotaFilterConfig{}
			if err := f.GetTypedConfig().UnmarshalTo(d.rlq); err != nil {
				t.Fatalf("%s: the rate_limit_quota filter's config: %v", path, err)
			}
		}
	}
	for _, vh := range hcm.GetRouteConfig().GetVirtualHosts() {
		for _, r := range vh.GetRoutes() {
			d.routes = append(d.routes, r.GetRoute().GetCluster())
		}
	}
	return d
}

// bucketOf is the bucket Envoy's rate_limit_quota filter with config cfg
// puts a request with these headers in, from its bucket_matchers, and the
// settings of that bucket; ok is false when the request matches no
// bucket (Envoy then allows it and reports nothing). Only the shapes the
// example uses are modelled (a matcher list of single predicates on a
// request header with a regex, on_no_match, values that are strings or a
// request header); any other fails the test, so a new one gets modelled
// before it is trusted.
func bucketOf(t *testing.T, cfg *rlqfv3.RateLimitQuotaFilterConfig, headers map[string]string) (bucket map[string]string, settings *rlqfv3.RateLimitQuotaBucketSettings, ok bool) {
	t.Helper()
	m := cfg.GetBucketMatchers()
	if m.GetMatcherTree() != nil {
		t.Fatal("a matcher tree: not modelled by this test")
	}
	for _, fm := range m.GetMatcherList().GetMatchers() {
		sp := fm.GetPredicate().GetSinglePredicate()
		re := sp.GetValueMatch().GetSafeRegex().GetRegex()
		if sp == nil || re == "" || fm.GetOnMatch().GetMatcher() != nil || fm.GetOnMatch().GetKeepMatching() {
			t.Fatalf("matcher %v: only a single predicate with a regex and an action is modelled", fm)
		}
		v, present := headers[headerInput(t, sp.GetInput().GetTypedConfig())]
		// Envoy's regex matchers match the whole value.
		if present && regexp.MustCompile(`^(?:`+re+`)$`).MatchString(v) {
			return bucketFrom(t, fm.GetOnMatch().GetAction().GetTypedConfig(), headers)
		}
	}
	if a := m.GetOnNoMatch(); a != nil {
		if a.GetMatcher() != nil {
			t.Fatal("a nested on_no_match matcher: not modelled by this test")
		}
		return bucketFrom(t, a.GetAction().GetTypedConfig(), headers)
	}
	return nil, nil, false
}

// headerInput is the header an HttpRequestHeaderMatchInput reads.
func headerInput(t *testing.T, a *anypb.Any) string {
	t.Helper()
	in := &matcherv3.HttpRequestHeaderMatchInput{}
	if err := a.UnmarshalTo(in); err != nil {
		t.Fatalf("input %s: only a request header is modelled: %v", a.GetTypeUrl(), err)
	}
	return strings.ToLower(in.GetHeaderName())
}

// bucketFrom builds the bucket an action's settings make for a request.
func bucketFrom(t *testing.T, a *anypb.Any, headers map[string]string) (map[string]string, *rlqfv3.RateLimitQuotaBucketSettings, bool) {
	t.Helper()
	s := &rlqfv3.RateLimitQuotaBucketSettings{}
	if err := a.UnmarshalTo(s); err != nil {
		t.Fatalf("action %s: not RateLimitQuotaBucketSettings: %v", a.GetTypeUrl(), err)
	}
	b := map[string]string{}
	for k, vb := range s.GetBucketIdBuilder().GetBucketIdBuilder() {
		if cv := vb.GetCustomValue(); cv != nil {
			v, present := headers[headerInput(t, cv.GetTypedConfig())]
			if !present {
				// Envoy cannot build the bucket: it allows the request
				// and reports nothing.
				return nil, s, false
			}
			b[k] = v
			continue
		}
		b[k] = vb.GetStringValue()
	}
	return b, s, true
}

// TestRLQSExample: config/examples/envoy/rlqs.yaml is a valid Envoy
// bootstrap (go-control-plane's types and validators, through every Any);
// its rate_limit_quota filter calls envoy-rls on its gRPC port over HTTP/2
// with the domain of config/examples/14-rlqs.yaml; the buckets it makes
// from x-tenant-id meet the rules meant for them through the service's own
// matcher (MatchBucket), rules RLQS can assign; and every bucket's
// settings keep Envoy deciding when envoy-rls has not answered.
func TestRLQSExample(t *testing.T) {
	d := loadRLQSEnvoy(t, "rlqs.yaml")
	if n := len(d.filters); n != 2 || d.filters[0] != "envoy.filters.http.rate_limit_quota" || d.filters[1] != "envoy.filters.http.router" {
		t.Fatalf("http filters %v: want rate_limit_quota, then the router", d.filters)
	}
	for _, c := range d.routes {
		if d.clusters[c] == nil {
			t.Errorf("a route goes to cluster %q, which is not defined", c)
		}
	}

	// The RLQS server: a defined cluster, HTTP/2, on envoy-rls' gRPC port.
	name := d.rlq.GetRlqsServer().GetEnvoyGrpc().GetClusterName()
	c := d.clusters[name]
	if c == nil {
		t.Fatalf("rlqs_server cluster %q is not defined", name)
	}
	opts := &upstreamhttpv3.HttpProtocolOptions{}
	if a := c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]; a == nil ||
		a.UnmarshalTo(opts) != nil || opts.GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil {
		t.Errorf("cluster %s does not speak HTTP/2 (gRPC needs it)", name)
	}
	eps := c.GetLoadAssignment().GetEndpoints()
	if len(eps) != 1 || len(eps[0].GetLbEndpoints()) != 1 {
		t.Fatalf("cluster %s: want one endpoint", name)
	}
	_, grpcPort, _ := net.SplitHostPort(options.DefaultGRPCAddr)
	if p := eps[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress().GetPortValue(); strconv.Itoa(int(p)) != grpcPort {
		t.Errorf("cluster %s: port %d, want envoy-rls' gRPC port %s (RLQS and RateLimitService share it)", name, p, grpcPort)
	}

	snap, err := descriptors.Load("../14-rlqs.yaml", descriptors.Options{Secret: make([]byte, 32)})
	if err != nil {
		t.Fatal(err)
	}
	domain := d.rlq.GetDomain()
	if !snap.HasDomain(domain) {
		t.Fatalf("the filter sends domain %q, which 14-rlqs.yaml does not define", domain)
	}
	const tenantRule, anonymousRule = "rlqs/tenant", "rlqs/tenant=_anonymous"
	cases := []struct {
		name    string
		headers map[string]string
		bucket  string // the tenant entry's value
		rule    string
		perSec  uint32
	}{
		{"a tenant", map[string]string{"x-tenant-id": "acme"}, "acme", tenantRule, 100},
		{"another tenant", map[string]string{"x-tenant-id": "t-42.eu_1"}, "t-42.eu_1", tenantRule, 100},
		{"the longest tenant ID", map[string]string{"x-tenant-id": strings.Repeat("a", 64)}, strings.Repeat("a", 64), tenantRule, 100},
		{"no tenant ID", nil, "_anonymous", anonymousRule, 20},
		{"an empty tenant ID", map[string]string{"x-tenant-id": ""}, "_anonymous", anonymousRule, 20},
		{"a tenant ID too long", map[string]string{"x-tenant-id": strings.Repeat("a", 65)}, "_anonymous", anonymousRule, 20},
		{"a tenant ID with a space", map[string]string{"x-tenant-id": "acme corp"}, "_anonymous", anonymousRule, 20},
		{"a tenant ID posing as the shared bucket", map[string]string{"x-tenant-id": "_anonymous"}, "_anonymous", anonymousRule, 20},
	}
	// The settings of each rule's buckets, as first seen.
	settings := map[string]*rlqfv3.RateLimitQuotaBucketSettings{}
	for _, tc := range cases {
		b, s, ok := bucketOf(t, d.rlq, tc.headers)
		if !ok || len(b) != 1 || b["tenant"] != tc.bucket {
			t.Errorf("%s: bucket %v (made: %v), want {tenant: %s}", tc.name, b, ok, tc.bucket)
			continue
		}
		if settings[tc.rule] == nil {
			settings[tc.rule] = s
		}
		m, reason, ok := snap.MatchBucket(domain, b)
		if !ok {
			t.Errorf("%s: bucket %v meets no rule: %s", tc.name, b, reason)
			continue
		}
		if m.Rule.Path != tc.rule || m.Rule.Unit != descriptors.UnitSecond || m.Rule.RequestsPerUnit != tc.perSec {
			t.Errorf("%s: bucket %v meets %s (%d per %v), want %s (%d a second)", tc.name, b, m.Rule.Path, m.Rule.RequestsPerUnit, m.Rule.Unit, tc.rule, tc.perSec)
		}
		if r := rlqs.Refusal(m.Rule); r != "" {
			t.Errorf("%s: RLQS cannot assign %s: %s", tc.name, m.Rule.Path, r)
		}
	}
	if t.Failed() {
		return
	}

	// The settings: the tenants' and the shared bucket's alike but for the
	// bucket, and each keeps Envoy deciding when envoy-rls has not answered.
	base := proto.Clone(settings[tenantRule]).(*rlqfv3.RateLimitQuotaBucketSettings)
	base.BucketIdBuilder = nil
	other := proto.Clone(settings[anonymousRule]).(*rlqfv3.RateLimitQuotaBucketSettings)
	other.BucketIdBuilder = nil
	if !proto.Equal(other, base) {
		t.Errorf("the shared bucket's settings %v differ from a tenant's %v beyond the bucket", other, base)
	}
	allowAll := &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_ALLOW_ALL}}
	// Before the first assignment: allow. A token bucket here is not kept by
	// Envoy (its second request crashes it); a deny would refuse every
	// bucket's first request.
	if got := base.GetNoAssignmentBehavior().GetFallbackRateLimit(); !proto.Equal(got, allowAll) {
		t.Errorf("no_assignment_behavior %v, want fallback_rate_limit ALLOW_ALL", got)
	}
	// After an assignment expires: a blanket rule (the one fallback Envoy
	// applies) for a whole number of seconds (Envoy reads the seconds only).
	exp := base.GetExpiredAssignmentBehavior()
	if _, blanket := exp.GetFallbackRateLimit().GetStrategy().(*typev3.RateLimitStrategy_BlanketRule_); !blanket {
		t.Errorf("expired_assignment_behavior %v: want a blanket fallback_rate_limit", exp)
	}
	if to := exp.GetExpiredAssignmentBehaviorTimeout().AsDuration(); to < time.Second || to%time.Second != 0 {
		t.Errorf("expired_assignment_behavior_timeout %v: want whole seconds, at least 1s", to)
	}
	if ri := base.GetReportingInterval().AsDuration(); ri <= 100*time.Millisecond {
		t.Errorf("reporting_interval %v: Envoy wants more than 100ms", ri)
	}
	deny := base.GetDenyResponseSettings()
	if deny.GetHttpStatus().GetCode() != typev3.StatusCode_TooManyRequests || deny.GetGrpcStatus().GetCode() != int32(codes.ResourceExhausted) {
		t.Errorf("deny_response_settings %v: want 429 for HTTP and RESOURCE_EXHAUSTED for gRPC", deny)
	}
}
