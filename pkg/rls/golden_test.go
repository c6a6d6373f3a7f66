package rls

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current responses")

// TestGoldenResponses pins the whole shape of representative responses
// (statuses, headers, body) as protojson in testdata/*.golden. Run
// `go test ./pkg/rls -run Golden -update` after an intended change and
// review the diff.
func TestGoldenResponses(t *testing.T) {
	for _, tc := range []struct {
		name string
		prep func(e *realEnv)
		req  func() *rlsv3.RateLimitRequest
	}{
		{name: "ok_full_headers", req: func() *rlsv3.RateLimitRequest { return request("rls", desc("user", "alice")) }},
		{name: "over_limit_full_headers", prep: func(e *realEnv) {
			for i := 0; i < 3; i++ {
				e.call(t, request("rls", desc("user", "alice")))
			}
		}, req: func() *rlsv3.RateLimitRequest { return request("rls", desc("user", "alice")) }},
		{name: "mixed_statuses", prep: func(e *realEnv) {
			e.call(t, request("rls", desc("shadow", "s")))
		}, req: func() *rlsv3.RateLimitRequest {
			return request("rls", desc("user", "bob"), desc("nothing", "n"), desc("internal", "i"), desc("shadow", "s"), desc("bucket", "b"), desc("multi", "m"))
		}},
		{name: "over_limit_retry_after_mode", prep: func(e *realEnv) {
			e.call(t, request("rls", desc("login", "l")))
		}, req: func() *rlsv3.RateLimitRequest { return request("rls", desc("login", "l")) }},
		{name: "over_limit_none_mode", prep: func(e *realEnv) {
			e.call(t, request("rls", desc("secret_route", "s")))
		}, req: func() *rlsv3.RateLimitRequest { return request("rls", desc("secret_route", "s")) }},
		{name: "fail_closed_and_open", prep: func(e *realEnv) {
			e.setFail(limiter.Unavailable)
		}, req: func() *rlsv3.RateLimitRequest {
			return request("rls", desc("fail_closed", "c"), desc("fail_open", "o"))
		}},
		{name: "quota_partial", prep: func(e *realEnv) {
			e.call(t, request("rls", desc("quota_a", "q"), desc("quota_b", "q")))
		}, req: func() *rlsv3.RateLimitRequest { return request("rls", desc("quota_a", "q"), desc("quota_b", "q")) }},
		{name: "replaces", req: func() *rlsv3.RateLimitRequest {
			return request("rls", desc("key_1", "value_1", "user", "bkthomps"), desc("key_2", "value_2", "user", "bkthomps"))
		}},
		{name: "unknown_domain", req: func() *rlsv3.RateLimitRequest { return request("other", desc("user", "u")) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newRealEnv(t)
			if tc.prep != nil {
				tc.prep(e)
			}
			got := canonicalJSON(t, e.call(t, tc.req()))
			path := filepath.Join("testdata", tc.name+".golden")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%s differs (run with -update after an intended change)\ngot:\n%s\nwant:\n%s", path, got, want)
			}
		})
	}
}

// canonicalJSON renders resp with protojson and re-indents it with
// encoding/json, because protojson's whitespace is deliberately unstable.
func canonicalJSON(t *testing.T, resp *rlsv3.RateLimitResponse) []byte {
	t.Helper()
	raw, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := json.Indent(&out, bytes.TrimSpace(compact(t, raw)), "", "  "); err != nil {
		t.Fatal(err)
	}
	out.WriteByte('\n')
	if resp.RawBody != nil {
		// raw_body is base64 in JSON; show it readable too.
		out.WriteString("# raw_body: " + string(resp.RawBody) + "\n")
	}
	return out.Bytes()
}

func compact(t *testing.T, b []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func TestCustomHeaderNames(t *testing.T) {
	h, _ := fakeHarness(t, nil, func(c *Config) {
		c.HeaderNames = HeaderNames{Limit: "RateLimit-Limit", Remaining: "RateLimit-Remaining", Reset: "RateLimit-Reset"}
	})
	hd := headers(h.call(t, request("d", desc("user", "alice"))))
	if hd["RateLimit-Limit"] != "2, 2;w=60" || hd["RateLimit-Remaining"] != "1" || hd["RateLimit-Reset"] != "50" {
		t.Errorf("headers %v, want RateLimit-Limit, -Remaining and -Reset", hd)
	}
	if _, ok := hd[headerLimit]; ok {
		t.Errorf("headers %v: the default name is written too", hd)
	}
}

func TestHeaderNamesRefused(t *testing.T) {
	for _, n := range []HeaderNames{
		{Limit: "Rate Limit"}, {Remaining: "a:b"}, {Reset: strings.Repeat("x", 129)},
		{Limit: "X-A", Remaining: "x-a"},
	} {
		if _, err := n.withDefaults(); err == nil {
			t.Errorf("%+v accepted", n)
		}
	}
	n, err := HeaderNames{Reset: "Reset-In"}.withDefaults()
	if err != nil || n.Limit != headerLimit || n.Remaining != headerRemaining || n.Reset != "Reset-In" {
		t.Errorf("defaults: %+v, %v", n, err)
	}
}
