package xds

import (
	"context"
	"crypto/x509"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/envoy-rls/envoy-rls/internal/xdstest"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
)

// appLimit is domain app, key user, n requests a minute.
func appLimit(n uint32) *rlsconf.RateLimitConfig {
	return &rlsconf.RateLimitConfig{Name: "app", Domain: "app", Descriptors: []*rlsconf.RateLimitDescriptor{{
		Key: "user", RateLimit: lim(rlsconf.RateLimitUnit_MINUTE, n),
	}}}
}

// newSource is a Source for server at addr over mutual TLS with certs,
// reporting its reloads on the returned channel.
func newSource(t *testing.T, addr string, certs xdstest.Certs, reg prometheus.Registerer) (*Source, chan descriptors.ReloadResult) {
	t.Helper()
	pem, err := os.ReadFile(certs.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	reloads := make(chan descriptors.ReloadResult, 16)
	src, err := NewSource(SourceConfig{
		Client: Config{Server: addr, NodeID: "rls-node", RetryInterval: 20 * time.Millisecond, MaxRetryInterval: 100 * time.Millisecond,
			TLS: &TLS{RootCAs: pool, CertFile: certs.ClientCert, KeyFile: certs.ClientKey, ServerName: "localhost"}},
		Rules: testOpts,
		OnReload: func(r descriptors.ReloadResult) {
			select {
			case reloads <- r:
			default: // the test reads the first few
			}
		},
		Metrics: reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(src.Stop)
	return src, reloads
}

// metric is the value of the series name (with its labels, as exposed).
func metric(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			series := mf.GetName()
			for _, l := range m.GetLabel() {
				series += "{" + l.GetName() + "=\"" + l.GetValue() + "\"}"
			}
			if series == name {
				return m.GetGauge().GetValue() + m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no series %s", name)
	return 0
}

func within(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestSource: the first version is put in service and acknowledged; a bad
// version is refused with the resource and field at fault and leaves the
// rules in service; the metrics and the status follow.
func TestSource(t *testing.T) {
	certs := xdstest.NewCerts(t)
	srv := xdstest.Start(t, certs, "rls-node")
	reg := prometheus.NewRegistry()
	src, reloads := newSource(t, srv.Addr(), certs, reg)
	if src.Received() || src.Current() != nil || src.Version() != "" || (src.Status() != Status{Server: srv.Addr(), Node: "rls-node", State: "disconnected"}) {
		t.Fatalf("before Start: received %v, snapshot %v, status %+v", src.Received(), src.Current(), src.Status())
	}

	srv.Set("v1", appLimit(2))
	src.Start(context.Background())
	if err := src.WaitFirst(within(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	v1 := src.Current()
	if r := <-reloads; !r.OK || r.Trigger != trigger || r.Domains != 1 || r.Rules != 1 || r.Fingerprint != v1.Fingerprint() {
		t.Fatalf("reload of v1: %+v", r)
	}
	if m, ok := v1.Match("app", []descriptors.Entry{{Key: "user", Value: "u"}}); !ok || m.Rule.RequestsPerUnit != 2 || m.Rule.Source != "xds:app:descriptors[0]" {
		t.Fatalf("v1 match: %v %+v", ok, m.Rule)
	}
	if _, ok := srv.Await(5*time.Second, xdstest.Acked("v1")); !ok {
		t.Fatalf("v1 not acknowledged: %+v", srv.Requests())
	}
	if st := src.Status(); !src.Received() || st != (Status{Server: srv.Addr(), Node: "rls-node", Version: "v1", State: "connected"}) {
		t.Fatalf("status %+v", st)
	}

	bad := appLimit(5)
	bad.Descriptors[0].RateLimit.Unit = rlsconf.RateLimitUnit_UNKNOWN
	srv.Set("v2", bad)
	q, ok := srv.Await(5*time.Second, xdstest.Nacked("v1"))
	want := `version "v2" refused: xds:app:descriptors[0].rate_limit: rate_limit: unit is required`
	if !ok || !strings.HasPrefix(q.ErrorDetail, want) {
		t.Fatalf("v2 refusal %+v, want an error detail starting %q", q, want)
	}
	r := <-reloads
	if r.OK || len(r.Problems) != 1 || r.Problems[0].Field != "descriptors[0].rate_limit" || r.Fingerprint != v1.Fingerprint() {
		t.Fatalf("reload of v2: %+v", r)
	}
	if src.Current() != v1 || src.Version() != "v1" || src.Last().OK {
		t.Fatalf("after v2: version %q, last %+v", src.Version(), src.Last())
	}
	for name, want := range map[string]float64{
		`envoy_rls_xds_connected`: 1, `envoy_rls_xds_updates_total{result="ack"}`: 1, `envoy_rls_xds_updates_total{result="nack"}`: 1,
	} {
		if got := metric(t, reg, name); got != want {
			t.Errorf("%s %v, want %v", name, got, want)
		}
	}

	src.Stop()
	if src.State() != disconnected || metric(t, reg, "envoy_rls_xds_connected") != 0 || src.Current() != v1 {
		t.Fatalf("after Stop: %v, connected %v", src.State(), metric(t, reg, "envoy_rls_xds_connected"))
	}
}

// WaitFirst says why no version is in service.
func TestSourceWaitFirst(t *testing.T) {
	certs := xdstest.NewCerts(t)
	srv := xdstest.Start(t, certs, "rls-node")
	srv.Set("v1", &rlsconf.RateLimitConfig{Name: "app"})
	src, _ := newSource(t, srv.Addr(), certs, nil)
	src.Start(context.Background())
	if _, ok := srv.Await(5*time.Second, xdstest.Nacked("")); !ok {
		t.Fatalf("v1 not refused: %+v", srv.Requests())
	}
	err := src.WaitFirst(within(t, 0))
	if want := `the versions received were refused: xds:app:domain: domain must not be empty`; err == nil || err.Error() != want {
		t.Errorf("refused: %v, want %s", err, want)
	}

	// Nothing listens at the address.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	src, _ = newSource(t, addr, certs, nil)
	src.Start(context.Background())
	if err := src.WaitFirst(within(t, 200*time.Millisecond)); err == nil || err.Error() != "the server did not answer" {
		t.Errorf("no server: %v", err)
	}
}

// ServeEmpty serves no domain until the first version, which replaces it;
// after one, it changes nothing.
func TestSourceServeEmpty(t *testing.T) {
	certs := xdstest.NewCerts(t)
	srv := xdstest.Start(t, certs, "rls-node")
	src, _ := newSource(t, srv.Addr(), certs, nil)
	if err := src.ServeEmpty(); err != nil {
		t.Fatal(err)
	}
	empty := src.Current()
	if empty == nil || empty.HasDomain("app") || src.Received() || !src.Last().OK || src.Last().Trigger != descriptors.TriggerInitial {
		t.Fatalf("empty start: %v, received %v, last %+v", empty, src.Received(), src.Last())
	}
	srv.Set("v1", appLimit(2))
	src.Start(context.Background())
	if err := src.WaitFirst(within(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	v1 := src.Current()
	if err := src.ServeEmpty(); err != nil || src.Current() != v1 || !v1.HasDomain("app") || src.Last().Trigger != trigger {
		t.Fatalf("ServeEmpty after v1: %v; domain app %v, last %+v", err, src.Current().HasDomain("app"), src.Last())
	}
}

// Once WaitFirst returns, Last already shows the version put in service:
// the record is stored before the wait ends, so a caller that waits never
// reads the empty set's record (or none) after it.
func TestSourceLastBeforeFirst(t *testing.T) {
	for i := range 300 {
		src, err := NewSource(SourceConfig{Client: Config{Server: "127.0.0.1:1"}, Rules: testOpts})
		if err != nil {
			t.Fatal(err)
		}
		if err := src.ServeEmpty(); err != nil {
			t.Fatal(err)
		}
		applied := make(chan error, 1)
		go func() { applied <- src.apply("v1", []*rlsconf.RateLimitConfig{appLimit(2)}) }()
		if err := src.WaitFirst(context.Background()); err != nil {
			t.Fatal(err)
		}
		if l := src.Last(); !l.OK || l.Trigger != trigger || l.Domains != 1 {
			t.Fatalf("run %d: Last right after WaitFirst is %+v, want the xds version", i, l)
		}
		if err := <-applied; err != nil {
			t.Fatal(err)
		}
	}
}

func TestNewSourceRefuses(t *testing.T) {
	for _, tc := range []struct {
		cfg  SourceConfig
		want string
	}{
		{SourceConfig{Client: Config{Server: "127.0.0.1:1"}}, "secret"},
		{SourceConfig{Client: Config{}, Rules: testOpts}, "no server address"},
		{SourceConfig{Client: Config{Server: "127.0.0.1:1", TLS: &TLS{CertFile: "/nonexistent/c.pem", KeyFile: "/nonexistent/k.pem"}}, Rules: testOpts},
			`xds: client certificate "/nonexistent/c.pem", key "/nonexistent/k.pem"`},
	} {
		if _, err := NewSource(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.cfg, err, tc.want)
		}
	}
}

// TestSourceSetSecret: the version in service is keyed with the new secret
// at once, without a new version, and so is the next version.
func TestSourceSetSecret(t *testing.T) {
	certs := xdstest.NewCerts(t)
	srv := xdstest.Start(t, certs, "rls-node")
	src, reloads := newSource(t, srv.Addr(), certs, prometheus.NewRegistry())
	other := []byte("another-secret-of-16+ bytes")
	if err := src.SetSecret(other); err != nil || src.Current() != nil {
		t.Fatalf("SetSecret before any version: %v, rules %v", err, src.Current())
	}
	srv.Set("v1", appLimit(2))
	src.Start(context.Background())
	if err := src.WaitFirst(within(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	<-reloads
	user := []descriptors.Entry{{Key: "user", Value: "u"}}
	subject := func(secret []byte, limit uint32) (got, want [32]byte) {
		t.Helper()
		ref, err := compile([]*rlsconf.RateLimitConfig{appLimit(limit)}, descriptors.Options{Secret: secret})
		if err != nil {
			t.Fatal(err)
		}
		m, ok := src.Current().Match("app", user)
		if !ok || m.Rule.RequestsPerUnit != limit {
			t.Fatalf("match %v %+v, want the limit %d", ok, m.Rule, limit)
		}
		r, _ := ref.Match("app", user)
		return m.Subject, r.Subject
	}
	if got, want := subject(other, 2); got != want {
		t.Fatalf("v1 compiled before SetSecret's secret: %x, want %x", got, want)
	}
	third := []byte("a-third-secret-of-16+ bytes")
	if err := src.SetSecret(third); err != nil {
		t.Fatal(err)
	}
	if got, want := subject(third, 2); got != want || src.Version() != "v1" || !src.Received() {
		t.Fatalf("after SetSecret: subject %x, want %x; version %q received %v", got, want, src.Version(), src.Received())
	}
	srv.Set("v2", appLimit(3))
	if r := <-reloads; !r.OK {
		t.Fatalf("v2: %+v", r)
	}
	if got, want := subject(third, 3); got != want {
		t.Fatalf("v2 keyed with another secret: %x, want %x", got, want)
	}
}
