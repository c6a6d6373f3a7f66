package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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

// consoleRoutes is the number of per-route rules of consoleRules: a rule
// set as long as a real one, above which the live sections must stay.
const consoleRoutes = 44

// consoleRules has a plain limit, a penalty box, a budget over 15 minutes
// (unit_multiplier) that requests reserve, and consoleRoutes rules more,
// so that the page shows them all, and the explain answer a count.
func consoleRules() string {
	var b strings.Builder
	b.WriteString(`domain: e2e
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: login
    rate_limit:
      unit: minute
      requests_per_unit: 3
      penalty: {duration: 10m}
  - key: tenant
    rate_limit: {unit: minute, unit_multiplier: 15, requests_per_unit: 5, reserve: {ttl: 10m}}
  - key: route
    descriptors:
`)
	for i := range consoleRoutes {
		fmt.Fprintf(&b, "      - {key: method, value: m%02d, rate_limit: {unit: second, requests_per_unit: %d}}\n", i, 100+i)
	}
	return b.String()
}

// consoleDuration is how the console writes a duration of ms milliseconds
// (fmtMs in internal/admin/ui/console.js): "850 ms", "4.2s", "13m 56s",
// "2h", at most two units, cut rather than rounded.
func consoleDuration(ms int64) string {
	switch {
	case ms < 1000:
		return fmt.Sprintf("%d ms", max(ms, 0))
	case ms < 10_000:
		if ms/100%10 == 0 {
			return fmt.Sprintf("%ds", ms/1000)
		}
		return fmt.Sprintf("%d.%ds", ms/1000, ms/100%10)
	}
	units := []struct {
		secs int64
		name string
	}{{86400, "d"}, {3600, "h"}, {60, "m"}, {1, "s"}}
	s := ms / 1000
	for i, u := range units {
		if s < u.secs {
			continue
		}
		out := fmt.Sprintf("%d%s", s/u.secs, u.name)
		if i+1 < len(units) {
			if n := s % u.secs / units[i+1].secs; n > 0 {
				out += fmt.Sprintf(" %d%s", n, units[i+1].name)
			}
		}
		return out
	}
	return ""
}

func TestConsoleDuration(t *testing.T) {
	for ms, want := range map[int64]string{0: "0 ms", 850: "850 ms", 1000: "1s", 4250: "4.2s", 10_000: "10s", 60_000: "1m",
		836_185: "13m 56s", 3_600_000: "1h", 3_661_000: "1h 1m", 90_061_000: "1d 1h"} {
		if got := consoleDuration(ms); got != want {
			t.Errorf("consoleDuration(%d) = %q, want %q", ms, got, want)
		}
	}
}

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
	cfg.Rules, cfg.Secret = rulesDir(t, consoleRules()), secretFile(t)
	cfg.Args = []string{"--admin-token-file", tokenFile(t), "--audit-sink", "file", "--audit-file", filepath.Join(dir, "audit.jsonl")}
	awayFromHourBoundary(t)
	r := startReplica(t, "console", cfg)
	user, login, tenant := unique("rawval-console"), unique("rawval-login"), unique("rawval-tenant")
	r.checkAdmits(t, entry{"user", user}, 5, 7)
	// The fourth login call of a limit of 3 puts the subject in the box.
	r.checkAdmits(t, entry{"login", login}, 3, 4)
	r.checkAdmits(t, entry{"tenant", tenant}, 2, 2)
	base := "http://" + r.adminAddr

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browser), chromedp.NoSandbox,
		chromedp.WindowSize(1280, consoleScreenHeight), chromedp.Flag("disable-gpu", true))
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
	// RLQS is on by default; no proxy has opened a stream here.
	if q := text("#rlqs-section"); !strings.Contains(q, "0 proxy stream(s)") || !strings.Contains(q, "no RLQS bucket reported yet") {
		t.Errorf("the RLQS section: %q", q)
	}
	checkConsoleLayout(t, ctx)
	do("explain",
		chromedp.SetValue(chromedp.CSS("#explain-descriptors"), "user="+user+"\nlogin="+login+"\ntenant="+tenant),
		chromedp.Click(chromedp.CSS("#explain-form button")),
		chromedp.WaitVisible(chromedp.CSS("#explain-json")),
	)
	result, explainJSON := text("#explain-result"), text("#explain-json")
	cells, err := chromedp.Run(ctx, chromedp.Evaluate[[][]string](`Array.from(document.querySelectorAll("#explain-result table tbody tr"), (tr) => Array.from(tr.cells, (td) => td.textContent))`))
	if err != nil {
		t.Fatalf("browser: the explain tables' cells: %v", err)
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("browser: screenshot: %v", err)
	}
	for _, want := range []string{"e2e/user", "e2e/login", "5 / hour", "penalty 10m", "rules.yaml:", "5 / 15 minutes", "e2e/tenant"} {
		if !strings.Contains(rules, want) {
			t.Errorf("the rules section lacks %q:\n%s", want, rules)
		}
	}
	if strings.Contains(rules, "10m0s") {
		t.Errorf("the rules section writes the penalty as Go does (10m0s), want 10m:\n%s", rules)
	}
	if !strings.Contains(stats, "e2e/user") || !strings.Contains(top, "e2e/user") {
		t.Errorf("stats or top lack the policy:\n%s\n%s", stats, top)
	}
	if !strings.Contains(denials, "over_limit") || strings.Count(denials, "e2e/user") != 2 {
		t.Errorf("recent denials, want the 2 denials of e2e/user:\n%s", denials)
	}
	if rawMs.MatchString(denials) {
		t.Errorf("recent denials: a retry-after in raw milliseconds, want a duration such as 13m 56s:\n%s", denials)
	}
	// 7 calls on a limit of 5: nothing remains; the login subject is in
	// its penalty box. The page shows both, and the answer it received.
	var ans explainAnswer
	if err := json.Unmarshal([]byte(explainJSON), &ans); err != nil || len(ans.Descriptors) != 3 ||
		len(ans.Descriptors[0].Limits) != 1 || len(ans.Descriptors[1].Limits) != 1 || len(ans.Descriptors[2].Limits) != 1 {
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
		!strings.Contains(result, "descriptor 3: matched e2e/tenant") {
		t.Errorf("the explain section of the page:\n%s", result)
	}
	checkExplainCells(t, cells, ans)
	for _, text := range []string{rules, stats, top, denials, result, explainJSON} {
		if strings.Contains(text, user) || strings.Contains(text, login) || strings.Contains(text, tenant) {
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

// consoleScreenHeight is the browser's window height, a laptop's screen;
// the page gets what the window's frame leaves.
const consoleScreenHeight = 900

// rawMs is a duration of a second or more written in milliseconds.
var rawMs = regexp.MustCompile(`\b\d{4,} ms\b`)

// checkConsoleLayout: with the rules of consoleRules loaded, the live
// sections (decisions per policy, recent denials, top consumers) start on
// the first screen, above the rules, and every rule is in the rules
// section.
func checkConsoleLayout(t *testing.T, ctx context.Context) {
	t.Helper()
	layout, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]float64](`(() => {
  const box = (id) => document.getElementById(id).getBoundingClientRect();
  return { screen: window.innerHeight, scrolled: window.scrollY, statsBottom: box("stats").bottom, denials: box("denials-section").top,
    top: box("top-section").top, rules: box("rules-section").top, ruleRows: document.querySelectorAll("#rules tbody tr").length };
})()`))
	if err != nil {
		t.Fatalf("browser: the layout: %v", err)
	}
	screen := layout["screen"]
	if layout["scrolled"] != 0 || screen <= 0 || screen > consoleScreenHeight {
		t.Fatalf("the layout, want the first screen unscrolled: %v", layout)
	}
	if layout["statsBottom"] > screen || layout["denials"] >= screen || layout["top"] >= screen {
		t.Errorf("the live sections are not on the first screen (%v px) with %d rules: %v", screen, consoleRoutes+3, layout)
	}
	if layout["rules"] < layout["top"] {
		t.Errorf("the rules are above the live sections: %v", layout)
	}
	if int(layout["ruleRows"]) != consoleRoutes+3 {
		t.Errorf("the rules section shows %v rules, want %d", layout["ruleRows"], consoleRoutes+3)
	}
}

