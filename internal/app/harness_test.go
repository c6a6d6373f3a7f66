package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/internal/polltest"
	"github.com/envoy-rls/envoy-rls/internal/rlstest"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors/rulefile"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

const testRules = `domain: app
descriptors:
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: 2
`

// writeRules is rlstest.WriteRules.
func writeRules(t *testing.T, dir, content string) string {
	t.Helper()
	return rlstest.WriteRules(t, dir, content)
}

// badUnitRules are testRules with a unit the parser refuses (line 4).
const badUnitRules = "domain: app\ndescriptors:\n  - key: user\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"

// linkedRules writes testRules in a directory of their own (returned) and
// returns the --config for them: a link to that file from a directory the
// watcher does not watch, so that only SIGHUP reloads.
func linkedRules(t *testing.T) (dir, config string) {
	t.Helper()
	dir = t.TempDir()
	writeRules(t, dir, testRules)
	config = filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.Symlink(filepath.Join(dir, "rules.yaml"), config); err != nil {
		t.Fatal(err)
	}
	return dir, config
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
	client              rlsv3.RateLimitServiceClient
	reload              chan os.Signal
	watcher             *rulefile.Watcher
}

func startServe(t *testing.T, args []string, env map[string]string, h hooks) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1), logs: &syncBuffer{}, reload: make(chan os.Signal)}
	addrs := make(chan [2]string, 1)
	h.listening = func(g, a string) { addrs <- [2]string{g, a} }
	h.reloadSignals = r.reload
	h.watcher = func(w *rulefile.Watcher) { r.watcher = w }
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
	r.conn, r.client = conn, rlsv3.NewRateLimitServiceClient(conn)
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

// sighup sends r SIGHUP and waits for the rule load attempt it starts.
func (r *running) sighup(t *testing.T) {
	t.Helper()
	next := r.watcher.NextAttempt()
	r.reload <- syscall.SIGHUP
	r.awaitAttempt(t, next)
}

// userRequest is a ShouldRateLimit request of domain app for user=value,
// the descriptor testRules limits.
func userRequest(value string) *rlsv3.RateLimitRequest {
	return rlstest.Request("app", rlstest.Desc("user", value))
}

// check sends one ShouldRateLimit for user=value over the real gRPC client,
// with md as outgoing metadata (key, value pairs: trace headers).
func (r *running) check(t *testing.T, value string, md ...string) *rlsv3.RateLimitResponse {
	t.Helper()
	return rlstest.Call(t, r.client, userRequest(value), md...)
}

// Answers of wantCodes.
const (
	allowed = rlsv3.RateLimitResponse_OK
	denied  = rlsv3.RateLimitResponse_OVER_LIMIT
)

// wantCodes sends one call for user=value per code of want, in order, and
// fails at the first whose answer is not that code.
func (r *running) wantCodes(t *testing.T, value string, want ...rlsv3.RateLimitResponse_Code) {
	t.Helper()
	rlstest.WantCodes(t, r.client, userRequest(value), want...)
}

// config is the /config document.
func (r *running) config(t *testing.T) configDoc {
	t.Helper()
	code, body := r.get(t, "/config")
	var doc configDoc
	if err := json.Unmarshal([]byte(body), &doc); err != nil || code != http.StatusOK {
		t.Fatalf("/config %d %v:\n%s", code, err, body)
	}
	return doc
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

// startBlocked serves testRules with args, the store wrapped in a
// limitertest.Double that holds every call until Release.
func startBlocked(t *testing.T, args ...string) (*running, *limitertest.Double) {
	t.Helper()
	rules := writeRules(t, t.TempDir(), testRules)
	var d *limitertest.Double
	r := startServe(t, append([]string{"--config", rules}, args...), nil, hooks{wrapStore: func(s limiter.Store) limiter.Store {
		d = limitertest.NewDouble(t, s, nil)
		d.Set(limitertest.Fault{Hold: true})
		return d
	}})
	return r, d
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

// awaitReload waits on the rule watcher's load attempts, up to 20s, until
// cond holds.
func (r *running) awaitReload(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		next := r.watcher.NextAttempt()
		if cond() {
			return
		}
		select {
		case <-next:
		case <-deadline:
			t.Fatalf("%s: not within 20s of load attempts\nlogs:\n%s", what, r.logs)
		}
	}
}
