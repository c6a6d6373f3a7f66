package rls

import (
	"strconv"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/redis"
)

// Several limits on one descriptor (rate_limits): every limit is evaluated
// in the call's one batch, and the descriptor's status is its binding limit.

const severalRules = `domain: several
descriptors:
  - key: api_key
    rate_limits:
      - {unit: second, requests_per_unit: 10}
      - {unit: minute, requests_per_unit: 20}
  - key: open_day
    rate_limits:
      - {unit: second, requests_per_unit: 2}
      - {unit: day, requests_per_unit: 100, failure_mode: open}
  - key: global
    rate_limits:
      - {unit: second, requests_per_unit: 100, name: global_burst}
      - {unit: minute, requests_per_unit: 3, name: global_minute}
  - key: vip
    rate_limit: {unit: minute, requests_per_unit: 50, replaces: [{name: global_minute}]}
  - key: shadow
    shadow_mode: true
    rate_limits:
      - {unit: second, requests_per_unit: 1}
      - {unit: minute, requests_per_unit: 5}
`

func loadSeveral(t *testing.T) *descriptors.Snapshot { return rulesOf(t, severalRules) }

func TestBindingLimit(t *testing.T) {
	const none = -1
	type lim struct {
		current   int
		reported  bool
		remaining uint32
		retry     time.Duration
		reset     time.Duration
	}
	tests := []struct {
		name   string
		limits []lim
		want   int
	}{
		{"one limit", []lim{{0, false, 5, 0, time.Second}}, 0},
		{"no current limit", []lim{{none, false, 0, 0, 0}}, none},
		{"fewest remaining", []lim{{0, false, 9, 0, time.Second}, {1, false, 3, 0, time.Minute}}, 1},
		{"fewest remaining first", []lim{{0, false, 2, 0, time.Second}, {1, false, 3, 0, time.Minute}}, 0},
		{"tie: the later reset", []lim{{0, false, 4, 0, time.Second}, {1, false, 4, 0, time.Minute}}, 1},
		{"over beats fewer remaining", []lim{{0, false, 0, 0, time.Minute}, {1, true, 0, time.Second, time.Second}}, 1},
		{"over: the longest wait", []lim{{0, true, 0, time.Second, time.Second}, {1, true, 0, 40 * time.Second, 40 * time.Second}, {2, true, 0, 3 * time.Second, time.Hour}}, 1},
		{"over, same wait: the later reset", []lim{{0, true, 0, time.Second, time.Second}, {1, true, 0, time.Second, time.Minute}}, 1},
		{"a failed-open limit is skipped", []lim{{none, false, 0, 0, 0}, {0, false, 7, 0, time.Second}}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ds := make([]descStatus, len(tc.limits))
			for i, l := range tc.limits {
				ds[i] = descStatus{current: l.current, reported: l.reported, remaining: l.remaining, retry: l.retry, reset: l.reset}
			}
			if got := bindingLimit(ds); got != tc.want {
				t.Errorf("bindingLimit = %d, want %d", got, tc.want)
			}
		})
	}
}

// windows moves a scenario between one-second windows: on the memory store
// a fake clock; on Redis, whose clock a test cannot move, the real one, and
// then only within one window.
type windows interface {
	// start begins the first window; next moves to the following second.
	start()
	next()
	// fits reports whether the calls since start or next were made within
	// one second of the store's clock.
	fits() bool
}

type fakeWindows struct{ c *limitertest.Clock }

func (w fakeWindows) start() {}
func (w fakeWindows) next() {
	w.c.Set(w.c.Now().Truncate(time.Second).Add(time.Second))
}
func (w fakeWindows) fits() bool { return true }

// realWindows is the wall clock, which is Redis's on this machine: start
// notes the second the calls begin in, fits whether they ended in it (a
// loaded machine straddles a boundary now and then: the caller retries).
type realWindows struct{ second time.Time }

func (w *realWindows) start()     { w.second = time.Now().Truncate(time.Second) }
func (w *realWindows) next()      { panic("realWindows: a test cannot wait for Redis's next window") }
func (w *realWindows) fits() bool { return time.Now().Truncate(time.Second).Equal(w.second) }

type severalStep struct {
	code      rlsv3.RateLimitResponse_Code
	unit      rlsv3.RateLimitResponse_RateLimit_Unit // the binding limit's
	remaining uint32
}

