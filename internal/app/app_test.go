package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	"github.com/envoy-rls/envoy-rls/internal/admin"
	"github.com/envoy-rls/envoy-rls/internal/polltest"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

const testRules = `domain: app
descriptors:
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: 2
`

func writeRules(t *testing.T, dir, content string) string {
	t.Helper()
	p := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func noEnv(string) string { return "" }

// syncBuffer is a bytes.Buffer safe for the logger and the test to share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// running is one serve command started by a test.
type running struct {
	grpcAddr, adminAddr string
	cancel              context.CancelFunc
	done                chan error
	logs                *syncBuffer
	conn                *grpc.ClientConn
	reload              chan os.Signal
	watcher             *descriptors.Watcher
}

func startServe(t *testing.T, args []string, env map[string]string, h hooks) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1), logs: &syncBuffer{}, reload: make(chan os.Signal)}
	addrs := make(chan [2]string, 1)
	h.listening = func(g, a string) { addrs <- [2]string{g, a} }
	h.reloadSignals = r.reload
	h.watcher = func(w *descriptors.Watcher) { r.watcher = w }
	base := []string{"serve", "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--drain-timeout", "5s"}
	go func() {
		r.done <- run(ctx, append(base, args...), func(k string) string { return env[k] }, io.Discard, r.logs, h)
	}()
	select {
	case a := <-addrs:
		r.grpcAddr, r.adminAddr = a[0], a[1]
	case err := <-r.done:
		cancel()
		t.Fatalf("serve exited early: %v\nlogs:\n%s", err, r.logs)
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatalf("serve did not start\nlogs:\n%s", r.logs)
	}
	conn, err := grpc.NewClient(r.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	r.conn = conn
	t.Cleanup(func() {
		_ = conn.Close()
		r.stop(t)
	})
	return r
}

// stop cancels the serve command and waits for it to return.
func (r *running) stop(t *testing.T) error {
	t.Helper()
	r.cancel()
	select {
	case err, ok := <-r.done:
		if ok {
			close(r.done)
		}
		return err
	case <-time.After(15 * time.Second):
		t.Fatalf("serve did not stop\nlogs:\n%s", r.logs)
	}
	return nil
}

func (r *running) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + r.adminAddr + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// awaitAttempt waits, up to 10s, for the rule load attempt that next (from
// r.watcher.NextAttempt) announces.
func (r *running) awaitAttempt(t *testing.T, next <-chan struct{}) {
	t.Helper()
	select {
	case <-next:
	case <-time.After(10 * time.Second):
		t.Fatalf("no rule load attempt within 10s\nlogs:\n%s", r.logs)
	}
}

// check sends one ShouldRateLimit for user=value over the real gRPC client,
// with md as outgoing metadata (key, value pairs: trace headers).
func (r *running) check(t *testing.T, value string, md ...string) *rlsv3.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, md...)
	resp, err := rlsv3.NewRateLimitServiceClient(r.conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{
		Domain:      "app",
		Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "user", Value: value}}}},
	})
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp
}

