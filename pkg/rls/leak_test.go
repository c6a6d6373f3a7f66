package rls

import (
	"encoding/json"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"go.uber.org/zap/zapcore"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// TestNoDescriptorValuesInLogsOrMetrics sends distinctive descriptor values
// through every path that logs or counts (allow, deny, shadow deny, store
// failure, unknown domain, override, bounds violation, panic) and then scans
// every captured log line and the whole /metrics text for them.
func TestNoDescriptorValuesInLogsOrMetrics(t *testing.T) {
	e := newRealEnv(t, func(c *Config) { c.DenialLogFirst = 1000 })
	values := []string{"LEAK-user-7f3a", "LEAK-route-91c2", "LEAK-shadow-55d0", "LEAK-domain-0b1e", "LEAK-override-3c4d", "LEAK-fail-8e8e", "LEAK-long-"}
	ctx := metadataContext("x-request-id", "trace-1")
	send := func(domain string, ds ...*rlv3.RateLimitDescriptor) {
		_, _ = e.client.ShouldRateLimit(ctx, request(domain, ds...))
	}
	for i := 0; i < 5; i++ {
		send("rls", desc("user", values[0]), desc("route", "/tight"))
		send("rls", desc("shadow", values[2]))
		send(values[3], desc("user", values[0]))
		send("rls", desc("unknown_key", values[1]))
		ov := desc("user", values[4])
		ov.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_MINUTE}
		send("rls", ov)
		send("rls", desc("user", values[6]+strings.Repeat("x", 2000)))
	}
	e.setFail(limiter.Indeterminate)
	send("rls", desc("fail_closed", values[5]), desc("fail_open", values[5]))

	// The panic path, with a value in the panic message.
	panicking := limitertest.NewDouble(t, nil, e.clock)
	panicking.Set(limitertest.Fault{Panic: "store exploded while handling " + values[0]})
	p := newHarness(t, func() Rules { return e.snap }, panicking, e.clock)
	_, _ = p.client.ShouldRateLimit(ctx, request("rls", desc("user", values[0])))

	var logText strings.Builder
	for _, h := range []*harness{e.harness, p} {
		for _, entry := range h.logs.All() {
			enc := zapcore.NewMapObjectEncoder()
			for _, f := range entry.Context {
				f.AddTo(enc)
			}
			b, _ := json.Marshal(enc.Fields)
			logText.WriteString(entry.Message + " " + string(b) + "\n")
		}
	}
	if !strings.Contains(logText.String(), msgDenied) || !strings.Contains(logText.String(), msgShadowDenied) ||
		!strings.Contains(logText.String(), msgStoreFailure) || !strings.Contains(logText.String(), "panic") {
		t.Fatalf("the scan did not cover every log kind:\n%s", logText.String())
	}
	metrics := e.metrics(t) + p.metrics(t)
	for _, v := range values {
		if strings.Contains(logText.String(), v) {
			t.Errorf("descriptor value %q found in the logs:\n%s", v, logText.String())
		}
		if strings.Contains(metrics, v) {
			t.Errorf("descriptor value %q found in /metrics", v)
		}
	}
}
