// Package istio_test checks the Istio example: one file of EnvoyFilters per
// way of installing the gateway, each selecting the label that installer
// puts on the gateway pods and otherwise identical; the resources parse with
// the fields Istio defines, their patch values are valid Envoy configuration
// (go-control-plane types and validators), they call the Service the Helm
// chart creates, the descriptors they produce meet the intended rules in
// rules/, and docs/istio.md applies every file and installs the chart the
// way the filter expects.
package istio_test

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/envoy-rls/envoy-rls/internal/binarytest"
	"github.com/envoy-rls/envoy-rls/internal/deploytest"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
)

// envoyFilter is the part of networking.istio.io/v1alpha3 EnvoyFilter the
// examples use, decoded strictly so that a misspelt field fails here.
type envoyFilter struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name      string `yaml:"name"`
		Namespace string `yaml:"namespace"`
	} `yaml:"metadata"`
	Spec struct {
		WorkloadSelector struct {
			Labels map[string]string `yaml:"labels"`
		} `yaml:"workloadSelector"`
		ConfigPatches []struct {
			ApplyTo string `yaml:"applyTo"`
			Match   struct {
				Context  string `yaml:"context"`
				Listener *struct {
					FilterChain struct {
						Filter struct {
							Name      string `yaml:"name"`
							SubFilter struct {
								Name string `yaml:"name"`
							} `yaml:"subFilter"`
						} `yaml:"filter"`
					} `yaml:"filterChain"`
				} `yaml:"listener"`
				RouteConfiguration *struct {
					Vhost struct {
						Name  string `yaml:"name"`
						Route struct {
							Action string `yaml:"action"`
						} `yaml:"route"`
					} `yaml:"vhost"`
				} `yaml:"routeConfiguration"`
			} `yaml:"match"`
			Patch struct {
				Operation string `yaml:"operation"`
				Value     any    `yaml:"value"`
			} `yaml:"patch"`
		} `yaml:"configPatches"`
	} `yaml:"spec"`
}

// variants are the example's files, one per way of installing the gateway:
// each selects the gateway pods by the label that installer puts on them
// and lives in the gateway's namespace.
var variants = []struct {
	file, namespace string
	selector        map[string]string
}{
	// istioctl install (default profile): Deployment istio-ingressgateway.
	{"envoyfilter-istioctl-gateway.yaml", "istio-system", map[string]string{"istio": "ingressgateway"}},
	// The istio/gateway Helm chart, release istio-ingress: the chart labels
	// pods istio: <release name without the istio- prefix>.
	{"envoyfilter-helm-gateway.yaml", "istio-ingress", map[string]string{"istio": "ingress"}},
	// A Gateway API Gateway named "gateway": Istio labels its pods with the
	// Gateway's name.
	{"envoyfilter-gateway-api.yaml", "istio-ingress", map[string]string{"gateway.networking.k8s.io/gateway-name": "gateway"}},
}

func loadFilters(t *testing.T, file string) []envoyFilter {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	out, err := deploytest.YAMLDocuments[envoyFilter](b)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return out
}

func toJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var outboundCluster = regexp.MustCompile(`^outbound\|(\d+)\|\|(([a-z0-9-]+)\.([a-z0-9-]+)\.svc\.cluster\.local)$`)

// TestVariantsDifferOnlyInSelector: the three files carry the same two
// EnvoyFilters (names and patches), so checking one variant's patches in
// depth checks them all, and an edit to one file that is not made to the
// others fails here.
func TestVariantsDifferOnlyInSelector(t *testing.T) {
	first := loadFilters(t, variants[0].file)
	for _, v := range variants[1:] {
		other := loadFilters(t, v.file)
		if len(other) != len(first) {
			t.Fatalf("%s has %d EnvoyFilters, %s has %d", v.file, len(other), variants[0].file, len(first))
		}
		for i := range first {
			if other[i].Metadata.Name != first[i].Metadata.Name || !reflect.DeepEqual(other[i].Spec.ConfigPatches, first[i].Spec.ConfigPatches) {
				t.Errorf("%s: EnvoyFilter %s differs from %s's %s beyond namespace and selector", v.file, other[i].Metadata.Name, variants[0].file, first[i].Metadata.Name)
			}
		}
	}
}

func TestGatewayExample(t *testing.T) {
	var rl *ratelimitv3.RateLimit
	for _, v := range variants {
		t.Run(v.file, func(t *testing.T) { rl = checkVariant(t, v.file, v.namespace, v.selector) })
	}
	if rl != nil {
		checkGuide(t, rl)
	}
}

