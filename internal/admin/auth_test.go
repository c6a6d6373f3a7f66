package admin

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/envoy-rls/envoy-rls/internal/limitertest"
	"github.com/envoy-rls/envoy-rls/internal/metricstest"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/memory"
	"github.com/envoy-rls/envoy-rls/pkg/topk"
)

func TestParseTokens(t *testing.T) {
	for _, tc := range []struct{ name, file, err string }{
		{"two tokens, comments and blanks", "# rotation\nalice:0123456789abcdef\n\n bob:fedcba9876543210zz \n", ""},
		{"no colon", "alice0123456789abcdef\n", "f:1: want name:token"},
		{"bad name", "al ice:0123456789abcdef\n", "f:1: the name must be"},
		{"short token", "alice:short\n", `f:1: token "alice": at least 16 characters`},
		{"space in token", "alice:0123456789 abcdef\n", "no spaces"},
		{"name twice", "a:0123456789abcdef\na:0123456789abcdeg\n", `f:2: the name "a" is used twice`},
		{"token twice", "a:0123456789abcdef\nb:0123456789abcdef\n", `f:2: token "b" repeats an earlier token`},
		{"empty", "# nothing\n", "f: no token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			toks, err := parseTokens("f", []byte(tc.file))
			if tc.err == "" {
				if err != nil || len(toks) != 2 || toks[0].name != "alice" || toks[1].name != "bob" {
					t.Fatalf("tokens %+v, error %v", toks, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("error %v, want one containing %q", err, tc.err)
			}
		})
	}
}

func TestClientToken(t *testing.T) {
	for _, tc := range []struct {
		file, want string
		ok         bool
	}{
		{"# a comment\nbare-token-0123456789\n", "bare-token-0123456789", true},
		{"ops:named-token-0123456789\nother:x-0123456789abcdef\n", "named-token-0123456789", true},
		{"# only a comment\n\n", "", false},
	} {
		if got, ok := ClientToken([]byte(tc.file)); got != tc.want || ok != tc.ok {
			t.Errorf("%q: %q, %v; want %q, %v", tc.file, got, ok, tc.want, tc.ok)
		}
	}
}

// TestAdminAuth: without a token file an admin endpoint does not exist
// (404); with one, a call without a token or with a wrong one is 401 and
// logged as refused with the caller's address, a right one is served and
// logged with the token's name and never the query; rotation is editing
// the file.
func TestAdminAuth(t *testing.T) {
	mux := func(s *Server) http.Handler {
		m := http.NewServeMux()
		s.handleAPI(m, "GET /v1/probe", "probe", func(w http.ResponseWriter, _ *http.Request) {
			writeText(w, http.StatusOK, "probed")
		})
		return m
	}

	off := &Server{cfg: Config{Log: zap.NewNop()}}
	if code := hitWith(mux(off), "anything-at-all-0123", "/v1/probe").Code; code != http.StatusNotFound {
		t.Fatalf("without --admin-token-file: %d, want 404", code)
	}

	path := writeTokens(t, "", "ops:old-token-0123456789\n", 0o600)
	clock := limitertest.NewClock(time.Unix(1000, 0))
	core, logs := observer.New(zapcore.InfoLevel)
	s, _ := authServer(t, path, clock, zap.New(core))
	h := mux(s)
	for _, tc := range []struct {
		token string
		code  int
	}{
		{"", http.StatusUnauthorized},
		{"wrong-token-0123456789", http.StatusUnauthorized},
		{"old-token-0123456789", http.StatusOK},
	} {
		w := hitWith(h, tc.token, "/v1/probe?descriptor=remote_address=192.0.2.7")
		if w.Code != tc.code {
			t.Fatalf("token %q: %d, want %d", tc.token, w.Code, tc.code)
		}
		if tc.code == http.StatusUnauthorized && !strings.HasPrefix(w.Header().Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("401 without a Bearer challenge: %v", w.Header())
		}
	}
	refused := logs.FilterMessage(MsgRefused).All()
	if len(refused) != 2 || refused[0].ContextMap()["client"] != "192.0.2.1:1234" || refused[1].ContextMap()["reason"] != refusedWrongToken {
		t.Errorf("refusals logged: %+v", refused)
	}
	served := logs.FilterMessage("admin call").All()
	if len(served) != 1 || served[0].ContextMap()["token"] != "ops" || served[0].ContextMap()["action"] != "probe" || served[0].ContextMap()["client"] != "192.0.2.1:1234" {
		t.Fatalf("served calls logged: %+v", served)
	}
	for _, e := range logs.All() {
		for k, v := range e.ContextMap() {
			if strings.Contains(k+" "+toString(v), "192.0.2.7") {
				t.Errorf("a raw descriptor value in the log: %s=%v", k, v)
			}
		}
	}

	// Rotation: both tokens while clients move, then only the new one. The
	// file is looked at again after TickInterval.
	rotate := func(content string) {
		t.Helper()
		writeTokens(t, path, content, 0o600)
		clock.Advance(TickInterval)
	}
	rotate("ops:old-token-0123456789\nops2:new-token-0123456789\n")
	for _, tok := range []string{"old-token-0123456789", "new-token-0123456789"} {
		if code := hitWith(h, tok, "/v1/probe").Code; code != http.StatusOK {
			t.Errorf("during rotation, %s: %d", tok, code)
		}
	}
	rotate("ops2:new-token-0123456789\n")
	if code := hitWith(h, "old-token-0123456789", "/v1/probe").Code; code != http.StatusUnauthorized {
		t.Errorf("after rotation the old token: %d, want 401", code)
	}
	if n := logs.FilterMessage(MsgTokenFileReread).Len(); n != 2 {
		t.Errorf("%d rereads logged, want 2 (one per change)", n)
	}
}

// TestTokenFileFailsClosed: each way of breaking the token file while
// serving (emptied, the line commented out, deleted, a malformed line,
// made readable by others, made a directory) leaves no token in force: 401
// with the reason no_token_in_force, /healthz names the problem (never the
// token), the gauges say 0, and exactly one error line is logged per
// change however many rereads see it. A valid file restores the tokens.
func TestTokenFileFailsClosed(t *testing.T) {
	const good = "ops:right-token-0123456789\n"
	path := writeTokens(t, "", good, 0o600)
	clock := limitertest.NewClock(time.Unix(1000, 0))
	core, logs := observer.New(zapcore.InfoLevel)
	s, reg := authServer(t, path, clock, zap.New(core))
	h := s.Handler()
	for _, tc := range []struct {
		name, problem string
		breakIt       func()
	}{
		{"emptied", "no token", func() { writeTokens(t, path, "", 0o600) }},
		{"commented out", "no token", func() { writeTokens(t, path, "# ops:right-token-0123456789\n", 0o600) }},
		{"deleted", "does not exist", func() { must(t, os.Remove(path)) }},
		{"malformed", ":1: want name:token", func() { writeTokens(t, path, "ops right-token-0123456789\n", 0o600) }},
		{"readable by others", "mode 0644 lets group or others use it: chmod 600", func() { must(t, os.Chmod(path, 0o644)) }},
		{"readable by the group", "mode 0640", func() { must(t, os.Chmod(path, 0o640)) }},
		{"a directory", "not a regular file", func() { must(t, os.Remove(path)); must(t, os.Mkdir(path, 0o700)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errorsBefore := logs.FilterMessage(MsgTokenFileRefused).Len()
			tc.breakIt()
			for range 3 { // three rereads of one bad state: one line
				clock.Advance(TickInterval)
				s.Tick(clock.Now())
				w := hitWith(h, "right-token-0123456789", "/v1/stats")
				if w.Code != http.StatusUnauthorized || !strings.Contains(w.Body.String(), "no admin token in force") {
					t.Fatalf("with the file %s: %d %q, want 401", tc.name, w.Code, w.Body)
				}
			}
			body := hitWith(h, "", "/healthz").Body.String()
			if !strings.Contains(body, "admin tokens: none in force: ") || !strings.Contains(body, tc.problem) || strings.Contains(body, "right-token") {
				t.Fatalf("/healthz: %q, want the problem %q", body, tc.problem)
			}
			if ok, n := metricstest.Value(t, reg, "envoy_rls_admin_token_file_ok"), metricstest.Value(t, reg, "envoy_rls_admin_tokens"); ok != 0 || n != 0 {
				t.Fatalf("token_file_ok %v, tokens %v; want 0, 0", ok, n)
			}
			if n := logs.FilterMessage(MsgTokenFileRefused).Len() - errorsBefore; n != 1 {
				t.Fatalf("%d error lines for one change, want 1", n)
			}
			// A valid file again: the token is back.
			if fi, err := os.Stat(path); err == nil && fi.IsDir() {
				must(t, os.Remove(path))
			}
			writeTokens(t, path, good, 0o600)
			clock.Advance(TickInterval)
			s.Tick(clock.Now())
			if code := hitWith(h, "right-token-0123456789", "/v1/stats").Code; code != http.StatusOK {
				t.Fatalf("after the fix: %d, want 200", code)
			}
			if body := hitWith(h, "", "/healthz").Body.String(); !strings.Contains(body, "admin tokens: 1 in force") {
				t.Fatalf("/healthz after the fix: %q", body)
			}
			if ok := metricstest.Value(t, reg, "envoy_rls_admin_token_file_ok"); ok != 1 {
				t.Fatalf("token_file_ok %v after the fix", ok)
			}
		})
	}
	if n := logs.FilterMessage(MsgTokenFileValid).Len(); n != 7 {
		t.Errorf("%d %q lines, want 7", n, MsgTokenFileValid)
	}
	if v := metricstest.Value(t, reg, "envoy_rls_admin_refused_total", "reason", refusedNoneInForce); v != 21 {
		t.Errorf("refused no_token_in_force %v, want 21", v)
	}
}

// TestTokenFileBadAtStart: a file that is bad at start stops the start with
// an error that says what to fix.
func TestTokenFileBadAtStart(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, content string
		mode          os.FileMode
		want          string
	}{
		{"world-readable", "ops:right-token-0123456789\n", 0o644, "chmod 600"},
		{"empty", "", 0o600, "write one name:token line"},
		{"missing", "", 0, "does not exist: create it"},
	} {
		path := filepath.Join(dir, tc.name)
		if tc.mode != 0 {
			writeTokens(t, path, tc.content, tc.mode)
		}
		_, err := NewAuth(AuthConfig{Path: path, Log: zap.NewNop()})
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: %v, want an error naming %s and %q", tc.name, err, path, tc.want)
		}
	}
}