func TestServeEndToEnd(t *testing.T) {
	dir := t.TempDir()
	rules := writeRules(t, dir, testRules)
	// --config from the environment, the rest from flags.
	r := startServe(t, nil, map[string]string{"ENVOY_RLS_CONFIG": rules}, hooks{})

	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		if got := r.check(t, "zed-the-user").OverallCode; got != want {
			t.Fatalf("call %d: %v, want %v", i, got, want)
		}
	}

	if code, body := r.get(t, "/healthz"); code != 200 || !strings.Contains(body, "ok") {
		t.Fatalf("/healthz %d %q", code, body)
	}
	if code, body := r.get(t, "/readyz"); code != 200 {
		t.Fatalf("/readyz %d %q", code, body)
	}
	code, metrics := r.get(t, "/metrics")
	if code != 200 || !strings.Contains(metrics, `envoy_rls_decisions_total{domain="app",policy=`) || !strings.Contains(metrics, `envoy_rls_config_reloads_total{result="success"} 1`) {
		t.Fatalf("/metrics %d:\n%s", code, metrics)
	}
	if strings.Contains(metrics, "zed-the-user") || strings.Contains(r.logs.String(), "zed-the-user") {
		t.Fatal("a descriptor value reached /metrics or the logs")
	}
	code, cfg := r.get(t, "/config")
	var doc configDoc
	if err := json.Unmarshal([]byte(cfg), &doc); err != nil || code != 200 {
		t.Fatalf("/config %d %v:\n%s", code, err, cfg)
	}
	if len(doc.Domains) != 1 || doc.Domains[0].Domain != "app" || !doc.LastReload.OK || doc.Store != "memory" {
		t.Fatalf("/config: %+v", doc)
	}

	// gRPC health and reflection.
	hr, err := healthpb.NewHealthClient(r.conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: "envoy.service.ratelimit.v3.RateLimitService"})
	if err != nil || hr.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", hr, err)
	}
	stream, err := reflectionpb.NewServerReflectionClient(r.conn).ServerReflectionInfo(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	rr, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range rr.GetListServicesResponse().GetService() {
		names = append(names, s.Name)
	}
	if !strings.Contains(strings.Join(names, " "), "envoy.service.ratelimit.v3.RateLimitService") {
		t.Fatalf("reflection lists %v", names)
	}
	_ = stream.CloseSend()

	if err := r.stop(t); err != nil {
		t.Fatalf("serve returned %v, want nil (exit 0)", err)
	}
	if !strings.Contains(r.logs.String(), `"level":"warn"`) || !strings.Contains(r.logs.String(), "random per-process secret") {
		t.Fatalf("the random secret was not logged:\n%s", r.logs)
	}
}

func TestReloadKeepsPreviousOnFailure(t *testing.T) {
	// --config is a link to a file in a directory the watcher does not
	// watch, so that SIGHUP alone reloads.
	dir := t.TempDir()
	writeRules(t, dir, testRules)
	rules := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.Symlink(filepath.Join(dir, "rules.yaml"), rules); err != nil {
		t.Fatal(err)
	}
	r := startServe(t, []string{"--config", rules}, nil, hooks{})
	_, before := r.get(t, "/config")

	writeRules(t, dir, "domain: app\ndescriptors:\n  - key: user\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	next := r.watcher.NextAttempt()
	r.reload <- syscall.SIGHUP
	r.awaitAttempt(t, next)
	if _, m := r.get(t, "/metrics"); !strings.Contains(m, `envoy_rls_config_reloads_total{result="failure"} 1`) {
		t.Fatalf("failed reload not counted:\n%s", m)
	}
	_, after := r.get(t, "/config")
	var doc configDoc
	if err := json.Unmarshal([]byte(after), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.LastReload.OK || len(doc.LastReload.Problems) == 0 || doc.LastReload.Problems[0].Line != 4 {
		t.Fatalf("last reload: %+v", doc.LastReload)
	}
	var prev configDoc
	_ = json.Unmarshal([]byte(before), &prev)
	if doc.Fingerprint != prev.Fingerprint || doc.Fingerprint == "" {
		t.Fatal("a failed reload replaced the rules")
	}
	if got := r.check(t, "u").OverallCode; got != rlsv3.RateLimitResponse_OK {
		t.Fatalf("after a failed reload: %v", got)
	}

	writeRules(t, dir, strings.Replace(testRules, "requests_per_unit: 2", "requests_per_unit: 1", 1))
	next = r.watcher.NextAttempt()
	r.reload <- syscall.SIGHUP
	r.awaitAttempt(t, next)
	if _, m := r.get(t, "/metrics"); !strings.Contains(m, `envoy_rls_config_reloads_total{result="success"} 2`) {
		t.Fatalf("successful reload not counted:\n%s", m)
	}
	r.check(t, "v")
	if got := r.check(t, "v").OverallCode; got != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("the new limit of 1 is not in force: %v", got)
	}
}

// waitFor polls cond until it holds, for at most 10 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	polltest.Eventually(t, 10*time.Second, 20*time.Millisecond, "condition", func() error {
		if cond() {
			return nil
		}
		return errors.New("not met")
	})
}

// blockingStore holds every Evaluate until released, and can fail Ping.
type blockingStore struct {
	limiter.Store
	entered chan struct{}
	release chan struct{}
	mu      sync.Mutex
	pingErr error
}

func (b *blockingStore) Evaluate(ctx context.Context, batch []limiter.Request, out []limiter.Outcome) {
	b.entered <- struct{}{}
	<-b.release
	b.Store.Evaluate(ctx, batch, out)
}

