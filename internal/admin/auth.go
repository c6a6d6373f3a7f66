package admin

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/internal/credfiles"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
)

// Bounds of the token file.
const (
	// maxTokenFileBytes bounds the file read.
	maxTokenFileBytes = 64 << 10
	// maxAdminTokens bounds the tokens of one file (a few per rotation).
	maxAdminTokens = 64
	// MinTokenLen refuses tokens short enough to guess.
	MinTokenLen = 16
	// TickInterval is how often Server.Tick is to be called: the token
	// file is read again (a call also reads it when the last read is
	// older) and the count of refused calls not logged is written.
	TickInterval = time.Second
)

// Log messages of the token file's changes: one line per change of its
// state, never per read.
const (
	MsgTokenFileRefused = "admin token file refused: no admin token is in force; the admin API, /config and the profiles answer 401 until the file is fixed"
	MsgTokenFileValid   = "admin token file valid again: its tokens are in force"
	MsgTokenFileReread  = "admin token file read again"
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
// a token has at least MinTokenLen characters and no spaces. An error
// names the line and the rule it breaks, never the line's text (which may
// be a token).
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
		return nil, fmt.Errorf("%s: no token: write one name:token line (a blank or commented-out file revokes every token)", path)
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

// readTokens reads and parses the token file, bounded in size. A file that
// is missing, unreadable, not a regular file, readable or writable by
// group or others (credfiles.Read), too large, without a token or
// malformed is refused; the error says what to fix.
func readTokens(path string) ([]adminToken, error) {
	b, err := credfiles.Read(path, maxTokenFileBytes)
	var pe *fs.PathError
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("admin token file %s: does not exist: create it with one name:token line, mode 0600", path)
	case errors.As(err, &pe):
		return nil, fmt.Errorf("admin token file %s: cannot be read: %w", path, pe.Err)
	case err != nil:
		return nil, fmt.Errorf("admin token file %s: %w", path, err)
	}
	return parseTokens("admin token file "+path, b)
}

// AuthConfig configures an Auth.
type AuthConfig struct {
	// Path is the token file; "" turns the admin API off. (Optional)
	Path string
	// Now is the clock of the rereads. (Optional, default time.Now)
	Now func() time.Time
	// Log receives the file's changes. (Required with Path)
	Log *zap.Logger
	// Registerer receives the token gauges. (Optional: none registered)
	Registerer prometheus.Registerer
}

// Auth checks the bearer tokens of the admin API. The file is read at
// start (a bad file stops the start) and again at most once per
// TickInterval: rotation is editing the file, with the old and the new
// token side by side until every client has the new one. A file that
// becomes bad (missing, unreadable, readable by group or others, empty,
// only comments, malformed) leaves no token in force, so every guarded
// call is refused until a valid file is read again: a control that fails
// closed.
type Auth struct {
	path  string
	now   func() time.Time
	log   *zap.Logger
	ok    prometheus.Gauge
	count prometheus.Gauge

	mu    sync.Mutex
	toks  []adminToken
	why   string // why no token is in force; "" while the file is valid
	check time.Time
}

// NewAuth reads the token file of cfg; nil, nil when cfg.Path is empty. A
// file that is bad at start is an error: the start stops and says what to
// fix.
func NewAuth(cfg AuthConfig) (*Auth, error) {
	if cfg.Path == "" {
		return nil, nil
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		return nil, errors.New("admin: AuthConfig.Log is required")
	}
	toks, err := readTokens(cfg.Path)
	if err != nil {
		return nil, err
	}
	a := &Auth{
		path: cfg.Path, now: cfg.Now, log: cfg.Log,
		ok: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: rls.MetricsNamespace, Name: "admin_token_file_ok",
			Help: "Whether the admin token file is valid (1) or refused (0: missing, unreadable, readable by group or others, without a token or malformed; no admin token is then in force).",
		}),
		count: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: rls.MetricsNamespace, Name: "admin_tokens",
			Help: "Admin API tokens in force (0 while the token file is refused).",
		}),
		toks: toks, check: cfg.Now(),
	}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{a.ok, a.count} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("registering the admin token gauges: %w", err)
			}
		}
	}
	a.gauges()
	return a, nil
}

func (a *Auth) gauges() {
	if a.why == "" {
		a.ok.Set(1)
	} else {
		a.ok.Set(0)
	}
	a.count.Set(float64(len(a.toks)))
}

// Refresh reads the token file again when the last read is at least
// TickInterval before now.
func (a *Auth) Refresh(now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.refresh(now)
}

// refresh is Refresh with a.mu held. Only a change of state is logged:
// a file refused (again for another reason), valid again, or valid with
// other tokens.
func (a *Auth) refresh(now time.Time) {
	if now.Sub(a.check) < TickInterval {
		return
	}
	a.check = now
	toks, err := readTokens(a.path)
	why := ""
	if err != nil {
		toks, why = nil, err.Error()
	}
	was, same := a.why, sameTokens(a.toks, toks)
	a.toks, a.why = toks, why
	a.gauges()
	switch {
	case why != "" && why != was:
		a.log.Error(MsgTokenFileRefused, zap.String("problem", why))
	case why == "" && was != "":
		a.log.Info(MsgTokenFileValid, zap.Int("tokens", len(toks)))
	case why == "" && !same:
		a.log.Info(MsgTokenFileReread, zap.Int("tokens", len(toks)))
	}
}

func sameTokens(a, b []adminToken) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Describe is the token line of /healthz: how many tokens are in force,
// or why none is. It names the file and the problem, never a token.
func (a *Auth) Describe() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.refresh(a.now())
	if a.why != "" {
		return "admin tokens: none in force: " + a.why
	}
	return fmt.Sprintf("admin tokens: %d in force", len(a.toks))
}

// Reasons a call is refused: the reason label of
// envoy_rls_admin_refused_total and of the refusal log lines.
const (
	refusedNoToken     = "no_token"
	refusedWrongToken  = "wrong_token"
	refusedNoneInForce = "no_token_in_force"
	refusedRateLimited = "rate_limited"
)

// who returns the name of the token r carries, or the reason it is
// refused. Every token is compared, in constant time.
func (a *Auth) who(r *http.Request) (name, refused string) {
	h := r.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", refusedNoToken
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(token)))
	a.mu.Lock()
	a.refresh(a.now())
	toks := a.toks
	a.mu.Unlock()
	if len(toks) == 0 {
		return "", refusedNoneInForce
	}
	for _, t := range toks {
		if subtle.ConstantTimeCompare(sum[:], t.sum[:]) == 1 {
			name = t.name
		}
	}
	if name == "" {
		return "", refusedWrongToken
	}
	return name, ""
}