// checkVariant checks one file and returns its ratelimit filter
// configuration.
func checkVariant(t *testing.T, file, namespace string, selector map[string]string) *ratelimitv3.RateLimit {
	filters := loadFilters(t, file)
	if len(filters) != 2 {
		t.Fatalf("want 2 EnvoyFilters (filter, actions), got %d", len(filters))
	}
	var rl *ratelimitv3.RateLimit
	var rateLimits []*routev3.RateLimit
	for _, f := range filters {
		if f.APIVersion != "networking.istio.io/v1alpha3" || f.Kind != "EnvoyFilter" {
			t.Errorf("%s: %s/%s, want networking.istio.io/v1alpha3 EnvoyFilter", f.Metadata.Name, f.APIVersion, f.Kind)
		}
		if !maps.Equal(f.Spec.WorkloadSelector.Labels, selector) || f.Metadata.Namespace != namespace {
			t.Errorf("%s: selects %v in namespace %s, want %v in %s", f.Metadata.Name, f.Spec.WorkloadSelector.Labels, f.Metadata.Namespace, selector, namespace)
		}
		for _, p := range f.Spec.ConfigPatches {
			if p.Match.Context != "GATEWAY" {
				t.Errorf("%s: context %q, want GATEWAY", f.Metadata.Name, p.Match.Context)
			}
			switch p.ApplyTo {
			case "HTTP_FILTER":
				l := p.Match.Listener
				if l == nil || l.FilterChain.Filter.Name != "envoy.filters.network.http_connection_manager" ||
					l.FilterChain.Filter.SubFilter.Name != "envoy.filters.http.router" || p.Patch.Operation != "INSERT_BEFORE" {
					t.Errorf("%s: the filter must be inserted before the router of the HTTP connection manager", f.Metadata.Name)
				}
				hf := &hcmv3.HttpFilter{}
				if err := protojson.Unmarshal(toJSON(t, p.Patch.Value), hf); err != nil {
					t.Fatalf("%s: patch value is not an HttpFilter: %v", f.Metadata.Name, err)
				}
				deploytest.ValidateProto(t, f.Metadata.Name, hf)
				rl = &ratelimitv3.RateLimit{}
				if hf.GetName() != "envoy.filters.http.ratelimit" || hf.GetTypedConfig().UnmarshalTo(rl) != nil {
					t.Fatalf("%s: patch is %q, not the ratelimit filter", f.Metadata.Name, hf.GetName())
				}
			case "VIRTUAL_HOST":
				if p.Patch.Operation != "MERGE" || p.Match.RouteConfiguration == nil || p.Match.RouteConfiguration.Vhost.Route.Action != "ANY" {
					t.Errorf("%s: want a MERGE on every route's virtual host", f.Metadata.Name)
				}
				// A partial VirtualHost: only rate_limits, which are validated
				// one by one (name and domains come from Istio).
				vh := &routev3.VirtualHost{}
				if err := protojson.Unmarshal(toJSON(t, p.Patch.Value), vh); err != nil {
					t.Fatalf("%s: patch value does not fit a VirtualHost: %v", f.Metadata.Name, err)
				}
				for i, r := range vh.GetRateLimits() {
					deploytest.ValidateProto(t, f.Metadata.Name+" rate_limits["+strconv.Itoa(i)+"]", r)
				}
				rateLimits = vh.GetRateLimits()
			default:
				t.Errorf("%s: unexpected applyTo %s", f.Metadata.Name, p.ApplyTo)
			}
		}
	}
	if rl == nil || len(rateLimits) == 0 {
		t.Fatal("the example needs the HTTP_FILTER and the VIRTUAL_HOST patches")
	}

	// The filter: fails closed on purpose, draft-03 headers, v3 transport,
	// calling the Service the chart makes through Istio's outbound cluster.
	if !rl.GetFailureModeDeny() || rl.GetEnableXRatelimitHeaders() != ratelimitv3.RateLimit_DRAFT_VERSION_03 {
		t.Errorf("failure_mode_deny %v, enable_x_ratelimit_headers %v", rl.GetFailureModeDeny(), rl.GetEnableXRatelimitHeaders())
	}
	svc := rl.GetRateLimitService()
	if svc.GetTransportApiVersion().String() != "V3" {
		t.Errorf("transport_api_version %v, want V3", svc.GetTransportApiVersion())
	}
	eg := svc.GetGrpcService().GetEnvoyGrpc()
	m := outboundCluster.FindStringSubmatch(eg.GetClusterName())
	if m == nil {
		t.Fatalf("cluster_name %q is not outbound|<port>||<svc>.<ns>.svc.cluster.local", eg.GetClusterName())
	}
	grpcPort := deploytest.ChartValue[int](t, "grpc", "port")
	if port, _ := strconv.Atoi(m[1]); port != grpcPort {
		t.Errorf("cluster port %s, but the chart serves gRPC on %d", m[1], grpcPort)
	}
	if m[3] != "rls-envoy-rls" || eg.GetAuthority() != m[2] {
		t.Errorf("cluster %q / authority %q: want the chart's Service for release rls (rls-envoy-rls) and a matching authority", eg.GetClusterName(), eg.GetAuthority())
	}

	// The rules: load, and each descriptor meets the rule meant for it.
	snap, err := descriptors.Load("rules", descriptors.Options{Secret: make([]byte, 32)})
	if err != nil {
		t.Fatalf("rules: %v", err)
	}
	if !snap.HasDomain(rl.GetDomain()) {
		t.Fatalf("the filter sends domain %q, which rules/ does not define", rl.GetDomain())
	}
	cases := []struct {
		headers map[string]string
		want    []string // rule path per descriptor; "" = no rule (not limited)
	}{
		{map[string]string{":path": "/login?next=/cart", ":authority": "shop.example.com"},
			[]string{"istio-ingress/remote_address", "istio-ingress/path=login/remote_address", "istio-ingress/authority=shop.example.com"}},
		{map[string]string{":path": "/products", ":authority": "api.example.com"},
			[]string{"istio-ingress/remote_address", ""}},
	}
	for _, tc := range cases {
		ds := deploytest.Descriptors(t, rateLimits, tc.headers, "203.0.113.9")
		var got []string
		for _, entries := range ds {
			mt, ok := snap.Match(rl.GetDomain(), entries)
			if !ok {
				got = append(got, "")
				continue
			}
			got = append(got, mt.Rule.Path)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%v: descriptors %v meet %q, want %q", tc.headers, ds, got, tc.want)
		}
	}
	return rl
}