func (b *blockingStore) Ping(context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.pingErr
}

// TestReadyzAndGracefulDrain: with --readiness store, /readyz and
// /healthcheck follow the store's ping; a stop request makes it say draining while an in-flight
// call finishes.
func TestReadyzAndGracefulDrain(t *testing.T) {
	rules := writeRules(t, t.TempDir(), testRules)
	bs := &blockingStore{entered: make(chan struct{}, 1), release: make(chan struct{})}
	r := startServe(t, []string{"--config", rules, "--readiness", "store"}, nil, hooks{wrapStore: func(s limiter.Store) limiter.Store {
		bs.Store = s
		return bs
	}})

	if code, _ := r.get(t, "/readyz"); code != 200 {
		t.Fatalf("/readyz %d, want 200", code)
	}
	bs.mu.Lock()
	bs.pingErr = errors.New("connection refused")
	bs.mu.Unlock()
	if code, body := r.get(t, "/readyz"); code != 503 || !strings.Contains(body, "store unreachable: connection refused") {
		t.Fatalf("/readyz %d %q, want 503 store unreachable", code, body)
	}
	// The reference's probe follows the store too (its
	// REDIS_HEALTH_CHECK_ACTIVE_CONNECTION).
	if code, body := r.get(t, "/healthcheck"); code != 500 || !strings.Contains(body, "store unreachable") {
		t.Fatalf("/healthcheck %d %q, want 500 store unreachable", code, body)
	}
	bs.mu.Lock()
	bs.pingErr = nil
	bs.mu.Unlock()
	if code, _ := r.get(t, "/readyz"); code != 200 {
		t.Fatalf("/readyz %d after the store came back", code)
	}
	if code, _ := r.get(t, "/healthcheck"); code != 200 {
		t.Fatalf("/healthcheck %d after the store came back", code)
	}

	// An in-flight call survives the stop request.
	result := make(chan *rlsv3.RateLimitResponse, 1)
	go func() { result <- r.check(t, "inflight") }()
	<-bs.entered
	r.cancel()
	waitFor(t, func() bool {
		code, body := r.get(t, "/readyz")
		return code == 503 && strings.Contains(body, "draining")
	})
	hr, err := healthpb.NewHealthClient(r.conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err == nil && hr.Status == healthpb.HealthCheckResponse_SERVING {
		t.Fatal("gRPC health still SERVING while draining")
	}
	select {
	case err := <-r.done:
		t.Fatalf("serve returned (%v) before the in-flight call finished", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(bs.release)
	if resp := <-result; resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("in-flight call: %v", resp.OverallCode)
	}
	select {
	case err := <-r.done:
		close(r.done)
		if err != nil {
			t.Fatalf("serve returned %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not return after the drain")
	}
}

func TestDrainTimeoutCutsOffStuckCalls(t *testing.T) {
	rules := writeRules(t, t.TempDir(), testRules)
	bs := &blockingStore{entered: make(chan struct{}, 1), release: make(chan struct{})}
	defer close(bs.release)
	r := startServe(t, []string{"--config", rules, "--drain-timeout", "200ms"}, nil, hooks{wrapStore: func(s limiter.Store) limiter.Store {
		bs.Store = s
		return bs
	}})
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = rlsv3.NewRateLimitServiceClient(r.conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{
			Domain: "app", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "user", Value: "x"}}}},
		})
	}()
	<-bs.entered
	start := time.Now()
	r.cancel()
	waitFor(t, func() bool { return strings.Contains(r.logs.String(), "drain timeout") })
	if time.Since(start) > 5*time.Second {
		t.Fatal("drain took far longer than --drain-timeout")
	}
}

