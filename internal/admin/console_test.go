package admin

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestConsoleFilesAndHeaders: /ui and its files are served with the
// security and cache headers, revalidated by ETag, and hold no data.
func TestConsoleFilesAndHeaders(t *testing.T) {
	h := newHarness(t)
	for _, tc := range []struct{ path, ctype string }{
		{"/ui", "text/html; charset=utf-8"},
		{"/ui/console.js", "text/javascript; charset=utf-8"},
		{"/ui/console.css", "text/css; charset=utf-8"},
		{"/ui/favicon.svg", "image/svg+xml"},
	} {
		resp, err := http.Get(h.url + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		hd := resp.Header
		if resp.StatusCode != http.StatusOK || hd.Get("Content-Type") != tc.ctype || hd.Get("X-Content-Type-Options") != "nosniff" ||
			!strings.Contains(hd.Get("Content-Security-Policy"), "script-src 'self'") || strings.Contains(hd.Get("Content-Security-Policy"), "unsafe-inline") ||
			hd.Get("Cache-Control") != "no-cache" || hd.Get("ETag") == "" {
			t.Fatalf("GET %s: %d %v", tc.path, resp.StatusCode, hd)
		}
		req, _ := http.NewRequest("GET", h.url+tc.path, nil)
		req.Header.Set("If-None-Match", hd.Get("ETag"))
		resp, err = http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotModified {
			t.Fatalf("GET %s with its ETag: %d, want 304", tc.path, resp.StatusCode)
		}
	}
	if code, _ := h.do("GET", "/ui/missing.js", ""); code != http.StatusNotFound {
		t.Fatalf("/ui/missing.js: %d, want 404", code)
	}
	// The page has no inline script or style for the policy to allow.
	_, page := h.do("GET", "/ui", "")
	if strings.Contains(page, "<script>") || strings.Contains(page, "style=") || strings.Contains(page, "<style") {
		t.Fatalf("inline script or style in the page")
	}
}

// TestStats: /v1/stats sums the decision and hit counters per policy.
func TestStats(t *testing.T) {
	h := newHarness(t)
	for range 7 {
		h.hit("user", "rawval-stats")
	}
	h.hit("tenant", "rawval-stats-t")
	var ans statsAnswer
	h.decode("GET", "/v1/stats", "", &ans)
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
	h.token = "wrong-token-0123456789"
	if code, _ := h.do("GET", "/v1/stats", ""); code != http.StatusUnauthorized {
		t.Fatalf("wrong token: %d, want 401", code)
	}
}

func TestPprofOnlyWhenAsked(t *testing.T) {
	off := newHarness(t)
	if code, _ := off.do("GET", "/debug/pprof/", ""); code != http.StatusNotFound {
		t.Fatalf("/debug/pprof/ without Pprof: %d, want 404", code)
	}
	on := newHarness(t, withPprof)
	if code, body := on.do("GET", "/debug/pprof/", ""); code != 200 || !strings.Contains(body, "goroutine") {
		t.Fatalf("/debug/pprof/ with Pprof: %d %q", code, body)
	}
	if code, _ := on.do("GET", "/debug/pprof/allocs?debug=1", ""); code != 200 {
		t.Fatalf("/debug/pprof/allocs with Pprof: %d", code)
	}
	if code, body := on.do("GET", "/debug/pprof/profile?seconds=1", ""); code != 200 || len(body) == 0 {
		t.Fatalf("/debug/pprof/profile with Pprof: %d, %d bytes", code, len(body))
	}
	if code, _ := on.do("GET", "/debug/pprof/profile?seconds=0", ""); code != http.StatusBadRequest {
		t.Fatalf("/debug/pprof/profile?seconds=0: %d, want 400", code)
	}
	// Never on the default mux: another listener must not see them.
	if _, pattern := http.DefaultServeMux.Handler(httptest.NewRequest("GET", "/debug/pprof/", nil)); pattern != "" {
		t.Fatalf("pprof registered on http.DefaultServeMux (pattern %q)", pattern)
	}
}

// TestConsoleWritesText: the console's script puts answers in the page as
// text: no API that parses a string as markup.
func TestConsoleWritesText(t *testing.T) {
	js, err := consoleFiles.ReadFile("ui/console.js")
	if err != nil {
		t.Fatal(err)
	}
	for _, sink := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "DOMParser", "createContextualFragment", "eval("} {
		if strings.Contains(string(js), sink) {
			t.Errorf("console.js uses %s: put data in the page with textContent", sink)
		}
	}
}
