package app

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/options"
)

// TestDigestAndExplainCommands: the digest is the one the server computes
// with the same secret; mistakes are one clear error each.
func TestDigestAndExplainCommands(t *testing.T) {
	dir := t.TempDir()
	// Its descriptors with several limits each (rate_limits).
	const rules = "../../config/examples/08-several-limits.yaml"
	secret := "a-shared-secret-of-32-bytes-----"
	env := func(k string) string {
		if k == options.SecretEnv {
			return secret
		}
		return ""
	}
	var out bytes.Buffer
	if err := Run(context.Background(), []string{"digest", "--config", rules, "--domain", "several", "--descriptor", "tenant=rawval-t"}, env, &out, &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || strings.Contains(out.String(), "rawval") {
		t.Fatalf("digest of a descriptor with two limits:\n%s", out.String())
	}
	// The limits of one descriptor share a hash tag (one slot).
	var tags []string
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) != 3 || len(f[0]) != 64 || !strings.HasPrefix(f[2], "rate:{") || !strings.Contains(f[2], "}:state:") {
			t.Fatalf("digest line %q", l)
		}
		tags = append(tags, f[2][:strings.Index(f[2], "}")])
	}
	if tags[0] != tags[1] {
		t.Fatalf("the two limits' keys have tags %q", tags)
	}

	tokens := filepath.Join(dir, "client-token")
	noToken := filepath.Join(dir, "no-token")
	if err := os.WriteFile(noToken, []byte("# a comment\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		env  func(string) string
		want string
	}{
		{"no secret", []string{"digest", "--config", rules, "--domain", "several", "--descriptor", "api_key=x"}, noEnv, "HMAC secret is required"},
		{"no domain", []string{"digest", "--config", rules, "--descriptor", "api_key=x"}, env, "--domain is required"},
		{"bad descriptor", []string{"digest", "--config", rules, "--domain", "several", "--descriptor", "api_key"}, env, "want key=value"},
		{"unmatched", []string{"digest", "--config", rules, "--domain", "several", "--descriptor", "other=x"}, env, "no rule of domain"},
		{"explain without a source", []string{"explain", "--domain", "several", "--descriptor", "api_key=x"}, env, "--admin URL"},
		{"explain without a token", []string{"explain", "--admin", "http://127.0.0.1:1", "--domain", "several", "--descriptor", "api_key=x"}, env, "--token-file is required"},
		{"explain, token file missing", []string{"explain", "--admin", "http://127.0.0.1:1", "--token-file", tokens, "--domain", "several", "--descriptor", "api_key=x"}, env, "--token-file"},
		{"explain, no token in the file", []string{"explain", "--admin", "http://127.0.0.1:1", "--token-file", noToken, "--domain", "several", "--descriptor", "api_key=x"}, env, "--token-file " + noToken + ": no token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			err := Run(context.Background(), tc.args, tc.env, &b, &b)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one with %q", err, tc.want)
			}
		})
	}

	// Offline explain without a secret: the rule, no digest.
	out.Reset()
	if err := Run(context.Background(), []string{"explain", "--config", rules, "--domain", "several", "--descriptor", "api_key=rawval-u"}, noEnv, &out, &out); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); !strings.Contains(s, `"matched": true`) || strings.Contains(s, "subject_digest") || strings.Contains(s, "rawval") {
		t.Fatalf("offline explain:\n%s", s)
	}
}

// TestAdminBase: --admin takes a URL or host:port (http); anything else is
// one line saying what to write, without a URL password.
func TestAdminBase(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:28180":          "http://127.0.0.1:28180",
		"http://127.0.0.1:8080/":   "http://127.0.0.1:8080",
		"https://rls.example:8443": "https://rls.example:8443",
		"localhost:8080":           "http://localhost:8080",
		"[::1]:8080":               "http://[::1]:8080",
	} {
		if got, err := adminBase(in); err != nil || got != want {
			t.Errorf("adminBase(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"ftp://127.0.0.1:21", "http://", ":8080", "http://u:rawval-pw@%zz"} {
		_, err := adminBase(in)
		if err == nil || !strings.Contains(err.Error(), "must be the admin address as http://HOST:PORT") || strings.Contains(err.Error(), "rawval-pw") {
			t.Errorf("adminBase(%q): %v", in, err)
		}
	}
}
