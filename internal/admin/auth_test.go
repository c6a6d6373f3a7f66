package admin

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
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
// logged as refused, a right one is served and logged with the token's name
// and never the query; rotation is editing the file.
func TestAdminAuth(t *testing.T) {
	hit := func(h http.Handler, token, target string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, target, nil)
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	mux := func(s *Server) http.Handler {
		m := http.NewServeMux()
		s.handleAPI(m, "GET /v1/probe", "probe", func(w http.ResponseWriter, _ *http.Request) {
			writeText(w, http.StatusOK, "probed")
		})
		return m
	}

	off := &Server{cfg: Config{Log: zap.NewNop()}}
	if code := hit(mux(off), "anything-at-all-0123", "/v1/probe").Code; code != http.StatusNotFound {
		t.Fatalf("without --admin-token-file: %d, want 404", code)
	}

	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte("ops:old-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	core, logs := observer.New(zapcore.InfoLevel)
	auth, err := NewAuth(path, func() time.Time { return now }, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{cfg: Config{Log: zap.New(core), Auth: auth}}
	h := mux(s)
	for _, tc := range []struct {
		token string
		code  int
	}{
		{"", http.StatusUnauthorized},
		{"wrong-token-0123456789", http.StatusUnauthorized},
		{"old-token-0123456789", http.StatusOK},
	} {
		w := hit(h, tc.token, "/v1/probe?descriptor=remote_address=192.0.2.7")
		if w.Code != tc.code {
			t.Fatalf("token %q: %d, want %d", tc.token, w.Code, tc.code)
		}
		if tc.code == http.StatusUnauthorized && !strings.HasPrefix(w.Header().Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("401 without a Bearer challenge: %v", w.Header())
		}
	}
	if n := logs.FilterMessage("admin call refused").Len(); n != 2 {
		t.Errorf("%d refusals logged, want 2", n)
	}
	served := logs.FilterMessage("admin call").All()
	if len(served) != 1 || served[0].ContextMap()["token"] != "ops" || served[0].ContextMap()["action"] != "probe" {
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
	// file is looked at again after tokenRecheck.
	rotate := func(content string, mtime time.Time) {
		t.Helper()
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, mtime, mtime); err != nil {
			t.Fatal(err)
		}
		now = now.Add(tokenRecheck)
	}
	rotate("ops:old-token-0123456789\nops2:new-token-0123456789\n", time.Unix(2000, 0))
	for _, tok := range []string{"old-token-0123456789", "new-token-0123456789"} {
		if code := hit(h, tok, "/v1/probe").Code; code != http.StatusOK {
			t.Errorf("during rotation, %s: %d", tok, code)
		}
	}
	rotate("ops2:new-token-0123456789\n", time.Unix(3000, 0))
	if code := hit(h, "old-token-0123456789", "/v1/probe").Code; code != http.StatusUnauthorized {
		t.Errorf("after rotation the old token: %d, want 401", code)
	}
	// A file that stops parsing keeps the tokens in force.
	rotate("ops2 new-token-0123456789\n", time.Unix(4000, 0))
	if code := hit(h, "new-token-0123456789", "/v1/probe").Code; code != http.StatusOK {
		t.Errorf("after a bad edit, the token in force: %d, want 200", code)
	}
	if logs.FilterMessage("admin token file changed but does not parse; the tokens read before stay in force").Len() != 1 {
		t.Error("the bad edit was not logged")
	}
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
		{filepath.Join(dir, "missing"), "no such file"},
		{big, "larger than"},
		{dir, "not a regular file"},
	} {
		if _, _, err := readTokens(tc.path); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: error %v, want one containing %q", tc.path, err, tc.err)
		}
	}
	toks, _, err := readTokens(last)
	if err != nil || len(toks) != 1 || toks[0].name != "ops" {
		t.Fatalf("a file near the bound: %+v, %v", toks, err)
	}
	if _, err := NewAuth(big, time.Now, zap.NewNop()); err == nil {
		t.Fatal("a start with a token file that does not parse succeeded")
	}
}
