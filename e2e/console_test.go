package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
)

// consoleRules has a plain limit and a penalty box, so that the page shows
// both, and the explain answer a count.
const consoleRules = `domain: e2e
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: login
    rate_limit:
      unit: minute
      requests_per_unit: 3
      penalty: {duration: 10m}
`

// chromium returns Debian's headless browser, skipping the test without
// one, failing it with CI=true (scripts/ensure-deps.sh installs it).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is not on PATH and CI=true: run scripts/ensure-deps.sh")
	}
	t.Skip("chromium is not on PATH (scripts/ensure-deps.sh installs it)")
	return ""
}

// TestConsoleInABrowser: headless Chromium signs in to /ui of the real
// binary with a token, sees the rules with their policy IDs, the decision
// counters, the top consumers and the recent denials, submits an explain
// request and reads the answer in the DOM, with no script error and no
// raw value in the page's answers. The screenshot is saved in the test's
// artifact directory (go test -artifacts), and into docs/img/console.png
// with ENVOY_RLS_UPDATE_SCREENSHOT=1.
func TestConsoleInABrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e")
	}
	browser := chromium(t)
	onEachStore(t, func(t *testing.T, cfg replicaConfig, redis *redistest.Server) {
		checkConsole(t, browser, cfg, redis == nil)
	})
}

// checkConsole runs the browser against a replica of cfg's store;
// screenshot: the one to copy to docs/img with ENVOY_RLS_UPDATE_SCREENSHOT=1.
func checkConsole(t *testing.T, browser string, cfg replicaConfig, screenshot bool) {
	dir := t.TempDir()
	cfg.Rules, cfg.Secret = rulesDir(t, consoleRules), secretFile(t)
	cfg.Args = []string{"--admin-token-file", tokenFile(t), "--audit-sink", "file", "--audit-file", filepath.Join(dir, "audit.jsonl")}
	awayFromHourBoundary(t)
	r := startReplica(t, "console", cfg)
	user, login := unique("rawval-console"), unique("rawval-login")
	r.checkAdmits(t, entry{"user", user}, 5, 7)
	// The fourth login call of a limit of 3 puts the subject in the box.
	r.checkAdmits(t, entry{"login", login}, 3, 4)
	base := "http://" + r.adminAddr

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browser), chromedp.NoSandbox,
		chromedp.WindowSize(1280, 1400), chromedp.Flag("disable-gpu", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	var mu sync.Mutex
	var problems []string
	listen := chromedp.WithListener(func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch ev := ev.(type) {
		case *runtime.EventExceptionThrown:
			problems = append(problems, "exception: "+ev.ExceptionDetails.Text)
		case *cdplog.EventEntryAdded:
			if ev.Entry.Level == cdplog.EntryLevelError {
				problems = append(problems, "log: "+ev.Entry.Text)
			}
		}
	})
	ctx, cancelBrowser := chromedp.NewContext(actx, listen)
	defer cancelBrowser()
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()

	text := func(sel string) string {
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("browser: the text of %s: %v\nreplica log:\n%s", sel, err, r.log.tail(40))
		}
		return s
	}
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatalf("browser: %s: %v\nreplica log:\n%s", what, err, r.log.tail(40))
		}
	}
	if _, err := chromedp.Call(ctx, cdplog.Enable, cdp.Empty{}); err != nil {
		t.Fatalf("browser: Log.enable: %v", err)
	}
	do("sign in",
		chromedp.Navigate(base+"/ui"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), adminToken),
		chromedp.Click(chromedp.CSS("#login-form button")),
		chromedp.WaitVisible(chromedp.CSS("#rules table")),
		// The first refresh has filled the tables.
		chromedp.WaitVisible(chromedp.CSS("#denials tbody td.num")),
	)
	rules, stats, top, denials := text("#rules"), text("#stats"), text("#top"), text("#denials")
	do("explain",
		chromedp.SetValue(chromedp.CSS("#explain-descriptors"), "user="+user+"\nlogin="+login),
		chromedp.Click(chromedp.CSS("#explain-form button")),
		chromedp.WaitVisible(chromedp.CSS("#explain-json")),
	)
	result, explainJSON := text("#explain-result"), text("#explain-json")
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("browser: screenshot: %v", err)
	}
	for _, want := range []string{"e2e/user", "e2e/login", "5 / hour", "penalty 10m", "rules.yaml:"} {
		if !strings.Contains(rules, want) {
			t.Errorf("the rules section lacks %q:\n%s", want, rules)
		}
	}
	if !strings.Contains(stats, "e2e/user") || !strings.Contains(top, "e2e/user") {
		t.Errorf("stats or top lack the policy:\n%s\n%s", stats, top)
	}
	if !strings.Contains(denials, "over_limit") || strings.Count(denials, "e2e/user") != 2 {
		t.Errorf("recent denials, want the 2 denials of e2e/user:\n%s", denials)
	}
	// 7 calls on a limit of 5: nothing remains; the login subject is in
	// its penalty box. The page shows both, and the answer it received.
	var ans explainAnswer
	if err := json.Unmarshal([]byte(explainJSON), &ans); err != nil || len(ans.Descriptors) != 2 ||
		len(ans.Descriptors[0].Limits) != 1 || len(ans.Descriptors[1].Limits) != 1 {
		t.Fatalf("the explain answer in the page: %v\n%s", err, explainJSON)
	}
	u, l := ans.Descriptors[0], ans.Descriptors[1]
	if u.PolicyID != "e2e/user" || u.Rule.Line != 3 || u.Limits[0].Remaining == nil || *u.Limits[0].Remaining != 0 || u.Limits[0].Blocked != nil {
		t.Errorf("the user descriptor, want e2e/user at line 3 with 0 remaining and no penalty: %s", explainJSON)
	}
	if b := l.Limits[0]; l.PolicyID != "e2e/login" || b.Blocked == nil || !*b.Blocked || b.BlockedMs == nil || *b.BlockedMs <= 0 {
		t.Errorf("the login descriptor, want blocked: %s", explainJSON)
	}
	if !strings.Contains(result, "descriptor 1: matched e2e/user") || !strings.Contains(result, "descriptor 2: matched e2e/login") ||
		!strings.Contains(result, fmt.Sprintf("yes, %d ms left", *l.Limits[0].BlockedMs)) {
		t.Errorf("the explain section of the page:\n%s", result)
	}
	for _, text := range []string{rules, stats, top, denials, result, explainJSON} {
		if strings.Contains(text, user) || strings.Contains(text, login) {
			t.Errorf("a raw value in the page's answers:\n%s", text)
		}
	}
	mu.Lock()
	if len(problems) > 0 {
		t.Errorf("the page reported problems (a CSP violation is one):\n%s", strings.Join(problems, "\n"))
	}
	mu.Unlock()
	shot := filepath.Join(t.ArtifactDir(), "console.png")
	if err := os.WriteFile(shot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", shot, len(png))
	if screenshot && os.Getenv("ENVOY_RLS_UPDATE_SCREENSHOT") == "1" {
		if err := os.WriteFile(filepath.Join("..", "docs", "img", "console.png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Without the token the API refuses the page's calls.
	if code, _, err := r.admin("/v1/stats"); err != nil || code != http.StatusUnauthorized {
		t.Errorf("/v1/stats without a token: %d %v, want 401", code, err)
	}
}
