package statsd

import (
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/envoy-rls/envoy-rls/internal/deploytest"
	"github.com/envoy-rls/envoy-rls/internal/polltest"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
)

// TestTCPSendFailureLogged: a TCP statsd target that refuses connections
// (the compatibility default, localhost:8125 over TCP, with nothing there)
// is logged — one warning per interval naming the address and how many
// sends failed, no stat name or request value — although the buffered
// sender makes its sends in the background.
func TestTCPSendFailureLogged(t *testing.T) {
	addr := deploytest.FreeAddr(t)
	core, logs := observer.New(zapcore.WarnLevel)
	sink := newSink(t, Config{Addr: addr, Protocol: "tcp", FlushInterval: time.Hour, Logger: zap.New(core)})

	observe := func() {
		sink.ObserveLimit(rls.LimitObservation{Rule: rule("web.user_SECRET-value"), Hits: 1, Decided: true, Consumed: true, Limit: 10, Remaining: 5})
	}
	// Each Flush is one interval: the sends of the previous one have failed
	// in the background by the time a later one logs them.
	polltest.Eventually(t, waitFor, 20*time.Millisecond, "a warning for the refused TCP target", func() error {
		observe()
		sink.Flush()
		if logs.Len() == 0 {
			return errors.New("nothing logged yet")
		}
		return nil
	})
	flushes := logs.Len()
	for _, e := range logs.TakeAll() {
		f := e.ContextMap()
		if e.Message != "statsd send failed; those stats are dropped" || f["addr"] != addr || f["protocol"] != "tcp" || f["failed_sends"].(int64) < 1 {
			t.Fatalf("warning %q %v", e.Message, f)
		}
		if msg, _ := f["error"].(string); !strings.Contains(msg, addr) || strings.Contains(msg, "SECRET") {
			t.Fatalf("error field %q", msg)
		}
	}
	if flushes < 1 {
		t.Fatal("no warning")
	}
	// One line per interval, not one per failed send: a flush with failures
	// behind it logs exactly one warning.
	polltest.Eventually(t, waitFor, 20*time.Millisecond, "the next interval's warning", func() error {
		observe()
		before := logs.Len()
		sink.Flush()
		if n := logs.Len() - before; n > 1 {
			t.Fatalf("one flush logged %d warnings", n)
		} else if n == 0 {
			return errors.New("not yet")
		}
		return nil
	})
}
