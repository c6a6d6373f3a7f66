package rls

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

const metadataRules = `
domain: md
descriptors:
  - key: user
    metadata:
      owner: team-a
      labels: {tier: gold}
    rate_limit:
      name: per-user
      unit: hour
      requests_per_unit: 2
      penalty:
        duration: 30s
  - key: route
    metadata:
      owner: team-b
      labels: {zone: eu}
    rate_limit:
      unit: minute
      requests_per_unit: 100
  - key: free
    rate_limit:
      unlimited: true
`

func withDynamicMetadata(c *Config) { c.DynamicMetadata = true }

// metadataOf is the response's dynamic metadata as JSON values.
func metadataOf(t *testing.T, resp *rlsv3.RateLimitResponse) map[string]any {
	t.Helper()
	if resp.DynamicMetadata == nil {
		t.Fatal("no dynamic metadata")
	}
	return resp.DynamicMetadata.AsMap()
}

func TestDynamicMetadataOff(t *testing.T) {
	e := newEnv(t, rulesOf(t, metadataRules))
	if resp := e.call(t, request("md", desc("user", "alice"))); resp.DynamicMetadata != nil {
		t.Fatalf("dynamic metadata without the option: %v", resp.DynamicMetadata)
	}
}

// TestDynamicMetadata: the reference's fields (domain, entries,
// hitsAddend, the merged metadata of the rules answered OK) and what
// decided each descriptor, through a denial and a penalty block.
func TestDynamicMetadata(t *testing.T) {
	e := newEnv(t, rulesOf(t, metadataRules), withDynamicMetadata)
	call := func() map[string]any {
		req := request("md", desc("user", "alice"), withHits(desc("route", "/a"), 3), desc("free", "x"), desc("other", "y"))
		req.HitsAddend = 1
		return metadataOf(t, e.call(t, req))
	}
	routeOK := map[string]any{"entries": []any{"route=/a"}, "hitsAddend": 3.0, "code": "OK", "policy": "md/route",
		"result": "ok", "remaining": 97.0, "resetSeconds": 50.0}
	for i, remaining := range []float64{1, 0} {
		got := call()
		routeOK["remaining"] = 97.0 - 3*float64(i)
		want := map[string]any{
			"domain":     "md",
			"hitsAddend": 1.0,
			"descriptors": []any{
				map[string]any{"entries": []any{"user=alice"}, "code": "OK", "limitName": "per-user", "policy": "md:per-user",
					"result": "ok", "remaining": remaining, "resetSeconds": 3590.0},
				routeOK,
				map[string]any{"entries": []any{"free=x"}, "code": "OK", "policy": "unlimited", "result": "ok"},
				map[string]any{"entries": []any{"other=y"}, "code": "OK", "result": "unmatched"},
			},
			// Both rules answered OK: their metadata merged, the first
			// rule's value kept for a key both set.
			"metadata": map[string]any{"owner": "team-a", "labels": map[string]any{"tier": "gold", "zone": "eu"}},
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("call %d:\n got %s\nwant %s", i+1, jsonOf(got), jsonOf(want))
		}
	}
	// The third: over the hour's limit, an offence (a 30 s block); the
	// user's rule no longer contributes its metadata. The route, whose
	// descriptor is answered OK, still does; nothing was consumed.
	got := call()
	user := got["descriptors"].([]any)[0]
	wantUser := map[string]any{"entries": []any{"user=alice"}, "code": "OVER_LIMIT", "limitName": "per-user", "policy": "md:per-user",
		"result": "over_limit", "remaining": 0.0, "resetSeconds": 3590.0, "retryAfterSeconds": 3590.0}
	if !reflect.DeepEqual(user, wantUser) {
		t.Fatalf("over the limit:\n got %s\nwant %s", jsonOf(user), jsonOf(wantUser))
	}
	if md := got["metadata"]; !reflect.DeepEqual(md, map[string]any{"owner": "team-b", "labels": map[string]any{"zone": "eu"}}) {
		t.Fatalf("metadata of the rules answered OK: %s", jsonOf(md))
	}
	// Blocked 10 s later: the block's 20 s are no time to come back, the
	// hour's end is.
	e.clock.Advance(10 * time.Second)
	user = call()["descriptors"].([]any)[0]
	wantUser["blocked"], wantUser["resetSeconds"], wantUser["retryAfterSeconds"] = true, 3580.0, 3580.0
	if !reflect.DeepEqual(user, wantUser) {
		t.Fatalf("blocked:\n got %s\nwant %s", jsonOf(user), jsonOf(wantUser))
	}
}

