package e2e_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
)

// fillPolicies is how many failure_mode local policies
// TestFailureModeMetadataRedisDown fills its local limiter with: one more
// than the overflow sketches the local limiter holds at once (the memory
// store's DefaultMaxSketches, 64).
const fillPolicies = 65

// TestFailureModeMetadataRedisDown: with Redis killed, the dynamic metadata
// and the audit record name the failure mode that answered each limit: a
// failure_mode local limit the local limiter admits or denies says
// "local"; one the local limiter cannot decide (it holds one subject and
// 64 overflow sketches) says "closed", as do closed limits; open ones say
// "open". While Redis answers, and once it is back, no failureMode is
// written. envoy_rls_fallback_total counts the same modes.
func TestFailureModeMetadataRedisDown(t *testing.T) {
	redis, cfg := withStandaloneRedis(t, redistest.Local())
	var rules strings.Builder
	rules.WriteString(failureModeRules(2, "local", "open", "closed"))
	for i := range fillPolicies {
		fmt.Fprintf(&rules, "  - key: fill%02d\n    rate_limit: {unit: hour, requests_per_unit: 2, failure_mode: local}\n", i)
	}
	auditPath := filepath.Join(t.TempDir(), "audit.jsonl")
	cfg.Args = []string{"--response-dynamic-metadata", "--local-fallback-max-entries", "1",
		"--audit-sink", "file", "--audit-file", auditPath}
	r := startReplicas(t, 1, rules.String(), cfg)[0]

	// call makes one call of key for subject and checks its answer and the
	// failureMode of its dynamic metadata ("": none).
	call := func(when, key, subject string, over bool, mode string) {
		t.Helper()
		res := r.call(outageDeadline, 1, entry{key, subject})
		if res.Err != nil || res.over() != over {
			t.Fatalf("%s: %s: %v, want over the limit %v", when, key, res, over)
		}
		descs, _ := res.Metadata["descriptors"].([]any)
		if len(descs) != 1 {
			t.Fatalf("%s: %s: dynamic metadata %s", when, key, jsonText(res.Metadata))
		}
		d, _ := descs[0].(map[string]any)
		if got, _ := d["failureMode"].(string); got != mode {
			t.Errorf("%s: %s: failureMode %q, want %q: %s", when, key, got, mode, jsonText(d))
		}
	}

	subject := unique("s")
	for _, key := range []string{"local", "open", "closed"} {
		call("Redis up", key, unique("up"), false, "")
	}

	redis.Kill()
	waitStoreState(t, []*replica{r}, false, recoverTimeout)
	call("local limiter", "local", subject, false, "local")
	call("local limiter", "local", subject, false, "local")
	call("local limiter, share used", "local", subject, true, "local")
	call("Redis down", "open", subject, false, "open")
	call("Redis down", "closed", subject, true, "closed")
	// The local limiter holds one subject (local's): each fill policy's new
	// subject goes to an overflow sketch of its policy, until no sketch is
	// left: that limit is answered closed.
	for i := range fillPolicies - 1 {
		call("overflow sketch", fmt.Sprintf("fill%02d", i), subject, false, "local")
	}
	full := fmt.Sprintf("fill%02d", fillPolicies-1)
	call("local limiter full", full, subject, true, "closed")
	for sample, want := range map[string]float64{
		`envoy_rls_fallback_total{mode="local"}`:  3 + fillPolicies - 1,
		`envoy_rls_fallback_total{mode="open"}`:   1,
		`envoy_rls_fallback_total{mode="closed"}`: 2,
	} {
		if got := r.metric(sample); got != want {
			t.Errorf("%s = %v, want %v", sample, got, want)
		}
	}

	redis.Restart()
	waitRedisDecides(t, r)
	call("Redis back", "local", subject, false, "")
	call("Redis back", "closed", subject, false, "")

	// The audit record of each denial: local's own (the local limiter
	// denied), the closed policy's and the full local limiter's (answered
	// closed, nothing known).
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(auditPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var got []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e struct {
			Policy      string  `json:"policy_id"`
			Outcome     string  `json:"outcome"`
			FailureMode *string `json:"failure_mode"`
		}
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		mode := "none"
		if e.FailureMode != nil {
			mode = *e.FailureMode
		}
		got = append(got, e.Policy+" "+e.Outcome+" "+mode)
	}
	want := []string{
		"e2e/local over_limit local",
		"e2e/closed failure_mode closed",
		"e2e/" + full + " failure_mode closed",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("audit records\n got %q\nwant %q", got, want)
	}
}