func TestValidate(t *testing.T) {
	dir := t.TempDir()
	good := writeRules(t, dir, testRules)
	var out, errOut bytes.Buffer
	if err := Run(context.Background(), []string{"validate", good}, noEnv, &out, &errOut); err != nil {
		t.Fatalf("validate good: %v\n%s%s", err, out.String(), errOut.String())
	}
	if !strings.Contains(out.String(), "domain app") {
		t.Fatalf("validate output lacks the domain:\n%s", out.String())
	}

	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("domain: app\ndescriptors:\n  - key: user\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	errOut.Reset()
	err := Run(context.Background(), []string{"validate", "--config", bad}, noEnv, &out, &errOut)
	if !errors.Is(err, ErrFailed) {
		t.Fatalf("validate bad: err %v, want ErrFailed (exit 1)", err)
	}
	if !strings.HasPrefix(out.String(), bad+":4:") || !strings.Contains(out.String(), "fortnight") {
		t.Fatalf("validate bad printed:\n%s", out.String())
	}

	// From the environment, and a missing path.
	out.Reset()
	if err := Run(context.Background(), []string{"validate"}, func(k string) string {
		if k == "ENVOY_RLS_CONFIG" {
			return good
		}
		return ""
	}, &out, &errOut); err != nil {
		t.Fatalf("validate via ENVOY_RLS_CONFIG: %v", err)
	}
	if err := Run(context.Background(), []string{"validate"}, noEnv, &out, &errOut); err == nil || errors.Is(err, ErrFailed) || !strings.Contains(err.Error(), "exactly one rule path") {
		t.Fatalf("validate without a path: %v, want an error for main to print", err)
	}
	if err := Run(context.Background(), []string{"validate", filepath.Join(dir, "missing.yaml")}, noEnv, &out, &errOut); !errors.Is(err, ErrFailed) {
		t.Fatalf("validate of a missing file: %v", err)
	}
}

// Every start-up failure is an error for main to print (not ErrFailed, which
// main keeps quiet about), one line per problem, naming the flag or
// variable as the user set it, the value and what is accepted: the
// command line, the options' checks (every problem at once), and what
// only a start finds.
func TestServeFlagErrors(t *testing.T) {
	rules := writeRules(t, t.TempDir(), testRules)
	listen := []string{"--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"}
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"no command", nil, nil, `a command is required: serve, validate, explain, digest, version or help ("envoy-rls help" explains them)`},
		{"unknown command", []string{"launch"}, nil, `unknown command "launch": must be serve, validate, explain, digest, version or help ("envoy-rls help" explains them)`},
		{"several problems", []string{"serve", "--config", rules, "--store", "etcd"}, map[string]string{"ENVOY_RLS_LOG_LEVEL": "loud", "ENVOY_RLS_MEMORY_MAX_ENTRIES": "x"},
			`ENVOY_RLS_MEMORY_MAX_ENTRIES="x": must be 0 (automatic) or a positive integer` + "\n" + `--store="etcd": must be memory or redis` + "\n" + `ENVOY_RLS_LOG_LEVEL="loud": must be debug, info, warn or error`},
		{"unreadable secret file", append([]string{"serve", "--config", rules}, listen...), map[string]string{"ENVOY_RLS_HMAC_SECRET_FILE": "/nonexistent/secret"}, `ENVOY_RLS_HMAC_SECRET_FILE="/nonexistent/secret": must be a readable file holding the secret: open /nonexistent/secret: no such file or directory`},
		{"listen failure", []string{"serve", "--config", rules, "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:99999"}, nil, `--admin-addr="127.0.0.1:99999": must be an address this process can listen on: listen tcp: address 99999: invalid port`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var errOut bytes.Buffer
			err := Run(context.Background(), tc.args, func(k string) string { return tc.env[k] }, io.Discard, &errOut)
			if err == nil || errors.Is(err, ErrFailed) || err.Error() != tc.want {
				t.Fatalf("err\n%v\nwant\n%s\nstderr %q", err, tc.want, errOut.String())
			}
		})
	}
}

// Rules that fail to load stop serve with every problem on a line of its
// own.
func TestServeRulesErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("domain: app\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: -1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := Run(context.Background(), []string{"serve", "--config", bad, "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"}, noEnv, io.Discard, io.Discard)
	if err == nil || errors.Is(err, ErrFailed) {
		t.Fatalf("serve with bad rules: %v", err)
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], bad+":4:") || !strings.HasPrefix(lines[1], bad+":6:") ||
		lines[2] != fmt.Sprintf("--config=%q: 2 problem(s) in the rules; nothing served", bad) {
		t.Fatalf("serve with bad rules:\n%v", err)
	}
}

// startWatching serves testRules from the folder dir and returns once the
// rule watcher watches it.
func startWatching(t *testing.T, dir string) *running {
	t.Helper()
	writeRules(t, dir, testRules)
	r := startServe(t, []string{"--config", dir}, nil, hooks{})
	select {
	case <-r.watcher.Ready():
	case <-time.After(10 * time.Second):
		t.Fatalf("the rule watcher did not start within 10s\nlogs:\n%s", r.logs)
	}
	return r
}

