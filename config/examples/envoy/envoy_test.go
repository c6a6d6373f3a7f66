// Package envoy_test checks the Envoy configuration of the examples: it
// parses as the Envoy API types (go-control-plane) and passes their
// validation, and the descriptors its rate limits produce, sent to the
// service with the example rules, behave as the rules' comments say.
package envoy_test

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"gopkg.in/yaml.v3"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/leases"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/memory"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
)

// loadHCM reads an HttpConnectionManager written as YAML.
func loadHCM(t *testing.T, path string) *hcmv3.HttpConnectionManager {
	t.Helper()
	hcm := &hcmv3.HttpConnectionManager{}
	decodeYAML(t, path, readYAML(t, path), hcm)
	return hcm
}

// readYAML is the YAML file at path as yaml.Unmarshal decodes it.
func readYAML(t *testing.T, path string) any {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := yaml.Unmarshal(raw, &v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return v
}

// decodeYAML fills the Envoy API message m from v, a YAML value as
// yaml.Unmarshal gives it, through its JSON form, and runs m's
// validators; what names v's source in failures.
func decodeYAML(t *testing.T, what string, v any, m interface {
	proto.Message
	ValidateAll() error
}) {
	t.Helper()
	js, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := protojson.Unmarshal(js, m); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if err := m.ValidateAll(); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// descriptorOf is what Envoy sends for one rate limit of a route: the
// entries of its actions, or ok false when an action has no value (a
// missing header or metadata: Envoy then sends no descriptor for it).
func descriptorOf(t *testing.T, rl *routev3.RateLimit, headers map[string]string, dynamic map[string]*structpb.Struct) (*ratelimitcommonv3.RateLimitDescriptor, bool) {
	t.Helper()
	d := &ratelimitcommonv3.RateLimitDescriptor{}
	for _, a := range rl.Actions {
		var key, value string
		switch {
		case a.GetRequestHeaders() != nil:
			rh := a.GetRequestHeaders()
			key, value = rh.DescriptorKey, headers[rh.HeaderName]
		case a.GetMetadata() != nil:
			md := a.GetMetadata()
			if md.Source != routev3.RateLimit_Action_MetaData_DYNAMIC || md.SkipIfAbsent || md.DefaultValue != "" {
				t.Fatalf("metadata action %v: the release mark must come from dynamic metadata, and its absence must send nothing", md)
			}
			key = md.DescriptorKey
			s := dynamic[md.MetadataKey.Key]
			for _, seg := range md.MetadataKey.Path {
				value = s.GetFields()[seg.GetKey()].GetStringValue()
			}
		default:
			t.Fatalf("action %v: not simulated by this test", a)
		}
		if value == "" {
			return nil, false
		}
		d.Entries = append(d.Entries, &ratelimitcommonv3.RateLimitDescriptor_Entry{Key: key, Value: value})
	}
	return d, true
}

// TestConcurrencyExample: config/examples/envoy/concurrency.yaml with the
// rules of config/examples: 4 streams of a tenant's model at once; the
// fifth is refused, and Envoy's stream-done call for it releases nothing;
// a finished stream's release lets the next one in.
func TestConcurrencyExample(t *testing.T) {
	hcm := loadHCM(t, "concurrency.yaml")
	var domain string
	for _, f := range hcm.HttpFilters {
		if f.Name == "envoy.filters.http.ratelimit" {
			rl := &ratelimitv3.RateLimit{}
			if err := f.GetTypedConfig().UnmarshalTo(rl); err != nil {
				t.Fatal(err)
			}
			domain = rl.Domain
		}
	}
	route := hcm.GetRouteConfig().VirtualHosts[0].Routes[0].GetRoute()
	var takes, releases []*routev3.RateLimit
	for _, rl := range route.RateLimits {
		if rl.ApplyOnStreamDone {
			releases = append(releases, rl)
		} else {
			takes = append(takes, rl)
		}
	}
	if domain != "inflight" || len(takes) != 2 || len(releases) != 2 {
		t.Fatalf("domain %q, %d request-phase and %d stream-done rate limits", domain, len(takes), len(releases))
	}
	snap, err := descriptors.Load("..", descriptors.Options{Secret: make([]byte, 32)})
	if err != nil {
		t.Fatal(err)
	}
	store, err := memory.New(memory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	metrics, err := rls.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	srv, err := rls.New(rls.Config{Rules: func() rls.Rules { return snap }, Store: leases.New(store, store), Metrics: metrics, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	headers := map[string]string{"x-tenant-id": "acme", "x-model": "m1"}
	// stream is one request through Envoy: the request-phase call, and the
	// stream-done call made from the answer's dynamic metadata (when it
	// produces a descriptor). end sends the latter: the stream is done.
	stream := func() (code rlsv3.RateLimitResponse_Code, end func() int) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req := &rlsv3.RateLimitRequest{Domain: domain}
		for _, rl := range takes {
			d, ok := descriptorOf(t, rl, headers, nil)
			if !ok {
				t.Fatal("a request-phase rate limit sent nothing")
			}
			req.Descriptors = append(req.Descriptors, d)
		}
		resp, err := srv.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		dynamic := map[string]*structpb.Struct{"envoy.filters.http.ratelimit": resp.DynamicMetadata}
		return resp.OverallCode, func() int {
			done := &rlsv3.RateLimitRequest{Domain: domain}
			for _, rl := range releases {
				if d, ok := descriptorOf(t, rl, headers, dynamic); ok {
					done.Descriptors = append(done.Descriptors, d)
				}
			}
			if len(done.Descriptors) == 0 {
				return 0
			}
			resp, err := srv.ShouldRateLimit(context.Background(), done)
			if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
				t.Fatalf("stream-done call: %v %v", resp, err)
			}
			return len(done.Descriptors)
		}
	}
	var open []func() int
	for i := range 4 {
		code, end := stream()
		if code != rlsv3.RateLimitResponse_OK {
			t.Fatalf("stream %d: %s", i+1, code)
		}
		open = append(open, end)
	}
	code, end := stream()
	if code != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("a fifth stream of the model: %s", code)
	}
	if n := end(); n != 0 {
		t.Fatalf("the refused stream sent %d releases", n)
	}
	if code, _ := stream(); code != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("still four in flight: %s", code)
	}
	if n := open[0](); n != 2 {
		t.Fatalf("a finished stream sent %d releases, want 2 (tenant, model)", n)
	}
	if code, _ := stream(); code != rlsv3.RateLimitResponse_OK {
		t.Fatalf("after a release: %s", code)
	}
}

// TestConcurrencyDocs: the route configuration docs/config.md shows is the
// example's, rate limit for rate limit (the tenant's take and release).
func TestConcurrencyDocs(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	var block string
	for _, part := range strings.Split(string(doc), "```yaml\n")[1:] {
		// The concurrency section's block: the one whose stream-done action
		// reads the lease marker (other sections show stream-done charges).
		if body, _, _ := strings.Cut(part, "```"); strings.Contains(body, "apply_on_stream_done") && strings.Contains(body, "lease") {
			block = body
		}
	}
	if block == "" {
		t.Fatal("docs/config.md shows no route configuration with apply_on_stream_done and the lease marker")
	}
	var v struct {
		Route any `yaml:"route"`
	}
	if err := yaml.Unmarshal([]byte(block), &v); err != nil {
		t.Fatal(err)
	}
	shown := &routev3.RouteAction{}
	decodeYAML(t, "docs/config.md", v.Route, shown)
	example := loadHCM(t, "concurrency.yaml").GetRouteConfig().VirtualHosts[0].Routes[0].GetRoute()
	want := []*routev3.RateLimit{example.RateLimits[0], example.RateLimits[2]}
	if len(shown.RateLimits) != len(want) {
		t.Fatalf("docs/config.md shows %d rate limits, want %d", len(shown.RateLimits), len(want))
	}
	for i := range want {
		if !proto.Equal(shown.RateLimits[i], want[i]) {
			t.Errorf("docs/config.md rate limit %d:\n%v\nthe example's:\n%v", i, shown.RateLimits[i], want[i])
		}
	}
}
