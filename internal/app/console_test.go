package app

import (
	"net/http"
	"strings"
	"testing"
)

// TestConsoleFilesAndHeaders: /ui and its files are served with the
// security and cache headers, revalidated by ETag, and hold no data.
func TestConsoleFilesAndHeaders(t *testing.T) {
	r, _ := startExplainServer(t, "memory", nil)
	for _, tc := range []struct{ path, ctype string }{
		{"/ui", "text/html; charset=utf-8"},
		{"/ui/console.js", "text/javascript; charset=utf-8"},
		{"/ui/console.css", "text/css; charset=utf-8"},
		{"/ui/favicon.svg", "image/svg+xml"},
	} {
		resp, err := http.Get("http://" + r.adminAddr + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		h := resp.Header
		if resp.StatusCode != http.StatusOK || h.Get("Content-Type") != tc.ctype || h.Get("X-Content-Type-Options") != "nosniff" ||
			!strings.Contains(h.Get("Content-Security-Policy"), "script-src 'self'") || strings.Contains(h.Get("Content-Security-Policy"), "unsafe-inline") ||
			h.Get("Cache-Control") != "no-cache" || h.Get("ETag") == "" {
			t.Fatalf("GET %s: %d %v", tc.path, resp.StatusCode, h)
		}
		req, _ := http.NewRequest("GET", "http://"+r.adminAddr+tc.path, nil)
		req.Header.Set("If-None-Match", h.Get("ETag"))
		resp, err = http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotModified {
			t.Fatalf("GET %s with its ETag: %d, want 304", tc.path, resp.StatusCode)
		}
	}
	if code, _ := r.get(t, "/ui/missing.js"); code != http.StatusNotFound {
		t.Fatalf("/ui/missing.js: %d, want 404", code)
	}
	// The page has no inline script or style for the policy to allow.
	_, page := r.get(t, "/ui")
	if strings.Contains(page, "<script>") || strings.Contains(page, "style=") || strings.Contains(page, "<style") {
		t.Fatalf("inline script or style in the page")
	}
}

// TestConsoleOffWithoutTokens: without --admin-token-file /ui is 404 like
// the API.
func TestConsoleOffWithoutTokens(t *testing.T) {
	rules := writeRules(t, t.TempDir(), explainRules)
	r := startServe(t, []string{"--config", rules}, nil, hooks{})
	for _, p := range []string{"/ui", "/ui/console.js", "/v1/stats", "/v1/denials"} {
		if code, _ := r.get(t, p); code != http.StatusNotFound {
			t.Fatalf("%s without a token file: %d, want 404", p, code)
		}
	}
}

// TestStats: /v1/stats sums the decision and hit counters per policy.
func TestStats(t *testing.T) {
	r, c := startExplainServer(t, "memory", nil)
	for range 7 {
		rlsHit(t, r, "user", "rawval-stats")
	}
	rlsHit(t, r, "tenant", "rawval-stats-t")
	var ans statsAnswer
	c.decode("GET", "/v1/stats", "", &ans)
	got := map[string]statsEntry{}
	for _, p := range ans.Policies {
		got[p.PolicyID] = p
	}
	if u := got["app/user"]; u.Domain != "app" || u.Decisions != 7 || u.Denials != 2 || u.Hits != 7 || u.ShadowDenials != 0 {
		t.Fatalf("app/user: %+v in %+v", u, ans)
	}
	if len(ans.Policies) != 3 {
		t.Fatalf("%d policies, want app/user and the two tenant limits: %+v", len(ans.Policies), ans)
	}
	c.token = "wrong-token-0123456789"
	if code, _ := c.do("GET", "/v1/stats", ""); code != http.StatusUnauthorized {
		t.Fatalf("wrong token: %d, want 401", code)
	}
}