func TestReloadOnFileChange(t *testing.T) {
	dir := t.TempDir()
	r := startWatching(t, dir)
	next := r.watcher.NextAttempt()
	writeRules(t, dir, strings.Replace(testRules, "requests_per_unit: 2", "requests_per_unit: 1", 1))
	// A write can be seen in parts (the truncation, then the content): wait
	// for the attempt that counts the new rules.
	deadline := time.After(20 * time.Second)
	for {
		select {
		case <-next:
		case <-deadline:
			t.Fatalf("no reload within 20s of rewriting the rule file\nlogs:\n%s", r.logs)
		}
		next = r.watcher.NextAttempt()
		if _, m := r.get(t, "/metrics"); !strings.Contains(m, `envoy_rls_config_reloads_total{result="success"} 1`) {
			break
		}
	}
	_, cfg := r.get(t, "/config")
	if !strings.Contains(cfg, `"trigger": "watch"`) {
		t.Fatalf("/config last reload:\n%s", cfg)
	}
	r.check(t, "w")
	if got := r.check(t, "w").OverallCode; got != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("the changed limit is not in force: %v", got)
	}
}

// --pprof serves the profiles on the admin address; without it they do
// not exist.
func TestPprofOnlyWithFlag(t *testing.T) {
	dir := t.TempDir()
	rules := writeRules(t, dir, testRules)
	off := startServe(t, []string{"--config", rules}, nil, hooks{})
	if code, _ := off.get(t, "/debug/pprof/"); code != http.StatusNotFound {
		t.Fatalf("/debug/pprof/ without --pprof: %d, want 404", code)
	}
	on := startServe(t, []string{"--config", rules, "--pprof"}, nil, hooks{})
	if code, body := on.get(t, "/debug/pprof/"); code != 200 || !strings.Contains(body, "goroutine") {
		t.Fatalf("/debug/pprof/ with --pprof: %d %q", code, body)
	}
}

// TestLocalCache: a repeated denial is answered by the local deny cache
// (on by default) and counted; --local-cache=false sends it to the store.
func TestLocalCache(t *testing.T) {
	dir := t.TempDir()
	rules := writeRules(t, dir, testRules)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--config", rules}, "envoy_rls_local_cache_hits_total 2"},
		{[]string{"--config", rules, "--local-cache=false"}, "envoy_rls_local_cache_hits_total 0"},
	} {
		r := startServe(t, tc.args, nil, hooks{})
		for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT, rlsv3.RateLimitResponse_OVER_LIMIT, rlsv3.RateLimitResponse_OVER_LIMIT} {
			resp := r.check(t, "hot-user")
			if resp.OverallCode != want {
				t.Fatalf("%v: call %d: %v, want %v", tc.args, i, resp.OverallCode, want)
			}
			if want == rlsv3.RateLimitResponse_OVER_LIMIT && len(resp.ResponseHeadersToAdd) == 0 {
				t.Fatalf("%v: call %d: a denial without headers", tc.args, i)
			}
		}
		if _, m := r.get(t, "/metrics"); !strings.Contains(m, tc.want) {
			t.Fatalf("%v: /metrics lacks %q", tc.args, tc.want)
		}
	}
}

// serve --help prints the help of every serve flag, the rule source's
// included, on standard output.
func TestServeHelp(t *testing.T) {
	for _, arg := range []string{"-h", "--help", "-help"} {
		var out, errOut bytes.Buffer
		if err := Run(context.Background(), []string{"serve", arg}, noEnv, &out, &errOut); err != nil {
			t.Fatalf("serve %s: %v", arg, err)
		}
		if errOut.Len() != 0 {
			t.Fatalf("serve %s wrote to stderr: %q", arg, errOut.String())
		}
		for _, want := range []string{"Usage: envoy-rls serve", "  --config PATH\n", "  --xds-server VALUE\n", "(ENVOY_RLS_CONFIG_SOURCE, default \"file\")", "  --env-compat\n"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("serve %s: help lacks %q", arg, want)
			}
		}
	}
	var out bytes.Buffer
	if err := Run(context.Background(), []string{"validate", "--help"}, noEnv, &out, io.Discard); err != nil || !strings.Contains(out.String(), "  --config PATH\n") {
		t.Fatalf("validate --help: %v\n%s", err, out.String())
	}
}

