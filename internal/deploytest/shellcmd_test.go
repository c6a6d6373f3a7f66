package deploytest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// placeholder stands for a command substitution in these tests.
const placeholder = "OUTPUT"

// substituteOnly replaces $(...) by the placeholder and refuses any other
// expansion.
var substituteOnly = Substitute(placeholder)

type wantCommand struct {
	line  int
	words []string
	err   bool
}

func checkCommands(t *testing.T, got []DocCommand, want []wantCommand) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d commands %v, want %d", len(got), got, len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.Line != w.line || !slices.Equal(g.Words, w.words) || (g.Err != nil) != w.err {
			t.Errorf("command %d: line %d %q err %v; want line %d %q err %v", i, g.Line, g.Words, g.Err, w.line, w.words, w.err)
		}
	}
}

func TestMarkdownCommands(t *testing.T) {
	md := "text\n" +
		"```sh\n" +
		"docker run --rm -v \"$PWD/a b:/x:ro\" \\\n" +
		"  img:1 # a comment\n" +
		"\n" +
		"# a comment line\n" +
		"helm install r chart --set-file 'rules.files.a\\.yaml=f.yaml' &\n" +
		"```\n" +
		"```yaml\n" +
		"not: a command\n" +
		"```\n" +
		"```sh\n" +
		"$ grpcurl -d '{\"a\":1}' host list\n" +
		"{\n" +
		"  \"output\": true\n" +
		"}\n" +
		"$ echo \"x\\\"y\" a\\ b ''\n" +
		"```\n"
	path := filepath.Join(t.TempDir(), "doc.md")
	if err := os.WriteFile(path, []byte(md), 0o600); err != nil {
		t.Fatal(err)
	}
	got := MarkdownCommands(t, path)
	checkCommands(t, got, []wantCommand{
		{3, []string{"docker", "run", "--rm", "-v", "$PWD/a b:/x:ro", "img:1"}, false},
		{7, []string{"helm", "install", "r", "chart", "--set-file", `rules.files.a\.yaml=f.yaml`}, false},
		{13, []string{"grpcurl", "-d", `{"a":1}`, "host", "list"}, false},
		{17, []string{"echo", `x"y`, "a b", ""}, false},
	})
	if got[0].File != path || got[0].Text != `docker run --rm -v "$PWD/a b:/x:ro" img:1 # a comment` {
		t.Errorf("first command: file %q text %q", got[0].File, got[0].Text)
	}
}

// TestParseMarkdownBlocks: commands come from code blocks only (shell ones
// and unmarked ones), split over lines, with a prompt or not, and keep
// every value as the shell would pass it.
func TestParseMarkdownBlocks(t *testing.T) {
	md := "Run `helm install rls x` first.\n" +
		"helm install outside a code block is prose\n" +
		"```sh\n" +
		"kubectl create namespace envoy-rls\n" +
		"$ helm install rls oci://ghcr.io/envoy-rls/charts/envoy-rls --version 0.2.0 -n envoy-rls --create-namespace \\\n" +
		"  --set store=redis \\\n" +
		"  --set redis.addr=a:6379\\,b:6379 \\\n" +
		"  --set-string \"hmac.secret=0123456789abcdef\\\"x\" \\\n" +
		"  --set-file 'rules.files.ingress\\.yaml=config/examples/istio/rules/ingress.yaml' # a comment\n" +
		"helm upgrade rls deploy/helm/envoy-rls --reuse-values -f=my.yaml\n" +
		"```\n" +
		"```\n" +
		"helm install bare block\n" +
		"  the least e' in [0, window]\n" +
		"```\n" +
		"  ```console\n" +
		"  curl -s localhost:8080/metrics | grep decisions\n" +
		"  ```\n" +
		"```promql\n" +
		"sum by (policy) (rate(x[1m]))\n" +
		"```\n"
	got, err := ParseMarkdown("x.md", []byte(md), substituteOnly)
	if err != nil {
		t.Fatal(err)
	}
	checkCommands(t, got, []wantCommand{
		{4, []string{"kubectl", "create", "namespace", "envoy-rls"}, false},
		{5, []string{"helm", "install", "rls", "oci://ghcr.io/envoy-rls/charts/envoy-rls", "--version", "0.2.0",
			"-n", "envoy-rls", "--create-namespace", "--set", "store=redis",
			"--set", "redis.addr=a:6379,b:6379", // the shell ate the backslash
			"--set-string", `hmac.secret=0123456789abcdef"x`,
			"--set-file", `rules.files.ingress\.yaml=config/examples/istio/rules/ingress.yaml`}, false},
		// (the prompted block's unprompted line above is output: skipped)
		{13, []string{"helm", "install", "bare", "block"}, false},
		{14, nil, true}, // an unmarked block may hold anything: its odd lines are the command's Err
		{17, []string{"curl", "-s", "localhost:8080/metrics"}, true},
	})
	if got[0].File != "x.md" || got[1].String() != "x.md:5: "+got[1].Text {
		t.Errorf("file %q, String %q", got[0].File, got[1].String())
	}
}