// writeTokens writes content to path (a new file in a temporary directory
// when ""), then sets mode, and returns the path.
func writeTokens(t *testing.T, path, content string, mode os.FileMode) string {
	t.Helper()
	if path == "" {
		path = filepath.Join(t.TempDir(), "tokens")
	}
	must(t, os.WriteFile(path, []byte(content), 0o600))
	must(t, os.Chmod(path, mode))
	return path
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// authServer is a Server with the token file at path on clock, over the
// test rules and the memory store.
func authServer(t *testing.T, path string, clock *limitertest.Clock, log *zap.Logger) (*Server, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	auth, err := NewAuth(AuthConfig{Path: path, Now: clock.Now, Log: log, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := descriptors.Load("testdata/rules.yaml", descriptors.Options{Secret: []byte("a-shared-secret-of-32-bytes-----")})
	if err != nil {
		t.Fatal(err)
	}
	st, err := memory.New(memory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	top, err := topk.Start(&topk.Flags{}, reg)
	if err != nil {
		t.Fatal(err)
	}
	state, err := NewStoreState("memory", nil, reg, log)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Rules: staticRules{snap}, Store: st, StoreState: state, Registry: reg, Top: top, Log: log, Auth: auth, Now: clock.Now,
		ConfigView: func(full bool) any { return map[string]bool{"full": full} }})
	if err != nil {
		t.Fatal(err)
	}
	return s, reg
}

// hitWith serves a GET of target with the bearer token (none when "") from
// 192.0.2.1:1234.
func hitWith(h http.Handler, token, target string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, target, nil)
	r.RemoteAddr = "192.0.2.1:1234"
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func toString(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return ""
}

// TestReadTokens: the token file is read whole up to its bound, and a file
// that is missing, too large or not a regular file is refused with its path.
func TestReadTokens(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big")
	var b strings.Builder
	for i := 0; b.Len() <= maxTokenFileBytes; i++ {
		b.WriteString("# padding line to make the file larger than its bound\n")
	}
	b.WriteString("ops:0123456789abcdef\n")
	if err := os.WriteFile(big, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	last := filepath.Join(dir, "last")
	// A file just under the bound whose only token is on its last line.
	content := strings.Repeat("#\n", (maxTokenFileBytes-64)/2) + "ops:0123456789abcdef\n"
	if err := os.WriteFile(last, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, err string }{
		{filepath.Join(dir, "missing"), "does not exist"},
		{big, "larger than"},
		{dir, "not a regular file"},
	} {
		if _, err := readTokens(tc.path); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: error %v, want one containing %q", tc.path, err, tc.err)
		}
	}
	toks, err := readTokens(last)
	if err != nil || len(toks) != 1 || toks[0].name != "ops" {
		t.Fatalf("a file near the bound: %+v, %v", toks, err)
	}
	if _, err := NewAuth(AuthConfig{Path: big, Log: zap.NewNop()}); err == nil {
		t.Fatal("a start with a token file that does not parse succeeded")
	}
}