// The top-level help lists the commands and where flag values come from.
func TestHelp(t *testing.T) {
	for _, arg := range []string{"help", "-h", "--help"} {
		var out bytes.Buffer
		if err := Run(context.Background(), []string{arg}, noEnv, &out, io.Discard); err != nil {
			t.Fatalf("%s: %v", arg, err)
		}
		for _, want := range []string{"envoy-rls serve --config PATH", "envoy-rls validate", "envoy-rls version", "ENVOY_RLS_GRPC_ADDR", "envoy-rls serve --help"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%s: lacks %q:\n%s", arg, want, out.String())
			}
		}
	}
}

// Started as ratelimit, the binary serves with the reference's
// environment.
func TestArgsAs(t *testing.T) {
	for _, tc := range []struct {
		argv0 string
		args  []string
		want  []string
	}{
		{"/bin/ratelimit", nil, []string{"serve", "--env-compat"}},
		{"ratelimit", []string{"--log-level", "debug"}, []string{"serve", "--env-compat", "--log-level", "debug"}},
		{"/usr/local/bin/envoy-rls", []string{"version"}, []string{"version"}},
	} {
		if got := argsAs(tc.argv0, tc.args); !slices.Equal(got, tc.want) {
			t.Errorf("argsAs(%q, %q) = %q, want %q", tc.argv0, tc.args, got, tc.want)
		}
	}
}

// TestReadinessIgnoresTheStoreByDefault: /readyz stays 200 while the store
// does not answer its ping (each policy's failure mode answers), and the
// store's state shows on /healthz, the store_up gauge and one log line per
// transition.
func TestReadinessIgnoresTheStoreByDefault(t *testing.T) {
	rules := writeRules(t, t.TempDir(), testRules)
	bs := &blockingStore{entered: make(chan struct{}, 1), release: make(chan struct{})}
	close(bs.release)
	r := startServe(t, []string{"--config", rules}, nil, hooks{wrapStore: func(s limiter.Store) limiter.Store {
		bs.Store = s
		return bs
	}})
	waitFor(t, func() bool { _, body := r.get(t, "/healthz"); return strings.Contains(body, "store memory: up since") })
	bs.mu.Lock()
	bs.pingErr = errors.New("connection refused")
	bs.mu.Unlock()
	waitFor(t, func() bool {
		_, body := r.get(t, "/healthz")
		return strings.Contains(body, "store memory: down since") && strings.Contains(body, "connection refused")
	})
	if code, body := r.get(t, "/healthz"); code != 200 || !strings.HasPrefix(body, "ok\n") {
		t.Fatalf("/healthz %d %q, want 200 ok", code, body)
	}
	if code, body := r.get(t, "/readyz"); code != 200 || !strings.Contains(body, "down since") {
		t.Fatalf("/readyz %d %q, want 200 naming the store's state", code, body)
	}
	if _, m := r.get(t, "/metrics"); !strings.Contains(m, "envoy_rls_store_up 0") {
		t.Fatalf("store_up while the ping fails:\n%s", m)
	}
	bs.mu.Lock()
	bs.pingErr = nil
	bs.mu.Unlock()
	waitFor(t, func() bool { _, m := r.get(t, "/metrics"); return strings.Contains(m, "envoy_rls_store_up 1") })
	if code, body := r.get(t, "/readyz"); code != 200 || body != "ready\n" {
		t.Fatalf("/readyz %d %q once the store answers", code, body)
	}
	logs := r.logs.String()
	if strings.Count(logs, admin.MsgStoreDown) != 1 || strings.Count(logs, admin.MsgStoreUp) != 1 {
		t.Fatalf("want one %q and one %q line (transitions only):\n%s", admin.MsgStoreDown, admin.MsgStoreUp, logs)
	}
}

// twoRules holds two descriptors.
const twoRules = testRules + `  - key: ip
    rate_limit: {unit: second, requests_per_unit: 9}
`