// TestParseBlocks: every fenced block, with its language (the first word
// of the info string), its opening line and its lines as written; a fence
// inside a block's lines does not end it unless it stands alone.
func TestParseBlocks(t *testing.T) {
	md := "text\n" +
		"```promql title=x\n" +
		"  sum(rate(x[1m]))\n" +
		"\n" +
		"```\n" +
		"  ```\n" +
		"```sh inside\n" +
		"  ```\n" +
		"```yaml\n" +
		"```\n"
	got, err := ParseBlocks("x.md", []byte(md))
	if err != nil {
		t.Fatal(err)
	}
	want := []Block{
		{Lang: "promql", Line: 2, Lines: []string{"  sum(rate(x[1m]))", ""}},
		{Lang: "", Line: 6, Lines: []string{"```sh inside"}},
		{Lang: "yaml", Line: 9},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d blocks %+v, want %+v", len(got), got, want)
	}
	for i, w := range want {
		if g := got[i]; g.Lang != w.Lang || g.Line != w.Line || !slices.Equal(g.Lines, w.Lines) {
			t.Errorf("block %d: %+v, want %+v", i, g, w)
		}
	}
	if _, err := ParseBlocks("x.md", []byte("```promql\nx\n")); err == nil || err.Error() != "x.md:1: the code block is not closed" {
		t.Errorf("unclosed block: error %v", err)
	}

	path := filepath.Join(t.TempDir(), "doc.md")
	if err := os.WriteFile(path, []byte(md), 0o600); err != nil {
		t.Fatal(err)
	}
	if bl := MarkdownBlocks(t, path, "promql"); len(bl) != 1 || bl[0].Line != 2 {
		t.Errorf("MarkdownBlocks promql: %+v, want the block at line 2", bl)
	}
}

func TestParseMarkdownErrors(t *testing.T) {
	for _, tc := range []struct{ md, want string }{
		{"```sh\nhelm install rls . --set 'a=b\n```\n", "x.md:2: unterminated single quote"},
		{"```bash\nhelm install rls . \\\n  --set a=$(date\n```\n", "x.md:2: unterminated $("},
		{"text\n```sh\nls\n", "x.md:2: the code block is not closed"},
	} {
		_, err := ParseMarkdown("x.md", []byte(tc.md), substituteOnly)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%q: error %v, want %q", tc.md, err, tc.want)
		}
	}
}