// runSeveral runs "10 per second and 20 per minute" for one key, in its
// first phases (1 to 3: the first second; the next, where the minute's
// limit binds; the one after). exact checks the waits to the second (a
// fake clock 10 s past a minute). It returns false when the calls of a
// second did not fit in it (a slow machine on the real clock): the caller
// retries with another key.
func runSeveral(t *testing.T, h *harness, w windows, key string, exact bool, phases int) bool {
	t.Helper()
	const sec, min = rlsv3.RateLimitResponse_RateLimit_SECOND, rlsv3.RateLimitResponse_RateLimit_MINUTE
	ok, over := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	var first, second []severalStep
	for i := 1; i <= 10; i++ {
		// The second's limit has fewer remaining.
		first = append(first, severalStep{ok, sec, uint32(10 - i)})
		// Both have as many remaining: the minute's resets later.
		second = append(second, severalStep{ok, min, uint32(10 - i)})
	}
	first = append(first, severalStep{over, sec, 0})
	// Both over: the minute's wait is the longer.
	second = append(second, severalStep{over, min, 0})
	// The second's window reset, the minute's did not.
	third := []severalStep{{over, min, 0}, {over, min, 0}}

	type phase struct {
		steps []severalStep
		retry string // Retry-After of the OVER_LIMIT steps when exact
	}
	w.start()
	for p, ph := range []phase{{first, "1"}, {second, "49"}, {third, "48"}}[:phases] {
		if p > 0 {
			w.next()
		}
		resps := make([]*rlsv3.RateLimitResponse, len(ph.steps))
		for i := range ph.steps {
			resps[i] = h.call(t, request("several", desc("api_key", key)))
		}
		if !w.fits() {
			return false
		}
		for i, want := range ph.steps {
			resp := resps[i]
			if resp.OverallCode != want.code || len(resp.Statuses) != 1 {
				t.Fatalf("phase %d step %d: %v", p, i, resp)
			}
			st := resp.Statuses[0]
			if st.Code != want.code || st.CurrentLimit.GetUnit() != want.unit || st.LimitRemaining != want.remaining {
				t.Fatalf("phase %d step %d: status %v %v remaining %d, want %v %v %d", p, i, st.Code, st.CurrentLimit.GetUnit(), st.LimitRemaining, want.code, want.unit, want.remaining)
			}
			rpu := uint32(10)
			if want.unit == min {
				rpu = 20
			}
			hd := headers(resp)
			if st.CurrentLimit.GetRequestsPerUnit() != rpu || hd[headerLimit] != strconv.Itoa(int(rpu))+", 10;w=1, 20;w=60" || hd[headerRemaining] != strconv.Itoa(int(want.remaining)) {
				t.Fatalf("phase %d step %d: current_limit %v, headers %v", p, i, st.CurrentLimit, hd)
			}
			reset := st.DurationUntilReset.AsDuration()
			if want.unit == sec && reset > time.Second || want.unit == min && reset <= time.Second {
				t.Fatalf("phase %d step %d: duration_until_reset %v for the %v limit", p, i, reset, want.unit)
			}
			retry, hasRetry := hd[headerRetryAfter]
			if hasRetry != (want.code == over) {
				t.Fatalf("phase %d step %d: Retry-After %q", p, i, retry)
			}
			if hasRetry && exact && retry != ph.retry {
				t.Fatalf("phase %d step %d: Retry-After %s, want %s", p, i, retry, ph.retry)
			}
			if hasRetry && !exact && want.unit == min {
				if n, _ := strconv.Atoi(retry); n < 2 || n > 60 {
					t.Fatalf("phase %d step %d: Retry-After %s for the minute's limit", p, i, retry)
				}
			}
		}
	}
	return true
}

func TestSeveralLimitsMemory(t *testing.T) {
	e := newEnv(t, loadSeveral(t))
	if !runSeveral(t, e.harness, fakeWindows{e.clock}, "k1", true, 3) {
		t.Fatal("a fake clock does not move by itself")
	}
	// One batch per call, two limits in each.
	if batches, requests := e.store.Counts(); requests != 2*batches || batches != 11+11+2 {
		t.Errorf("%d batches, %d requests", batches, requests)
	}
	// Each limit is counted under its own policy.
	m := e.metrics(t)
	for series, want := range map[string]string{
		`envoy_rls_decisions_total{domain="several",policy="several/api_key",result="over_limit"}`:    "2",
		`envoy_rls_decisions_total{domain="several",policy="several/api_key::1",result="over_limit"}`: "3",
		`envoy_rls_decisions_total{domain="several",policy="several/api_key::1",result="ok"}`:         "21",
	} {
		if got := counterValue(m, series); got != want {
			t.Errorf("%s = %q, want %s", series, got, want)
		}
	}
}

func TestSeveralLimitsRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("Redis lane")
	}
	srv := redistest.Standalone(t)
	runSeveralOnRedis(t, redis.Config{Addrs: []string{srv.Addr()}})
}

// TestSeveralLimitsRedisCluster: the same on a Redis Cluster, where the
// limits of the descriptor share a slot and so one atomic program.
func TestSeveralLimitsRedisCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("Redis lane")
	}
	c := redistest.StartCluster(t)
	runSeveralOnRedis(t, redis.Config{Addrs: c.Addrs(), Mode: redis.ModeCluster, Timeout: 5 * time.Second})
}

