package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/redis"
)

func TestJSONLinesParse(t *testing.T) {
	var buf bytes.Buffer
	w := NewJSONLines(&buf, false)
	e1, e2 := event("edge:per-user", 1), event("edge:per-ip", 2)
	e2.RequestID, e2.Shadow, e2.Outcome = "req-9", true, OutcomeFailureMode
	if n, err := w.Write(context.Background(), []Record{e1.Record(), e2.Record()}); n != 2 || err != nil {
		t.Fatalf("Write: %d, %v", n, err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	lines := decodeLines(t, buf.Bytes())
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2", len(lines))
	}
	want := map[string]any{
		"kind": "denial", "time": "2026-12-01T19:00:00.123Z", "domain": "edge", "policy_id": "edge:per-ip",
		"subject_digest": "02ab" + strings.Repeat("0", 60), "cost": 1.0, "limit": 10.0, "remaining": 0.0,
		"retry_after_ms": 1500.0, "request_id": "req-9", "shadow": true, "outcome": "failure_mode",
	}
	if fmt.Sprint(lines[1]) != fmt.Sprint(want) {
		t.Errorf("line 2\n got %v\nwant %v", lines[1], want)
	}
	if _, ok := lines[0]["request_id"]; ok {
		t.Errorf("line 1 has a request_id without one: %v", lines[0])
	}
}

// TestRecordFailureModeAndCost: a record names the failure mode that
// answered (absent when the store decided), in JSON and in the stream's
// fields, and carries the hits_addend as sent, even above 2^63.
func TestRecordFailureModeAndCost(t *testing.T) {
	e := event("edge:per-user", 1)
	e.Cost, e.FailureMode = 1<<63+5, "local"
	var buf bytes.Buffer
	w := NewJSONLines(&buf, false)
	store := event("edge:per-user", 2)
	if n, err := w.Write(context.Background(), []Record{e.Record(), store.Record()}); n != 2 || err != nil {
		t.Fatalf("Write: %d, %v", n, err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	text := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(text) != 2 || !strings.Contains(text[0], `"cost":9223372036854775813,`) || !strings.Contains(text[0], `"failure_mode":"local"`) {
		t.Fatalf("lines %q, want the exact cost and failure_mode local in the first", text)
	}
	if strings.Contains(text[1], "failure_mode") {
		t.Errorf("a store decision names a failure mode: %s", text[1])
	}
	r := e.Record()
	f := map[string]string{}
	for _, kv := range r.fields() {
		f[kv[0]] = kv[1]
	}
	if f["failure_mode"] != "local" || f["cost"] != "9223372036854775813" {
		t.Errorf("stream fields %v", f)
	}
	r = store.Record()
	for _, kv := range r.fields() {
		if kv[0] == "failure_mode" {
			t.Errorf("a store decision's stream fields name a failure mode: %v", r.fields())
		}
	}
}

func redisDial(t *testing.T, addr string) func() (rueidis.Client, error) {
	return func() (rueidis.Client, error) {
		return redis.NewClient(redis.Config{Addrs: []string{addr}, Mode: redis.ModeStandalone}, "envoy-rls-audit")
	}
}

// TestRedisStreamMaxLenBounded writes far more events than MAXLEN to a
// real redis-server: the stream stays near MAXLEN, and its newest entry
// holds the event's fields.
func TestRedisStreamMaxLenBounded(t *testing.T) {
	srv := redistest.Standalone(t, redistest.Local())
	const key, maxLen, total = "audit:test", 500, 5000
	w, err := newRedisStream(redisDial(t, srv.Addr()), key, maxLen, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	batch := make([]Record, 250)
	for i := 0; i < total; i += len(batch) {
		for j := range batch {
			e := event("edge:per-user", i+j)
			e.RequestID = fmt.Sprintf("req-%d", i+j)
			batch[j] = e.Record()
		}
		if n, err := w.Write(t.Context(), batch); n != len(batch) || err != nil {
			t.Fatalf("Write: %d, %v", n, err)
		}
	}
	c, err := redisDial(t, srv.Addr())()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	n, err := c.Do(t.Context(), c.B().Xlen().Key(key).Build()).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	// MAXLEN ~ trims whole macro nodes (stream-node-max-entries, 100 by
	// default): the stream keeps at least maxLen and less than one node more.
	if n < maxLen || n >= maxLen+100 {
		t.Fatalf("XLEN %d after %d events, want %d ≤ n < %d", n, total, maxLen, maxLen+100)
	}
	entries, err := c.Do(t.Context(), c.B().Xrevrange().Key(key).End("+").Start("-").Count(1).Build()).AsXRange()
	if err != nil || len(entries) != 1 {
		t.Fatalf("XREVRANGE: %v, %v", entries, err)
	}
	f := entries[0].FieldValues
	if f["request_id"] != fmt.Sprintf("req-%d", total-1) || f["policy_id"] != "edge:per-user" || f["outcome"] != OutcomeOverLimit ||
		f["retry_after_ms"] != "1500" || f["shadow"] != "false" || len(f["subject_digest"]) != 64 {
		t.Errorf("newest entry %v", f)
	}
}

// TestRedisStreamRedials: a failed dial drops the batch and is not retried
// before RedisRedialWait.
func TestRedisStreamRedials(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	dials := 0
	w, err := newRedisStream(func() (rueidis.Client, error) {
		dials++
		return nil, errors.New("connection refused")
	}, "k", 10, func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	e := event("p", 0)
	recs := []Record{e.Record()}
	for step, adv := range []time.Duration{0, redisRedialWait / 2, redisRedialWait / 2} {
		now = now.Add(adv)
		if n, err := w.Write(t.Context(), recs); n != 0 || err == nil {
			t.Fatalf("step %d: Write %d, %v; want 0 and an error", step, n, err)
		}
	}
	if dials != 2 {
		t.Errorf("%d dials, want 2 (at 0 and after the redial wait)", dials)
	}
	for _, tc := range []struct {
		key    string
		maxLen int64
	}{{"", 10}, {"k", 0}, {"k", maxStreamLen + 1}} {
		if _, err := newRedisStream(func() (rueidis.Client, error) { return nil, nil }, tc.key, tc.maxLen, nil); err == nil {
			t.Errorf("key %q maxLen %d accepted", tc.key, tc.maxLen)
		}
	}
}

// TestRedisStreamModes: the stream writer works through a Redis Cluster
// (the one key lives on one node) and through Sentinel.
func TestRedisStreamModes(t *testing.T) {
	cluster := redistest.StartCluster(t)
	set := redistest.StartSentinel(t)
	for _, tc := range []struct {
		name string
		cfg  redis.Config
	}{
		{"cluster", redis.Config{Addrs: cluster.Addrs(), Mode: redis.ModeCluster}},
		{"sentinel", redis.Config{Addrs: set.SentinelAddrs(), Mode: redis.ModeSentinel, SentinelMaster: redistest.SentinelMasterName}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dial := func() (rueidis.Client, error) { return redis.NewClient(tc.cfg, "envoy-rls-audit") }
			const key = "audit:modes"
			w, err := newRedisStream(dial, key, 50, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			recs := make([]Record, 300)
			for i := range recs {
				e := event("p", i)
				recs[i] = e.Record()
			}
			if n, err := w.Write(t.Context(), recs); n != len(recs) || err != nil {
				t.Fatalf("Write: %d, %v", n, err)
			}
			c, err := dial()
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			n, err := c.Do(t.Context(), c.B().Xlen().Key(key).Build()).AsInt64()
			if err != nil || n < 50 || n >= 150 {
				t.Fatalf("XLEN %d, %v; want 50 ≤ n < 150", n, err)
			}
		})
	}
}

// BenchmarkRedisStreamWrite: one batch of 256 events (the sink's default
// batch) to a local redis-server; ns/op ÷ 256 is the writer's cost per event.
func BenchmarkRedisStreamWrite(b *testing.B) {
	srv := redistest.Standalone(b, redistest.Local())
	w, err := newRedisStream(func() (rueidis.Client, error) {
		return redis.NewClient(redis.Config{Addrs: []string{srv.Addr()}, Mode: redis.ModeStandalone}, "envoy-rls-audit")
	}, "audit:bench", 100_000, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	recs := make([]Record, defaultBatchSize)
	for i := range recs {
		e := event("edge/remote_address", i)
		e.RequestID = fmt.Sprintf("%032x", i)
		recs[i] = e.Record()
	}
	for b.Loop() {
		if n, err := w.Write(b.Context(), recs); n != len(recs) || err != nil {
			b.Fatalf("Write: %d, %v", n, err)
		}
	}
}

// decodeLines decodes every line of a JSON lines stream as an object.
func decodeLines(t *testing.T, b []byte) []map[string]any {
	t.Helper()
	var lines []map[string]any
	for line := range bytes.Lines(b) {
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		lines = append(lines, m)
	}
	return lines
}
