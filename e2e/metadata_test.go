package e2e_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
)

// TestRatelimitDynamicMetadata: started as ratelimit with
// RESPONSE_DYNAMIC_METADATA=true, the binary returns in every answer's
// dynamic_metadata the reference's fields (domain, the descriptors'
// entries, hitsAddend, the metadata of the rules answered OK) and what
// decided each descriptor, so that Envoy's access log says which limit
// denied a request.
func TestRatelimitDynamicMetadata(t *testing.T) {
	redis, _ := withStandaloneRedis(t)
	env, dir := redisRuntime(t, redis, "USE_STATSD=false", "RESPONSE_DYNAMIC_METADATA=true")
	writeFile(t, dir, "rules.yaml", fmt.Sprintf(`domain: %s
descriptors:
  - key: user
    metadata: {team: payments}
    rate_limit: {name: per-user, unit: hour, requests_per_unit: 2}
`, domain))
	r := startReplica(t, "ratelimit-metadata", replicaConfig{Compat: true, Env: env})

	user := entry{"user", unique("u")}
	for i, code := range []string{"OK", "OK", "OVER_LIMIT"} {
		res := r.mustCall(t, user)
		md := res.Metadata
		if md == nil {
			t.Fatalf("call %d: %v without dynamic metadata", i+1, res)
		}
		descs, _ := md["descriptors"].([]any)
		if len(descs) != 1 {
			t.Fatalf("call %d: descriptors %s", i+1, jsonText(md))
		}
		d, _ := descs[0].(map[string]any)
		reset, _ := d["resetSeconds"].(float64)
		if reset < 1 || reset > 3600 {
			t.Fatalf("call %d: resetSeconds %v, want within the hour", i+1, d["resetSeconds"])
		}
		want := map[string]any{"entries": []any{user.Key + "=" + user.Value}, "code": code, "policy": domain + ":per-user",
			"limitName": "per-user", "remaining": float64(1 - min(i, 1)), "resetSeconds": reset}
		wantTop := map[string]any{"domain": domain, "hitsAddend": 1.0, "descriptors": []any{want},
			"metadata": map[string]any{"team": "payments"}}
		if code == "OK" {
			want["result"] = "ok"
		} else {
			// Denied: the rule no longer contributes its metadata; the
			// retry is the window's.
			want["result"], want["retryAfterSeconds"] = "over_limit", reset
			delete(wantTop, "metadata")
		}
		if !reflect.DeepEqual(md, wantTop) {
			t.Fatalf("call %d: dynamic metadata\n%s\nwant\n%s", i+1, jsonText(md), jsonText(wantTop))
		}
	}
}

func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
