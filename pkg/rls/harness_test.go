package rls

import (
	"context"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/internal/rlstest"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/failover"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/leases"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/memory"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/redis"
)

// harness is a Server behind a real gRPC server on an in-memory listener.
type harness struct {
	srv    *Server
	client rlsv3.RateLimitServiceClient
	reg    *prometheus.Registry
	logs   *observer.ObservedLogs
}

type harnessOpt func(*Config)

// failoverOver is a store that newHarness puts behind a failover wrapper
// of cfg (its registry filled in) rather than of the defaults.
type failoverOver struct {
	limiter.Store
	cfg failover.Config
}

func newHarness(t *testing.T, rules func() Rules, store limiter.Store, clock limiter.Clock, opts ...harnessOpt) *harness {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	log, logs := rlstest.Logger()
	cfg := Config{Rules: rules, Store: store, Metrics: m, Logger: log, Clock: clock}
	for _, o := range opts {
		o(&cfg)
	}
	// The failover wrapper answers the store's failures, as the binary's
	// does, and counts them on the harness's registry.
	fc := failover.Config{Clock: cfg.Clock}
	if f, ok := cfg.Store.(failoverOver); ok {
		cfg.Store, fc = f.Store, f.cfg
	}
	if _, ok := cfg.Store.(*failover.Store); !ok {
		if fc.Metrics, err = failover.NewMetrics(reg); err != nil {
			t.Fatal(err)
		}
		if cfg.Store, err = failover.New(cfg.Store, fc); err != nil {
			t.Fatal(err)
		}
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// As the binary serves it: its codec and its method handler.
	conn := rlstest.Serve(t, srv.Register, grpc.ForceServerCodecV2(Codec{}))
	return &harness{srv: srv, client: rlsv3.NewRateLimitServiceClient(conn), reg: reg, logs: logs}
}

func (h *harness) call(t *testing.T, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	t.Helper()
	return rlstest.Call(t, h.client, req)
}

// metrics renders the registry in the text exposition format.
func (h *harness) metrics(t *testing.T) string {
	return limitertest.Exposition(t, h.reg)
}

// counter returns the value of the sample whose line starts with prefix
// (name and labels), or 0.
func counterValue(metrics, series string) string {
	for _, line := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(line, series+" ") {
			return strings.TrimPrefix(line, series+" ")
		}
	}
	return ""
}

// desc and request are rlstest.Desc and rlstest.Request, short for the
// many tables that build requests.
func desc(kv ...string) *rlv3.RateLimitDescriptor { return rlstest.Desc(kv...) }

func request(domain string, ds ...*rlv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return rlstest.Request(domain, ds...)
}

func withHits(d *rlv3.RateLimitDescriptor, n uint64) *rlv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

// headers flattens response headers to a map (each name once).
func headers(resp *rlsv3.RateLimitResponse) map[string]string {
	m := map[string]string{}
	for _, h := range resp.ResponseHeadersToAdd {
		m[h.Key] = h.Value
	}
	return m
}

const rulesPath = "testdata/rules/rls.yaml"

// t0 is 10s past a minute boundary: a minute window resets in 50s.
var t0 = time.Date(2030, 1, 1, 0, 0, 10, 0, time.UTC)

// testSecret keys the subjects of the tests' rules: a new one each run, so
// that a Redis server kept between runs (REDIS_ADDR) holds no state of
// theirs.
var testSecret = []byte("0123456789abcdef-test-secret-" + limitertest.Prefix())

// rulesAt loads the rule file at path.
func rulesAt(t testing.TB, path string) *descriptors.Snapshot {
	t.Helper()
	return rlstest.LoadRules(t, path, testSecret)
}

// rulesOf loads the rule file whose text is text.
func rulesOf(t testing.TB, text string) *descriptors.Snapshot {
	t.Helper()
	return rulesAt(t, rlstest.WriteRules(t, t.TempDir(), text))
}

// loadRules loads the rules of most tests, testdata/rules/rls.yaml.
func loadRules(t testing.TB) *descriptors.Snapshot { return rulesAt(t, rulesPath) }

// memStore is a memory store of maxEntries on clock (nil: the system's),
// behind the leases wrapper as the service runs it.
func memStore(t testing.TB, clock limiter.Clock, maxEntries int) limiter.Store {
	t.Helper()
	s, err := memory.New(memory.Config{Clock: clock, MaxEntries: maxEntries})
	if err != nil {
		t.Fatal(err)
	}
	return leases.New(s, s)
}

// redisStore is a Redis store of cfg, closed when the test ends, behind
// the leases wrapper.
func redisStore(t testing.TB, cfg redis.Config) limiter.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := redis.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return leases.New(s, s)
}

// realEnv is the real rule loader and the real memory store behind a real
// gRPC server (bufconn), with a fake clock shared by store and server.
type realEnv struct {
	*harness
	clock *limitertest.Clock
	store *limitertest.Double
	snap  *descriptors.Snapshot
}

// newEnv serves snap from a memory store on a clock at t0, behind a
// limitertest.Double.
func newEnv(t *testing.T, snap *descriptors.Snapshot, opts ...harnessOpt) *realEnv {
	t.Helper()
	clock := limitertest.NewClock(t0)
	store := limitertest.NewDouble(t, memStore(t, clock, 10_000), nil)
	h := newHarness(t, func() Rules { return snap }, store, clock, opts...)
	return &realEnv{harness: h, clock: clock, store: store, snap: snap}
}

// newRealEnv serves loadRules.
func newRealEnv(t *testing.T, opts ...harnessOpt) *realEnv {
	t.Helper()
	return newEnv(t, loadRules(t), opts...)
}

// setFail makes the store answer every request with a failure of kind k
// (0: its own decisions); an unavailable store hints a retry in 2.5s.
func (e *realEnv) setFail(k limiter.OutcomeKind) {
	f := limitertest.Fault{Kind: k}
	if k == limiter.Unavailable {
		f.RetryAfter = 2500 * time.Millisecond
	}
	e.store.Set(f)
}
