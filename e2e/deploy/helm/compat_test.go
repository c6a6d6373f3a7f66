package helm_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/deploytest"
)

// The header names and the Redis-shared HMAC key, the chart values of the
// reference's LIMIT_*_HEADER settings and of its secret-less deployments:
// unset, no flag is rendered; set, each reaches its flag (render runs the
// args through app.CheckServeArgs).
func TestHeaderNamesAndRedisHMACKey(t *testing.T) {
	keep := func(a string) bool {
		return strings.HasPrefix(a, "--limit-header") || strings.HasPrefix(a, "--remaining-header") ||
			strings.HasPrefix(a, "--reset-header") || strings.HasPrefix(a, "--hmac-secret")
	}
	if got := containerArgs(t, keep); len(got) != 0 {
		t.Errorf("rendered by default: %q", got)
	}
	got := containerArgs(t, keep, "--set", "headerNames.limit=RateLimit-Limit", "--set", "headerNames.remaining=RateLimit-Remaining",
		"--set", "headerNames.reset=RateLimit-Reset")
	want := []string{"--limit-header=RateLimit-Limit", "--remaining-header=RateLimit-Remaining", "--reset-header=RateLimit-Reset"}
	if !slices.Equal(got, want) {
		t.Errorf("header names:\n got %q\nwant %q", got, want)
	}

	got = containerArgs(t, keep, cat(redisBase, []string{"--set", "hmac.redisKey=team-a:envoy-rls:hmac-secret"})...)
	if want := []string{"--hmac-secret-redis-key=team-a:envoy-rls:hmac-secret"}; !slices.Equal(got, want) {
		t.Errorf("hmac.redisKey:\n got %q\nwant %q", got, want)
	}
	m := render(t, cat(redisBase, []string{"--set", "hmac.redisKey=k"})...)
	if len(m["Secret"]) != 0 {
		t.Errorf("hmac.redisKey rendered a Secret: %v", m["Secret"])
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{cat(redisBase, withHMAC, []string{"--set", "hmac.redisKey=k"}), "set one"},
		{[]string{"--set", "hmac.redisKey=k"}, "hmac.redisKey needs store: redis"},
	} {
		if out, err := runHelm(t, append([]string{"template", "rls", deploytest.ChartDir(t)}, tc.args...)...); err == nil || !strings.Contains(out, tc.want) {
			t.Errorf("helm template %v: %v, want a failure mentioning %q:\n%s", tc.args, err, tc.want, out)
		}
	}
	checkSchemaRefuses(t, []schemaRefusal{
		{"headerNames.limit=X Limit", "limit"},
		{"headerNames.reset=X:Reset", "reset"},
	})
}