// checkGuide checks docs/istio.md's commands against the example: it applies
// every variant file (and only files that exist), and its helm install makes
// the Service the filter calls, with the Redis store, Retry-After as the only
// header envoy-rls adds when Envoy writes the X-RateLimit-* headers, a Redis
// bound below the filter's timeout, and this example's rule file.
func checkGuide(t *testing.T, rl *ratelimitv3.RateLimit) {
	t.Helper()
	root := binarytest.ModuleRoot(t)
	const guide = "docs/istio.md"
	var applied []string
	var installs []deploytest.HelmCommand
	for _, c := range deploytest.MarkdownCommands(t, filepath.Join(root, guide)) {
		w := c.Words
		switch {
		case len(w) == 4 && w[0] == "kubectl" && w[1] == "apply" && w[2] == "-f":
			if _, err := os.Stat(filepath.Join(root, w[3])); err != nil {
				t.Errorf("%s:%d: kubectl apply -f %s: %v", guide, c.Line, w[3], err)
			}
			applied = append(applied, w[3])
		case deploytest.IsHelmInstall(c):
			h, err := deploytest.ParseHelm(c)
			if err != nil {
				t.Fatal(err)
			}
			if h.Verb == "install" {
				installs = append(installs, h)
			}
		}
	}
	for _, v := range variants {
		if !slices.Contains(applied, filepath.ToSlash(filepath.Join("config", "examples", "istio", v.file))) {
			t.Errorf("%s does not apply %s", guide, v.file)
		}
	}
	if len(installs) != 1 {
		t.Fatalf("%s: %d helm install commands, want 1", guide, len(installs))
	}
	h := installs[0]
	eg := rl.GetRateLimitService().GetGrpcService().GetEnvoyGrpc()
	m := outboundCluster.FindStringSubmatch(eg.GetClusterName())
	if m == nil {
		t.Fatalf("cluster_name %q", eg.GetClusterName())
	}
	if h.Chart != "deploy/helm/envoy-rls" || h.Release+"-envoy-rls" != m[3] || h.Namespace != m[4] {
		t.Errorf("%s: helm install %s %s -n %s makes Service %s-envoy-rls.%s, but the filter calls %s.%s",
			guide, h.Release, h.Chart, h.Namespace, h.Release, h.Namespace, m[3], m[4])
	}
	if h.Set["store"] != "redis" {
		t.Errorf("%s: store %q: the replicas must share limits (redis)", guide, h.Set["store"])
	}
	wantHeaders := "full"
	if rl.GetEnableXRatelimitHeaders() == ratelimitv3.RateLimit_DRAFT_VERSION_03 {
		wantHeaders = "retry_after"
	}
	if h.Set["defaultHeaders"] != wantHeaders {
		t.Errorf("%s: defaultHeaders %q, want %q for enable_x_ratelimit_headers %v", guide, h.Set["defaultHeaders"], wantHeaders, rl.GetEnableXRatelimitHeaders())
	}
	if d, err := time.ParseDuration(h.Set["redis.timeout"]); err != nil || d >= rl.GetTimeout().AsDuration() {
		t.Errorf("%s: redis.timeout %q: want a duration below the filter's timeout %v", guide, h.Set["redis.timeout"], rl.GetTimeout().AsDuration())
	}
	rulesFile, err := filepath.Abs(filepath.Join("rules", "ingress.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for k, v := range h.SetFile {
		found = found || (strings.HasPrefix(k, "rules.files.") && filepath.Join(root, v) == rulesFile)
	}
	if !found {
		t.Errorf("%s: helm install does not load %s (--set-file rules.files.NAME=...)", guide, rulesFile)
	}
}
