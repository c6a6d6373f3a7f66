package compose_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"gopkg.in/yaml.v3"

	// Registers the router filter so its typed_config Any resolves.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"

	"github.com/envoy-rls/envoy-rls/e2e/deploy/internal/servetest"
	"github.com/envoy-rls/envoy-rls/internal/binarytest"
	"github.com/envoy-rls/envoy-rls/internal/deploytest"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
)

// TestMain builds the binary the demo's decisions are replayed on once, and
// removes it when they end.
func TestMain(m *testing.M) { binarytest.Main(m) }

// composeFile is the part of the compose specification the demo uses.
// Decoding is strict, so a misspelt key fails the test instead of being
// silently ignored by this test (compose itself would reject it too).
type composeFile struct {
	Name     string             `yaml:"name"`
	Services map[string]service `yaml:"services"`
}

type service struct {
	Image       string            `yaml:"image"`
	Build       *build            `yaml:"build"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Volumes     []string          `yaml:"volumes"`
	Ports       []string          `yaml:"ports"`
	DependsOn   map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
	Healthcheck *struct {
		Test     []string `yaml:"test"`
		Interval string   `yaml:"interval"`
		Timeout  string   `yaml:"timeout"`
		Retries  int      `yaml:"retries"`
	} `yaml:"healthcheck"`
	ReadOnly    bool     `yaml:"read_only"`
	User        string   `yaml:"user"`
	CapDrop     []string `yaml:"cap_drop"`
	SecurityOpt []string `yaml:"security_opt"`
}

type build struct {
	Context    string `yaml:"context"`
	Dockerfile string `yaml:"dockerfile"`
}

func dir(t *testing.T) string {
	return filepath.Join(binarytest.ModuleRoot(t), "deploy", "compose")
}

func loadCompose(t *testing.T) composeFile {
	t.Helper()
	var c composeFile
	decodeStrict(t, "docker-compose.yaml", &c)
	return c
}

// decodeStrict decodes the YAML file name of this folder into out, refusing
// fields out does not know.
func decodeStrict(t *testing.T, name string, out any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir(t), name))
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(out); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// flagValue returns the value of --name=value in args.
func flagValue(args []string, name string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

// pinned: repository:tag with a version-looking tag (no latest, no bare
// major), or a digest.
var pinned = regexp.MustCompile(`^[a-z0-9./-]+(:v?\d+\.\d+(\.\d+)?(-[a-z0-9.]+)?|@sha256:[0-9a-f]{64})$`)

func TestComposeFile(t *testing.T) {
	c := loadCompose(t)
	var names []string
	for n := range c.Services {
		names = append(names, n)
	}
	slices.Sort(names)
	if want := []string{"echo", "envoy", "envoy-rls", "prometheus", "redis"}; !slices.Equal(names, want) {
		t.Fatalf("services %v, want %v", names, want)
	}
	for name, s := range c.Services {
		if s.Build == nil && !pinned.MatchString(s.Image) {
			t.Errorf("service %s: image %q is not pinned to a version", name, s.Image)
		}
		if s.Healthcheck == nil || len(s.Healthcheck.Test) < 2 || s.Healthcheck.Test[0] != "CMD" {
			t.Errorf("service %s: no exec-form healthcheck", name)
		}
		for _, v := range s.Volumes {
			src, _, _ := strings.Cut(v, ":")
			if _, err := os.Stat(filepath.Join(dir(t), src)); err != nil {
				t.Errorf("service %s: volume source %s: %v", name, src, err)
			}
		}
	}
	if img := c.Services["envoy"].Image; !regexp.MustCompile(`^envoyproxy/envoy:v1\.3\d\.\d+$`).MatchString(img) {
		t.Errorf("envoy image %q: want the official envoyproxy/envoy at a pinned v1.3x.y", img)
	}
	if img := c.Services["redis"].Image; !strings.HasPrefix(img, "redis:7.") {
		t.Errorf("redis image %q: want redis 7", img)
	}

	deps := map[string]map[string]string{
		"envoy":     {"envoy-rls": "service_healthy", "echo": "service_healthy"},
		"envoy-rls": {"redis": "service_healthy"},
	}
	for svc, want := range deps {
		got := map[string]string{}
		for d, cond := range c.Services[svc].DependsOn {
			got[d] = cond.Condition
		}
		for d, cond := range want {
			if got[d] != cond {
				t.Errorf("%s depends_on %s: condition %q, want %q", svc, d, got[d], cond)
			}
		}
	}
	if !slices.ContainsFunc(c.Services["envoy"].Ports, func(p string) bool { return strings.HasSuffix(p, "10000:10000") }) {
		t.Errorf("envoy ports %v: the demo listener 10000 is not published", c.Services["envoy"].Ports)
	}

	// envoy-rls: built from the repository's Dockerfile, hardened, and
	// started with flags the binary has.
	rls := c.Services["envoy-rls"]
	if rls.Build == nil {
		t.Fatal("envoy-rls has no build section")
	}
	dockerfile := filepath.Join(dir(t), rls.Build.Context, rls.Build.Dockerfile)
	df, err := os.ReadFile(dockerfile)
	if err != nil {
		t.Fatalf("envoy-rls build: %v", err)
	}
	if !rls.ReadOnly || rls.User == "" || strings.HasPrefix(rls.User, "0") || !slices.Equal(rls.CapDrop, []string{"ALL"}) || !slices.Contains(rls.SecurityOpt, "no-new-privileges:true") {
		t.Errorf("envoy-rls is not hardened: read_only=%v user=%q cap_drop=%v security_opt=%v", rls.ReadOnly, rls.User, rls.CapDrop, rls.SecurityOpt)
	}
	if len(rls.Command) == 0 || rls.Command[0] != "serve" {
		t.Fatalf("envoy-rls command %q: want serve first", rls.Command)
	}
	deploytest.CheckArgs(t, "envoy-rls command", rls.Command[1:], deploytest.ServeFlags(t))
	if flagValue(rls.Command, "store") == "redis" {
		host, _, err := net.SplitHostPort(flagValue(rls.Command, "redis-addr"))
		if err != nil || c.Services[host].Image == "" {
			t.Errorf("--redis-addr %q does not name a compose service", flagValue(rls.Command, "redis-addr"))
		}
		if rls.Environment["ENVOY_RLS_HMAC_SECRET"] == "" && flagValue(rls.Command, "hmac-secret-file") == "" {
			t.Error("store redis without an HMAC secret: envoy-rls would refuse to start")
		}
	}
	cfg := flagValue(rls.Command, "config")
	if !slices.ContainsFunc(rls.Volumes, func(v string) bool { return strings.HasPrefix(v, "./rules:"+cfg+":") }) {
		t.Errorf("--config=%s is not the mount target of ./rules (volumes %v)", cfg, rls.Volumes)
	}
	// Both envoy-rls ports reach the host, on loopback only: gRPC for
	// grpcurl, admin for curl and the probes.
	for _, flag := range []string{"grpc-addr", "admin-addr"} {
		_, port, err := net.SplitHostPort(flagValue(rls.Command, flag))
		if err != nil {
			t.Errorf("envoy-rls --%s=%q: %v", flag, flagValue(rls.Command, flag), err)
			continue
		}
		if want := "127.0.0.1:" + port + ":" + port; !slices.Contains(rls.Ports, want) {
			t.Errorf("envoy-rls ports %v: want %q (--%s)", rls.Ports, want, flag)
		}
	}
	probe := rls.Healthcheck.Test[1]
	if !bytes.Contains(df, []byte(probe)) {
		t.Errorf("envoy-rls healthcheck runs %s, which the Dockerfile does not install", probe)
	}
	admin := flagValue(rls.Command, "admin-addr")
	if !strings.Contains(strings.Join(rls.Healthcheck.Test, " "), "127.0.0.1"+admin+"/readyz") {
		t.Errorf("envoy-rls healthcheck %v does not probe /readyz on --admin-addr=%s", rls.Healthcheck.Test, admin)
	}

	// The Dockerfile: static, trimmed, non-root.
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "USER 65532", "FROM gcr.io/distroless/static"} {
		if !bytes.Contains(df, []byte(want)) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}

	// Prometheus: v3, reading the prometheus.yml TestPrometheusConfig checks,
	// its UI on loopback.
	prom := c.Services["prometheus"]
	if !regexp.MustCompile(`^prom/prometheus:v3\.\d+\.\d+$`).MatchString(prom.Image) {
		t.Errorf("prometheus image %q: want prom/prometheus at a pinned v3.x.y", prom.Image)
	}
	if cfg := flagValue(prom.Command, "config.file"); cfg == "" || !slices.Contains(prom.Volumes, "./prometheus.yml:"+cfg+":ro") {
		t.Errorf("prometheus command %v does not load the mounted ./prometheus.yml", prom.Command)
	}
	if !slices.Contains(prom.Ports, "127.0.0.1:9090:9090") {
		t.Errorf("prometheus ports %v: want 127.0.0.1:9090:9090", prom.Ports)
	}

	// Envoy reads the envoy.yaml the test validates.
	envoy := c.Services["envoy"]
	if i := slices.Index(envoy.Command, "-c"); i < 0 || i+1 >= len(envoy.Command) ||
		!slices.Contains(envoy.Volumes, "./envoy.yaml:"+envoy.Command[i+1]+":ro") {
		t.Errorf("envoy command %v does not load the mounted ./envoy.yaml", envoy.Command)
	}
}

// loadBootstrap reads envoy.yaml into go-control-plane's Bootstrap (YAML ->
// JSON -> protojson, unknown fields rejected), runs the generated validators
// on it and on every typed_config inside, and returns it.
func loadBootstrap(t *testing.T) *bootstrapv3.Bootstrap {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir(t), "envoy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("envoy.yaml: %v", err)
	}
	js, err := json.Marshal(doc)
	if err != nil {
		t.Fatalf("envoy.yaml as JSON: %v", err)
	}
	bs := &bootstrapv3.Bootstrap{}
	if err := protojson.Unmarshal(js, bs); err != nil {
		t.Fatalf("envoy.yaml does not match envoy.config.bootstrap.v3.Bootstrap: %v", err)
	}
	deploytest.ValidateProto(t, "bootstrap", bs)
	return bs
}

// demoEnvoy is what the test needs from envoy.yaml.
type demoEnvoy struct {
	rl       *ratelimitv3.RateLimit
	filters  []string
	routes   []*routev3.Route
	clusters map[string]*clusterv3.Cluster
}

func parseEnvoy(t *testing.T) demoEnvoy {
	t.Helper()
	bs := loadBootstrap(t)
	d := demoEnvoy{clusters: map[string]*clusterv3.Cluster{}}
	for _, c := range bs.GetStaticResources().GetClusters() {
		d.clusters[c.GetName()] = c
	}
	ls := bs.GetStaticResources().GetListeners()
	if len(ls) != 1 || len(ls[0].GetFilterChains()) != 1 || len(ls[0].GetFilterChains()[0].GetFilters()) != 1 {
		t.Fatalf("want one listener with one filter chain and one network filter")
	}
	hcm := &hcmv3.HttpConnectionManager{}
	if err := ls[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(hcm); err != nil {
		t.Fatalf("network filter is not the HTTP connection manager: %v", err)
	}
	for _, f := range hcm.GetHttpFilters() {
		d.filters = append(d.filters, f.GetName())
		if f.GetName() == "envoy.filters.http.ratelimit" {
			d.rl = &ratelimitv3.RateLimit{}
			if err := f.GetTypedConfig().UnmarshalTo(d.rl); err != nil {
				t.Fatalf("ratelimit filter config: %v", err)
			}
		}
	}
	if d.rl == nil {
		t.Fatalf("no envoy.filters.http.ratelimit in %v", d.filters)
	}
	vhs := hcm.GetRouteConfig().GetVirtualHosts()
	if len(vhs) != 1 {
		t.Fatalf("want one virtual host, got %d", len(vhs))
	}
	if len(vhs[0].GetRateLimits()) > 0 {
		t.Fatal("virtual-host rate_limits are ignored on routes that set their own; keep them on the routes")
	}
	d.routes = vhs[0].GetRoutes()
	return d
}

func TestEnvoyConfig(t *testing.T) {
	c := loadCompose(t)
	d := parseEnvoy(t)
	rl := d.rl

	if n := len(d.filters); n < 2 || d.filters[n-1] != "envoy.filters.http.router" || d.filters[0] != "envoy.filters.http.ratelimit" {
		t.Errorf("http filters %v: want the ratelimit filter before the router (last)", d.filters)
	}
	if !rl.GetFailureModeDeny() {
		t.Error("failure_mode_deny is not set: the demo fails closed on purpose")
	}
	if rl.GetEnableXRatelimitHeaders() != ratelimitv3.RateLimit_DRAFT_VERSION_03 {
		t.Errorf("enable_x_ratelimit_headers %v, want DRAFT_VERSION_03", rl.GetEnableXRatelimitHeaders())
	}
	rlsArgs := c.Services["envoy-rls"].Command
	if rl.GetEnableXRatelimitHeaders() != ratelimitv3.RateLimit_OFF && flagValue(rlsArgs, "default-headers") != "retry_after" {
		t.Error("Envoy writes X-RateLimit-* itself; envoy-rls should run with --default-headers=retry_after or the headers come twice")
	}
	svc := rl.GetRateLimitService()
	if svc.GetTransportApiVersion().String() != "V3" {
		t.Errorf("transport_api_version %v, want V3", svc.GetTransportApiVersion())
	}
	if tm := rl.GetTimeout().AsDuration(); tm <= 0 || tm > time.Second {
		t.Errorf("timeout %v: want a short explicit bound", tm)
	}

	// The RLS cluster: HTTP/2, pointing at the envoy-rls service's gRPC port.
	rlsCluster := d.clusters[svc.GetGrpcService().GetEnvoyGrpc().GetClusterName()]
	if rlsCluster == nil {
		t.Fatalf("rate_limit_service cluster %q is not defined", svc.GetGrpcService().GetEnvoyGrpc().GetClusterName())
	}
	opts := &upstreamhttpv3.HttpProtocolOptions{}
	a := rlsCluster.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
	if a == nil || a.UnmarshalTo(opts) != nil || opts.GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil {
		t.Error("the envoy-rls cluster does not speak HTTP/2 (gRPC needs it)")
	}
	_, grpcPort, _ := net.SplitHostPort(flagValue(rlsArgs, "grpc-addr"))
	checkEndpoint(t, c, rlsCluster, "envoy-rls", grpcPort)
	checkEndpoint(t, c, d.clusters["echo"], "echo", c.Services["echo"].Environment["PORT"])
	for _, r := range d.routes {
		if cl := r.GetRoute().GetCluster(); d.clusters[cl] == nil {
			t.Errorf("route %v goes to undefined cluster %q", r.GetMatch(), cl)
		}
	}
}

func checkEndpoint(t *testing.T, c composeFile, cl *clusterv3.Cluster, service, port string) {
	t.Helper()
	eps := cl.GetLoadAssignment().GetEndpoints()
	if len(eps) != 1 || len(eps[0].GetLbEndpoints()) != 1 {
		t.Fatalf("cluster %s: want one endpoint", cl.GetName())
	}
	sa := eps[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
	if sa.GetAddress() != service || fmt.Sprint(sa.GetPortValue()) != port {
		t.Errorf("cluster %s points at %s:%d, want compose service %s:%s", cl.GetName(), sa.GetAddress(), sa.GetPortValue(), service, port)
	}
	if _, ok := c.Services[service]; !ok {
		t.Errorf("cluster %s: no compose service %q", cl.GetName(), service)
	}
}

// descriptorsFor: the descriptors Envoy sends for a request to path from
// client, from the first route whose prefix matches.
func descriptorsFor(t *testing.T, d demoEnvoy, path, client string) [][]descriptors.Entry {
	t.Helper()
	for _, r := range d.routes {
		if p := r.GetMatch().GetPrefix(); p != "" && strings.HasPrefix(path, p) {
			return deploytest.Descriptors(t, r.GetRoute().GetRateLimits(), map[string]string{":path": path}, client)
		}
	}
	t.Fatalf("no route for %s", path)
	return nil
}

// TestDemoRules: the rule file loads with the project's loader, and every
// descriptor envoy.yaml produces meets the rule meant for it.
func TestDemoRules(t *testing.T) {
	snap, err := descriptors.Load(filepath.Join(dir(t), "rules"), descriptors.Options{Secret: make([]byte, 32)})
	if err != nil {
		t.Fatalf("deploy/compose/rules: %v", err)
	}
	d := parseEnvoy(t)
	if !snap.HasDomain(d.rl.GetDomain()) {
		t.Fatalf("envoy.yaml sends domain %q, which the rules do not define", d.rl.GetDomain())
	}
	type want struct {
		rule string
		rpm  uint32
	}
	cases := []struct {
		path string
		want []want
	}{
		{"/limited", []want{{"demo/remote_address", 30}, {"demo/path=limited", 20}, {"demo/path=limited/remote_address", 3}}},
		// The query string does not move the request off its rule.
		{"/limited?page=2", []want{{"demo/remote_address", 30}, {"demo/path=limited", 20}, {"demo/path=limited/remote_address", 3}}},
		{"/", []want{{"demo/remote_address", 30}}},
		{"/anything/else", []want{{"demo/remote_address", 30}}},
	}
	for _, tc := range cases {
		ds := descriptorsFor(t, d, tc.path, "172.18.0.1")
		if len(ds) != len(tc.want) {
			t.Errorf("%s: Envoy sends %d descriptors %v, want %d", tc.path, len(ds), ds, len(tc.want))
			continue
		}
		for i, entries := range ds {
			m, ok := snap.Match(d.rl.GetDomain(), entries)
			if !ok {
				t.Errorf("%s: descriptor %v matches no rule", tc.path, entries)
				continue
			}
			if m.Rule.Path != tc.want[i].rule || m.Rule.RequestsPerUnit != tc.want[i].rpm || m.Rule.Unit != descriptors.UnitMinute {
				t.Errorf("%s: descriptor %v meets %s (%d/%v), want %s (%d/minute)", tc.path, entries, m.Rule.Path, m.Rule.RequestsPerUnit, m.Rule.Unit, tc.want[i].rule, tc.want[i].rpm)
			}
		}
	}
}

// TestDemo429 runs the real envoy-rls binary on the demo rules (memory store,
// loopback) and replays the docs' curl loop as the calls Envoy would make:
// three requests to /limited pass, the fourth and fifth are OVER_LIMIT (a
// 429) with Retry-After, and another client is not affected. Then the
// docs' PromQL is checked against what /metrics shows.
func TestDemo429(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the binary")
	}
	d := parseEnvoy(t)
	srv := servetest.Start(t, "--config", filepath.Join(dir(t), "rules"), "--store", "memory", "--default-headers", "retry_after")
	call := func(path, ip string) *rlsv3.RateLimitResponse {
		t.Helper()
		return srv.Call(t, d.rl.GetDomain(), descriptorsFor(t, d, path, ip)...)
	}
	want := []rlsv3.RateLimitResponse_Code{
		rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK,
		rlsv3.RateLimitResponse_OVER_LIMIT, rlsv3.RateLimitResponse_OVER_LIMIT,
	}
	for i, w := range want {
		resp := call("/limited", "198.51.100.7")
		if resp.GetOverallCode() != w {
			t.Fatalf("call %d to /limited: %v, want %v", i+1, resp.GetOverallCode(), w)
		}
		if w == rlsv3.RateLimitResponse_OVER_LIMIT {
			var names []string
			for _, h := range resp.GetResponseHeadersToAdd() {
				names = append(names, strings.ToLower(h.GetKey()))
			}
			if !slices.Contains(names, "retry-after") || slices.Contains(names, "x-ratelimit-limit") {
				t.Errorf("call %d: headers %v, want Retry-After only (Envoy writes X-RateLimit-*)", i+1, names)
			}
		}
	}
	if got := call("/limited", "198.51.100.8").GetOverallCode(); got != rlsv3.RateLimitResponse_OK {
		t.Errorf("another client on /limited: %v, want OK", got)
	}
	if got := call("/other", "198.51.100.7").GetOverallCode(); got != rlsv3.RateLimitResponse_OK {
		t.Errorf("the limited client on another path: %v, want OK", got)
	}
	// The calls above produced OK and OVER_LIMIT decisions in domain demo:
	// the PromQL in docs/demo.md must find its metrics, labels and values.
	checkDocQueries(t, srv)
}
