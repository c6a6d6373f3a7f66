package admin

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Bounds of the token file.
const (
	// maxTokenFileBytes bounds the file read.
	maxTokenFileBytes = 64 << 10
	// maxAdminTokens bounds the tokens of one file (a few per rotation).
	maxAdminTokens = 64
	// MinTokenLen refuses tokens short enough to guess.
	MinTokenLen = 16
	// tokenRecheck is how often the file's size and modification time are
	// looked at to pick up a rotation.
	tokenRecheck = time.Second
)

// tokenName is what the admin log shows for a token.
var tokenName = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// adminToken is one accepted token: its name and the SHA-256 of its value.
type adminToken struct {
	name string
	sum  [sha256.Size]byte
}

// parseTokens reads a token file: one `name:token` per line; blank
// lines and lines starting with # are ignored. Names and tokens are unique;
// a token has at least MinTokenLen characters and no spaces.
func parseTokens(path string, b []byte) ([]adminToken, error) {
	var out []adminToken
	names := map[string]bool{}
	sums := map[[sha256.Size]byte]bool{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		name, token, ok := strings.Cut(text, ":")
		switch {
		case !ok:
			return nil, fmt.Errorf("%s:%d: want name:token", path, line)
		case !tokenName.MatchString(name):
			return nil, fmt.Errorf("%s:%d: the name must be 1 to 64 of [A-Za-z0-9._-]", path, line)
		case len(token) < MinTokenLen || strings.ContainsAny(token, " \t"):
			return nil, fmt.Errorf("%s:%d: token %q: at least %d characters, no spaces", path, line, name, MinTokenLen)
		case names[name]:
			return nil, fmt.Errorf("%s:%d: the name %q is used twice", path, line, name)
		}
		sum := sha256.Sum256([]byte(token))
		if sums[sum] {
			return nil, fmt.Errorf("%s:%d: token %q repeats an earlier token", path, line, name)
		}
		if len(out) == maxAdminTokens {
			return nil, fmt.Errorf("%s: more than %d tokens", path, maxAdminTokens)
		}
		names[name], sums[sum] = true, true
		out = append(out, adminToken{name: name, sum: sum})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no token (one name:token per line)", path)
	}
	return out, nil
}

// ClientToken is the token a client of the admin API sends, read from its
// own token file b: the first line that is neither blank nor a comment,
// either the token alone or a name:token line of an --admin-token-file.
// ok is false when there is no such line.
func ClientToken(b []byte) (token string, ok bool) {
	for line := range strings.Lines(string(b)) {
		text := strings.TrimSpace(line)
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		if name, tok, named := strings.Cut(text, ":"); named && tokenName.MatchString(name) && len(tok) >= MinTokenLen {
			return tok, true
		}
		return text, true
	}
	return "", false
}

// readTokens reads and parses the token file, bounded in size.
func readTokens(path string) ([]adminToken, os.FileInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("admin token file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, fmt.Errorf("admin token file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, nil, fmt.Errorf("admin token file %s: not a regular file", path)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxTokenFileBytes+1))
	if err != nil {
		return nil, nil, fmt.Errorf("admin token file %s: %w", path, err)
	}
	if len(b) > maxTokenFileBytes {
		return nil, nil, fmt.Errorf("admin token file %s: larger than %d bytes", path, maxTokenFileBytes)
	}
	toks, err := parseTokens(path, b)
	return toks, fi, err
}

// Auth checks the bearer tokens of the admin API. The file is read at
// start (a bad file stops the start) and again when its size or
// modification time changes: rotation is editing the file, with the old and
// the new token side by side until every client has the new one. A changed
// file that does not parse keeps the tokens in force and is logged.
type Auth struct {
	path  string
	now   func() time.Time
	log   *zap.Logger
	mu    sync.Mutex
	toks  []adminToken
	mod   time.Time
	size  int64
	check time.Time
}

// NewAuth reads the token file at path; nil, nil when path is empty.
func NewAuth(path string, now func() time.Time, log *zap.Logger) (*Auth, error) {
	if path == "" {
		return nil, nil
	}
	toks, fi, err := readTokens(path)
	if err != nil {
		return nil, err
	}
	return &Auth{path: path, now: now, log: log, toks: toks, mod: fi.ModTime(), size: fi.Size(), check: now()}, nil
}

// tokens returns the tokens in force, re-reading a changed file at most once
// per tokenRecheck.
func (a *Auth) tokens() []adminToken {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.now()
	if now.Sub(a.check) < tokenRecheck {
		return a.toks
	}
	a.check = now
	fi, err := os.Stat(a.path)
	if err != nil {
		a.log.Error("admin token file unreadable; the tokens read before stay in force", zap.Error(err))
		return a.toks
	}
	if fi.ModTime().Equal(a.mod) && fi.Size() == a.size {
		return a.toks
	}
	a.mod, a.size = fi.ModTime(), fi.Size()
	toks, _, err := readTokens(a.path)
	if err != nil {
		a.log.Error("admin token file changed but does not parse; the tokens read before stay in force", zap.Error(err))
		return a.toks
	}
	a.toks = toks
	a.log.Info("admin token file read again", zap.Int("tokens", len(toks)))
	return a.toks
}

// errNoToken and errWrongToken are the two reasons for a 401.
var (
	errNoToken    = errors.New("no bearer token")
	errWrongToken = errors.New("wrong token")
)

// who returns the name of the token r carries, or why it is refused. Every
// token is compared, in constant time.
func (a *Auth) who(r *http.Request) (string, error) {
	h := r.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", errNoToken
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(token)))
	name := ""
	for _, t := range a.tokens() {
		if subtle.ConstantTimeCompare(sum[:], t.sum[:]) == 1 {
			name = t.name
		}
	}
	if name == "" {
		return "", errWrongToken
	}
	return name, nil
}

// statusRecorder keeps the status code a handler wrote, for the admin log.
type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (w *statusRecorder) WriteHeader(code int) {
	w.code = code
	w.ResponseWriter.WriteHeader(code)
}

// handleAPI registers h at pattern behind the bearer token check, and logs
// each call: the token's name, the action and the status (never the query,
// which may hold raw descriptor values). Without Config.Auth the pattern is
// not registered: the endpoint answers 404.
func (s *Server) handleAPI(mux *http.ServeMux, pattern, action string, h http.HandlerFunc) {
	a := s.cfg.Auth
	if a == nil {
		return
	}
	mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		name, err := a.who(r)
		if err != nil {
			s.cfg.Log.Warn("admin call refused", zap.String("action", action), zap.String("reason", err.Error()))
			w.Header().Set("WWW-Authenticate", `Bearer realm="envoy-rls admin"`)
			writeText(w, http.StatusUnauthorized, "401: "+err.Error())
			return
		}
		rec := &statusRecorder{ResponseWriter: w, code: http.StatusOK}
		h(rec, r)
		s.cfg.Log.Info("admin call", zap.String("token", name), zap.String("action", action), zap.Int("status", rec.code))
	})
}
