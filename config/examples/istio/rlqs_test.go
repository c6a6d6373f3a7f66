package istio_test

import (
	"encoding/json"
	"maps"
	"os"
	"strconv"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	rlqfv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rate_limit_quota/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"gopkg.in/yaml.v3"

	// The typed configs inside the Any fields of the two files.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"

	"github.com/envoy-rls/envoy-rls/internal/deploytest"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
)

// TestRLQSGateway checks envoyfilter-rlqs-gateway.yaml: one EnvoyFilter
// that inserts the rate_limit_quota filter before the router of the Helm
// gateway's HTTP connection managers; its value is a valid HttpFilter
// (go-control-plane's types and validators, through every Any) whose
// configuration is config/examples/envoy/rlqs.yaml's but for the cluster
// (that example's test checks its buckets against the rules), calling the
// Service the chart makes on its gRPC port, with a domain of
// config/examples/14-rlqs.yaml.
func TestRLQSGateway(t *testing.T) {
	const file = "envoyfilter-rlqs-gateway.yaml"
	filters := loadFilters(t, file)
	if len(filters) != 1 || len(filters[0].Spec.ConfigPatches) != 1 {
		t.Fatalf("%s: want one EnvoyFilter with one patch", file)
	}
	f := filters[0]
	if f.APIVersion != "networking.istio.io/v1alpha3" || f.Kind != "EnvoyFilter" {
		t.Errorf("%s/%s, want networking.istio.io/v1alpha3 EnvoyFilter", f.APIVersion, f.Kind)
	}
	// The Helm gateway's, as in envoyfilter-helm-gateway.yaml.
	if want := variants[1]; !maps.Equal(f.Spec.WorkloadSelector.Labels, want.selector) || f.Metadata.Namespace != want.namespace {
		t.Errorf("selects %v in %s, want %v in %s (the Helm gateway's, as %s)", f.Spec.WorkloadSelector.Labels, f.Metadata.Namespace, want.selector, want.namespace, want.file)
	}
	p := f.Spec.ConfigPatches[0]
	if l := p.Match.Listener; p.ApplyTo != "HTTP_FILTER" || p.Match.Context != "GATEWAY" || l == nil ||
		l.FilterChain.Filter.Name != "envoy.filters.network.http_connection_manager" ||
		l.FilterChain.Filter.SubFilter.Name != "envoy.filters.http.router" || p.Patch.Operation != "INSERT_BEFORE" {
		t.Fatal("the filter must be inserted before the router of the gateway's HTTP connection managers")
	}
	hf := &hcmv3.HttpFilter{}
	if err := protojson.Unmarshal(toJSON(t, p.Patch.Value), hf); err != nil {
		t.Fatalf("the patch value is not an HttpFilter: %v", err)
	}
	deploytest.ValidateProto(t, file, hf)
	got := &rlqfv3.RateLimitQuotaFilterConfig{}
	if hf.GetName() != "envoy.filters.http.rate_limit_quota" || hf.GetTypedConfig().UnmarshalTo(got) != nil {
		t.Fatalf("the patch is %q, not the rate_limit_quota filter", hf.GetName())
	}

	// The cluster: Istio's outbound cluster of the chart's Service, on the
	// chart's gRPC port, where RLQS is served beside RateLimitService.
	eg := got.GetRlqsServer().GetEnvoyGrpc()
	m := outboundCluster.FindStringSubmatch(eg.GetClusterName())
	if m == nil {
		t.Fatalf("cluster_name %q is not outbound|<port>||<svc>.<ns>.svc.cluster.local", eg.GetClusterName())
	}
	if port, _ := strconv.Atoi(m[1]); port != deploytest.ChartValue[int](t, "grpc", "port") {
		t.Errorf("cluster port %s, but the chart serves gRPC on %d", m[1], deploytest.ChartValue[int](t, "grpc", "port"))
	}
	if m[3] != "rls-envoy-rls" || m[4] != "envoy-rls" || eg.GetAuthority() != m[2] {
		t.Errorf("cluster %q / authority %q: want the chart's Service of release rls in namespace envoy-rls and a matching authority", eg.GetClusterName(), eg.GetAuthority())
	}

	// The rest is the Envoy example's, whose test checks it.
	want := envoyExampleRLQS(t, "../envoy/rlqs.yaml")
	got, want = proto.CloneOf(got), proto.CloneOf(want)
	got.RlqsServer, want.RlqsServer = nil, nil
	if !proto.Equal(got, want) {
		t.Errorf("the filter's configuration, but for rlqs_server:\n%v\ndiffers from config/examples/envoy/rlqs.yaml's:\n%v", got, want)
	}
	snap, err := descriptors.Load("../14-rlqs.yaml", descriptors.Options{Secret: make([]byte, 32)})
	if err != nil {
		t.Fatal(err)
	}
	if !snap.HasDomain(got.GetDomain()) {
		t.Errorf("the filter sends domain %q, which 14-rlqs.yaml does not define", got.GetDomain())
	}
}

// envoyExampleRLQS is the rate_limit_quota filter's configuration in the
// Envoy bootstrap at path.
func envoyExampleRLQS(t *testing.T, path string) *rlqfv3.RateLimitQuotaFilterConfig {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := yaml.Unmarshal(raw, &v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	js, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	bs := &bootstrapv3.Bootstrap{}
	if err := protojson.Unmarshal(js, bs); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	for _, l := range bs.GetStaticResources().GetListeners() {
		for _, fc := range l.GetFilterChains() {
			for _, nf := range fc.GetFilters() {
				hcm := &hcmv3.HttpConnectionManager{}
				if nf.GetTypedConfig().UnmarshalTo(hcm) != nil {
					continue
				}
				for _, hf := range hcm.GetHttpFilters() {
					cfg := &rlqfv3.RateLimitQuotaFilterConfig{}
					if hf.GetName() == "envoy.filters.http.rate_limit_quota" && hf.GetTypedConfig().UnmarshalTo(cfg) == nil {
						return cfg
					}
				}
			}
		}
	}
	t.Fatalf("%s: no rate_limit_quota filter", path)
	return nil
}
