package buildinfo

import (
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func TestRegisterBuildInfo(t *testing.T) {
	release := Info{Version: "v1.2.3", Revision: "0123456789abcdef", GoVersion: "go1.26.8", Date: "2026-12-01T10:00:00Z"}
	reg := prometheus.NewRegistry()
	if err := register(reg, release); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	want := `# HELP envoy_rls_build_info Always 1; the labels say which build is running (version, VCS revision, Go toolchain).
# TYPE envoy_rls_build_info gauge
envoy_rls_build_info{goversion="go1.26.8",revision="0123456789abcdef",version="v1.2.3"} 1
`
	if got := rec.Body.String(); got != want {
		t.Fatalf("/metrics\n%s\nwant\n%s", got, want)
	}
	if err := register(reg, release); err == nil {
		t.Fatal("registering twice on one registry: no error")
	}
}