// checkExplainCells: the explain tables of the page (rows: user, login,
// tenant; columns: policy ID, limit, algorithm, remaining, reset, allowed,
// blocked) write limits as configured (5 / 15 minutes) and durations as
// consoleDuration does, from the answer the page received.
func checkExplainCells(t *testing.T, cells [][]string, ans explainAnswer) {
	t.Helper()
	if len(cells) != 3 || len(cells[0]) != 7 || len(cells[1]) != 7 || len(cells[2]) != 7 {
		t.Fatalf("the explain tables' cells, want 3 rows of 7: %q", cells)
	}
	user, login, tenant := ans.Descriptors[0].Limits[0], ans.Descriptors[1].Limits[0], ans.Descriptors[2].Limits[0]
	// The tenant's two calls each reserved 1 of its budget, still held.
	if tenant.Remaining == nil || tenant.Reserved == nil || tenant.Charged == nil || *tenant.Reserved != 2 || *tenant.Charged != 0 || *tenant.Remaining != 3 {
		t.Fatalf("the tenant's explain answer: remaining %v, reserved %v, charged %v, want 3, 2, 0", tenant.Remaining, tenant.Reserved, tenant.Charged)
	}
	for _, c := range []struct {
		what, got, want string
	}{
		{"user limit", cells[0][1], "5 / hour"},
		{"user reset", cells[0][4], consoleDuration(*user.ResetMs)},
		{"login blocked", cells[1][6], "yes, " + consoleDuration(*login.BlockedMs) + " left"},
		{"tenant limit", cells[2][1], "5 / 15 minutes, reserve hits_addend for 10m"},
		{"tenant remaining", cells[2][3], fmt.Sprintf("%d (%d reserved, %d charged)", *tenant.Remaining, *tenant.Reserved, *tenant.Charged)},
		{"tenant reset", cells[2][4], consoleDuration(*tenant.ResetMs)},
	} {
		if c.got != c.want {
			t.Errorf("explain, %s: the page shows %q, want %q (all cells: %q)", c.what, c.got, c.want, cells)
		}
	}
	for _, row := range cells {
		for _, cell := range row {
			if rawMs.MatchString(cell) {
				t.Errorf("explain: %q is raw milliseconds, want a duration such as 13m 56s", cell)
			}
		}
	}
}