func TestSplitWords(t *testing.T) {
	for _, tc := range []struct {
		s      string
		expand Expander
		want   []string
		err    string // "" for none
	}{
		{`a  b	c`, nil, []string{"a", "b", "c"}, ""},
		{`echo "x\"y" a\ b '' "\$HOME \\ \q"`, nil, []string{"echo", `x"y`, "a b", "", `$HOME \ \q`}, ""},
		{`a # comment`, nil, []string{"a"}, ""},
		{`a#b '#c'`, nil, []string{"a#b", "#c"}, ""},
		{`port-forward svc/x 8080 &`, nil, []string{"port-forward", "svc/x", "8080"}, ""},
		{`run& # in the background`, nil, []string{"run"}, ""},
		{`docker run -v "$PWD/a:/b" ${X} $1 $ a$`, nil, []string{"docker", "run", "-v", "$PWD/a:/b", "${X}", "$1", "$", "a$"}, ""},
		{`helm install rls . --set-string hmac.secret="$(head -c 32 /dev/urandom | base64)" --set-string x=$(date)`, substituteOnly,
			[]string{"helm", "install", "rls", ".", "--set-string", "hmac.secret=" + placeholder, "--set-string", "x=" + placeholder}, ""},
		{`a "$(echo ')' "(")" b`, substituteOnly, []string{"a", placeholder, "b"}, ""},
		{`a $(x $(y)) b`, nil, []string{"a", "$(x $(y))", "b"}, ""},
		{"a `date` b", nil, []string{"a", "`date`", "b"}, ""},
		{`kubectl get pods -l 'istio in (a,b)' -o jsonpath='{.x}'`, nil, []string{"kubectl", "get", "pods", "-l", "istio in (a,b)", "-o", "jsonpath={.x}"}, ""},
		{`helm install rls . --set a=$X`, substituteOnly, []string{"helm", "install", "rls", ".", "--set"}, "$X: needs a shell expansion; the docs test cannot run it"},
		{`helm install rls . --set "a=${X}"`, substituteOnly, []string{"helm", "install", "rls", ".", "--set"}, "${X}: needs a shell expansion; the docs test cannot run it"},
		{"a `date`", substituteOnly, []string{"a"}, "`date`: needs a shell expansion; the docs test cannot run it"},
		{`helm install rls . | tee`, nil, []string{"helm", "install", "rls", "."}, "| needs the shell"},
		{`a && b`, nil, []string{"a"}, "& needs the shell"},
		{`a; b`, nil, []string{"a"}, "; needs the shell"},
		{`a > f`, nil, []string{"a"}, "> needs the shell"},
		{`for i in $(seq 1 7); do`, nil, []string{"for", "i", "in", "$(seq 1 7)"}, "; needs the shell"},
		{`a {b,c}`, nil, []string{"a"}, "{ needs the shell"},
		{`a 'b`, nil, nil, "unterminated single quote"},
		{`a "b`, nil, nil, "unterminated double quote"},
		{`a "$(b"`, nil, nil, "unterminated $("},
		{`a $(date`, substituteOnly, nil, "unterminated $("},
		{`a ${X`, nil, nil, "unterminated ${"},
		{"a `b", nil, nil, "unterminated backquote"},
	} {
		got, err := SplitWords(tc.s, tc.expand)
		if fmt.Sprint(err) != tc.err && !(err == nil && tc.err == "") || !slices.Equal(got, tc.want) {
			t.Errorf("SplitWords(%q): %q, %v; want %q, %q", tc.s, got, err, tc.want, tc.err)
		}
		if strings.HasPrefix(tc.err, "unterminated") != errors.Is(err, errUnterminated) {
			t.Errorf("SplitWords(%q): %v: errUnterminated %v, want %v", tc.s, err, errors.Is(err, errUnterminated), !errors.Is(err, errUnterminated))
		}
	}
}

func TestDocsCommands(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{
		"README.md":              "```sh\nhelm install a .\n```\n",
		"docs/guide.md":          "```sh\nhelm install b $(x)\n```\n",
		"docs/notes.txt":         "```sh\nhelm install c .\n```\n",
		".hidden/x.md":           "```sh\nhelm install d .\n```\n",
		"testdata/x.md":          "```sh\nhelm install e .\n```\n",
		"web/node_modules/x.md":  "```sh\nhelm install f .\n```\n",
		"deploy/chart/README.md": "no commands\n",
	}
	for name, text := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for _, c := range DocsCommands(t, root, substituteOnly) {
		got = append(got, fmt.Sprintf("%s:%d %s", c.File, c.Line, strings.Join(c.Words, " ")))
	}
	want := []string{"README.md:2 helm install a .", "docs/guide.md:2 helm install b " + placeholder}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}