// TestDynamicMetadataOverride: a descriptor's own limit is written as the
// reference writes it, and its policy is reported as the metrics name it
// (override: its ID derives from request keys).
func TestDynamicMetadataOverride(t *testing.T) {
	e := newRealEnv(t, withDynamicMetadata)
	d := overrideDesc(5, typev3.RateLimitUnit_MINUTE, "route", "r1")
	d.Limit.UnitMultiplier = wrapperspb.UInt32(15)
	got := metadataOf(t, e.call(t, request("rls", d)))["descriptors"].([]any)[0].(map[string]any)
	if got["limit"] != "requests_per_unit:5 unit:MINUTE unit_multiplier:15" || got["policy"] != overridePolicy ||
		got["result"] != "ok" || got["remaining"] != 4.0 {
		t.Fatalf("override descriptor: %s", jsonOf(got))
	}
}

// TestDynamicMetadataFailureMode: a store failure answered by the rule's
// failure mode says so.
func TestDynamicMetadataFailureMode(t *testing.T) {
	e := newEnv(t, rulesOf(t, metadataRules), withDynamicMetadata)
	e.setFail(limiter.Unavailable)
	got := metadataOf(t, e.call(t, request("md", desc("user", "alice"))))["descriptors"].([]any)[0].(map[string]any)
	want := map[string]any{"entries": []any{"user=alice"}, "code": "OVER_LIMIT", "limitName": "per-user", "policy": "md:per-user",
		"result": "over_limit", "remaining": 0.0, "resetSeconds": 3.0, "retryAfterSeconds": 3.0, "failureMode": "closed"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("fail closed:\n got %s\nwant %s", jsonOf(got), jsonOf(want))
	}
}

// TestDynamicMetadataBounded: the entries the metadata repeats are cut to
// MetadataEntryBytes each and MetadataEntriesBytes in all, the dropped ones
// counted; bytes that are not UTF-8 are replaced, so the response still
// marshals.
func TestDynamicMetadataBounded(t *testing.T) {
	e := newEnv(t, rulesOf(t, metadataRules), withDynamicMetadata)
	long := strings.Repeat("v", MaxValueBytes)
	req := request("md")
	for range 3 {
		d := desc()
		for k := range MaxEntries {
			d.Entries = append(d.Entries, desc(string(rune('a'+k)), long).Entries[0])
		}
		req.Descriptors = append(req.Descriptors, d)
	}
	req.Descriptors = append(req.Descriptors, desc("user", "bad\xffbyte"))
	resp, err := e.srv.ShouldRateLimit(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := proto.Marshal(resp); err != nil {
		t.Fatalf("the response does not marshal: %v", err)
	}
	got := metadataOf(t, resp)["descriptors"].([]any)
	total, dropped := 0, 0.0
	for i, d := range got {
		m := d.(map[string]any)
		for _, v := range m["entries"].([]any) {
			s := v.(string)
			if len(s) > metadataEntryBytes || !utf8.ValidString(s) {
				t.Fatalf("descriptor %d: entry of %d bytes (valid UTF-8 %t)", i, len(s), utf8.ValidString(s))
			}
			total += len(s)
		}
		if n, ok := m["entriesDropped"].(float64); ok {
			dropped += n
		}
	}
	// 16 entries of 256 bytes fill the 4096 bytes: the next 32 and the
	// user's are dropped.
	if total != metadataEntriesBytes || dropped != 2*MaxEntries+1 {
		t.Fatalf("%d entry bytes, %v dropped; want %d and %d", total, dropped, metadataEntriesBytes, 2*MaxEntries+1)
	}
	// Alone, the user's entry is kept, its byte replaced.
	resp, err = e.srv.ShouldRateLimit(context.Background(), request("md", desc("user", "bad\xffbyte")))
	if err != nil {
		t.Fatal(err)
	}
	entries := metadataOf(t, resp)["descriptors"].([]any)[0].(map[string]any)["entries"]
	if !reflect.DeepEqual(entries, []any{"user=bad\uFFFDbyte"}) {
		t.Fatalf("entries %v", entries)
	}
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