func runSeveralOnRedis(t *testing.T, cfg redis.Config) {
	t.Helper()
	snap := loadSeveral(t)
	h := newHarness(t, func() Rules { return snap }, redisStore(t, cfg), limiter.SystemClock{})
	// The first second only: the windows that follow are the memory store's
	// test (a fake clock), and the Go and Lua steps are held equal by the
	// parity tests.
	for attempt := 0; ; attempt++ {
		key := "redis-" + strconv.FormatInt(time.Now().UnixNano(), 36)
		if runSeveral(t, h, &realWindows{}, key, false, 1) {
			return
		}
		if attempt == 9 {
			t.Fatal("ten attempts: the calls of one second never fitted in it")
		}
	}
}

// TestSeveralLimitsFailureModes: each limit answers a store failure by its
// own failure mode; the descriptor reports the closed one.
func TestSeveralLimitsFailureModes(t *testing.T) {
	h := newEnv(t, loadSeveral(t))
	h.setFail(limiter.Unavailable)
	resp := h.call(t, request("several", desc("open_day", "x")))
	st := resp.Statuses[0]
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_SECOND || st.CurrentLimit.GetRequestsPerUnit() != 2 {
		t.Fatalf("store down: %v", resp)
	}
	if hd := headers(resp); hd[headerLimit] != "2, 2;w=1" || hd[headerRetryAfter] != "3" {
		t.Errorf("store down: headers %v (the failed-open limit is not listed)", hd)
	}
	m := h.metrics(t)
	if !strings.Contains(m, `envoy_rls_fallback_total{mode="open"} 1`) || !strings.Contains(m, `envoy_rls_fallback_total{mode="closed"} 1`) {
		t.Errorf("fallback metrics:\n%s", grepLines(m, "fallback"))
	}
}

// TestSeveralLimitsShadow: a shadow-mode descriptor's limits are counted and
// reported OK.
func TestSeveralLimitsShadow(t *testing.T) {
	h := newEnv(t, loadSeveral(t))
	h.call(t, request("several", desc("shadow", "x")))
	resp := h.call(t, request("several", desc("shadow", "x")))
	st := resp.Statuses[0]
	if resp.OverallCode != rlsv3.RateLimitResponse_OK || st.Code != rlsv3.RateLimitResponse_OK || st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_SECOND || st.LimitRemaining != 0 {
		t.Fatalf("shadow: %v", resp)
	}
	m := h.metrics(t)
	if got := counterValue(m, `envoy_rls_decisions_total{domain="several",policy="several/shadow",result="shadow_over_limit"}`); got != "1" {
		t.Errorf("shadow over = %q:\n%s", got, grepLines(m, "several/shadow"))
	}
	if got := counterValue(m, `envoy_rls_decisions_total{domain="several",policy="several/shadow::1",result="ok"}`); got != "2" {
		t.Errorf("shadow minute ok = %q", got)
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestSeveralLimitsReplaces: replaces names one limit of a list; that limit
// alone is dropped, the others of its descriptor still apply.
func TestSeveralLimitsReplaces(t *testing.T) {
	h := newEnv(t, loadSeveral(t))
	for i := 0; i < 5; i++ {
		resp := h.call(t, request("several", desc("global", "g"), desc("vip", "v")))
		if resp.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("call %d: %v (the replaced 3 per minute must not apply)", i, resp)
		}
		if st := resp.Statuses[0]; st.CurrentLimit.GetRequestsPerUnit() != 100 || st.LimitRemaining != uint32(99-i) {
			t.Fatalf("call %d: global status %v", i, st)
		}
	}
	if _, requests := h.store.Counts(); requests != 10 {
		t.Errorf("store saw %d requests, want 10 (the replaced limit is not evaluated)", requests)
	}
	// Alone, the descriptor has both limits, and its minute is untouched.
	resp := h.call(t, request("several", desc("global", "g")))
	if st := resp.Statuses[0]; st.CurrentLimit.GetRequestsPerUnit() != 3 || st.LimitRemaining != 2 {
		t.Fatalf("global alone: %v", st)
	}
}

// TestSeveralLimitsShareASlot: the Redis keys of one descriptor's limits
// share a Cluster hash tag, and the first limit's key is the one a single
// rate_limit on the descriptor has.
func TestSeveralLimitsShareASlot(t *testing.T) {
	snap := loadSeveral(t)
	m, ok := snap.Match("several", []descriptors.Entry{{Key: "api_key", Value: "k"}})
	if !ok || len(m.Rule.Limits) != 2 {
		t.Fatalf("match %v %+v", ok, m)
	}
	hashTag := func(key []byte) string {
		s := string(key)
		return s[strings.IndexByte(s, '{'):strings.IndexByte(s, '}')]
	}
	k0 := redis.StorageKey(nil, m.Rule.Limits[0].Policy, m.Subjects[0], m.Tag)
	k1 := redis.StorageKey(nil, m.Rule.Limits[1].Policy, m.Subjects[1], m.Tag)
	if hashTag(k0) != hashTag(k1) || string(k0) == string(k1) {
		t.Errorf("keys %s and %s", k0, k1)
	}
	if single := redis.StorageKey(nil, m.Rule.Limits[0].Policy, m.Subjects[0], limiter.Tag{}); string(single) != string(k0) {
		t.Errorf("first limit's key %s, a single rate_limit's %s", k0, single)
	}
}