// A rule set over --config-max-descriptors (or its variable) stops serve
// with one line naming the limit, the measured total and the flag; a bad
// bound is refused like any flag value.
func TestServeRuleSetLimits(t *testing.T) {
	dir := t.TempDir()
	writeRules(t, dir, twoRules)
	// Should serve start anyway, the context ends it.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	listen := []string{"--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"}
	err := Run(ctx, append([]string{"serve", "--config", dir, "--config-max-descriptors", "1"}, listen...), noEnv, io.Discard, io.Discard)
	want := fmt.Sprintf(`--config=%q: the 1 rule file(s) hold 2 descriptors, more than the limit of 1: raise --config-max-descriptors (or ENVOY_RLS_CONFIG_MAX_DESCRIPTORS) to load them; nothing served`, dir)
	if err == nil || errors.Is(err, ErrFailed) || err.Error() != want {
		t.Fatalf("serve over the descriptor limit:\n%v\nwant:\n%s", err, want)
	}
	env := func(k string) string {
		if k == "ENVOY_RLS_CONFIG_MAX_BYTES" {
			return "10"
		}
		return ""
	}
	err = Run(ctx, append([]string{"serve", "--config", dir}, listen...), env, io.Discard, io.Discard)
	if err == nil || strings.Count(err.Error(), "\n") != 0 || !strings.Contains(err.Error(), "bytes, more than the limit of 10: raise --config-max-bytes (or ENVOY_RLS_CONFIG_MAX_BYTES)") {
		t.Fatalf("serve over the byte limit from the environment: %v", err)
	}
	err = Run(ctx, append([]string{"serve", "--config", dir, "--config-max-bytes", "0"}, listen...), noEnv, io.Discard, io.Discard)
	if err == nil || err.Error() != `--config-max-bytes="0": must be a positive number of bytes` {
		t.Fatalf("--config-max-bytes 0: %v", err)
	}
}

// validate applies the same bounds, refuses a named pipe at once, and
// returns when its context ends.
func TestValidateLimitsAndPipes(t *testing.T) {
	dir := t.TempDir()
	good := writeRules(t, dir, twoRules)
	var out bytes.Buffer
	err := Run(context.Background(), []string{"validate", "--config-max-descriptors", "1", good}, noEnv, &out, io.Discard)
	if !errors.Is(err, ErrFailed) || !strings.Contains(out.String(), good+": the 1 rule file(s) hold 2 descriptors, more than the limit of 1: raise --config-max-descriptors") {
		t.Fatalf("validate over the limit: %v\n%s", err, out.String())
	}
	fifo := filepath.Join(t.TempDir(), "pipe.yaml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	err = Run(context.Background(), []string{"validate", fifo}, noEnv, &out, io.Discard)
	if !errors.Is(err, ErrFailed) || !strings.Contains(out.String(), fifo+": not a regular file (a named pipe)") {
		t.Fatalf("validate of a FIFO: %v\n%s", err, out.String())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = validateCommand(ctx, []string{good}, noEnv, io.Discard, io.Discard)
	if err != nil && (errors.Is(err, ErrFailed) || !strings.Contains(err.Error(), "stopped before the rules were read")) {
		t.Fatalf("validate with an ended context: %v", err)
	}
}

// Putting the files back to the rules in service after a failed reload
// clears the failure on /config.
func TestConfigClearsFailureOnRevert(t *testing.T) {
	dir := t.TempDir()
	r := startWatching(t, dir)
	lastReload := func() reloadDoc {
		t.Helper()
		_, body := r.get(t, "/config")
		var doc configDoc
		if err := json.Unmarshal([]byte(body), &doc); err != nil {
			t.Fatal(err)
		}
		return doc.LastReload
	}
	// waitFor waits for the watcher's attempts until /config shows ok.
	waitFor := func(ok bool) reloadDoc {
		t.Helper()
		deadline := time.After(20 * time.Second)
		for {
			next := r.watcher.NextAttempt()
			if l := lastReload(); l.OK == ok && l.Trigger == "watch" {
				return l
			}
			select {
			case <-next:
			case <-deadline:
				t.Fatalf("/config last_reload never became ok=%v: %+v\nlogs:\n%s", ok, lastReload(), r.logs)
			}
		}
	}
	writeRules(t, dir, "domain: app\ndescriptors:\n  - key: user\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	failed := waitFor(false)
	writeRules(t, dir, testRules)
	back := waitFor(true)
	if back.Error != "" || len(back.Problems) != 0 || back.Fingerprint != failed.Fingerprint {
		t.Fatalf("after the revert: %+v, want ok with the fingerprint in service %s", back, failed.Fingerprint)
	}
}
