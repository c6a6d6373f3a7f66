package helm_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/deploytest"
)

// docCommand is one `helm install` or `helm upgrade` command found in a
// Markdown file's code blocks, split into shell words.
type docCommand struct {
	file  string // relative to the repository root
	line  int
	words []string
}

func (c docCommand) String() string {
	return fmt.Sprintf("%s:%d: %s", c.file, c.line, strings.Join(c.words, " "))
}

// docHelmCommands returns every helm install/upgrade command in the
// repository's Markdown files, inside fenced code blocks, with backslash
// continuations joined.
func docHelmCommands(t *testing.T, root string) []docCommand {
	t.Helper()
	var cmds []docCommand
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".md") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		found, err := helmCommandsIn(rel, b)
		if err != nil {
			return err
		}
		cmds = append(cmds, found...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return cmds
}

func helmCommandsIn(file string, b []byte) ([]docCommand, error) {
	var cmds []docCommand
	sc := bufio.NewScanner(bytes.NewReader(b))
	inCode := false
	var cur strings.Builder
	start, n := 0, 0
	for sc.Scan() {
		n++
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inCode = !inCode
			cur.Reset()
			continue
		}
		if !inCode {
			continue
		}
		if cur.Len() == 0 {
			start = n
		}
		if body, ok := strings.CutSuffix(line, `\`); ok {
			cur.WriteString(body + " ")
			continue
		}
		cur.WriteString(line)
		text := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(cur.String()), "$ "))
		cur.Reset()
		if !strings.HasPrefix(text, "helm install ") && !strings.HasPrefix(text, "helm upgrade ") {
			continue
		}
		words, err := shellWords(text)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", file, start, err)
		}
		cmds = append(cmds, docCommand{file: file, line: start, words: words})
	}
	return cmds, sc.Err()
}

// substituted stands for the output of a command substitution $(...) in a
// documented command (such as a generated HMAC key): 32 bytes, letters only.
const substituted = "docsTestStandInForCommandOutputX"

// shellWords splits a command line as a POSIX shell does for the subset the
// docs use: blanks separate words; single quotes keep everything; double
// quotes keep everything but \" and \\; a backslash outside quotes escapes
// the next character; $(...) becomes the substituted stand-in. A # starting
// a word begins a comment. Anything else that needs the shell ($VAR,
// backticks, ;, |, &, redirections) is an error, since the test could not
// reproduce it.
func shellWords(s string) ([]string, error) {
	var words []string
	var w strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		case c == '#' && !inWord:
			return words, nil
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("unterminated single quote in %q", s)
			}
			w.WriteString(s[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == '$' && strings.HasPrefix(s[i:], "$("):
			end, err := substitutionEnd(s, i)
			if err != nil {
				return nil, err
			}
			w.WriteString(substituted)
			i = end
			inWord = true
		case c == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if strings.HasPrefix(s[i:], "$(") {
					end, err := substitutionEnd(s, i)
					if err != nil {
						return nil, err
					}
					w.WriteString(substituted)
					i = end
					continue
				}
				if s[i] == '$' || s[i] == '`' {
					return nil, fmt.Errorf("%q needs a shell expansion; the docs test cannot run it", s)
				}
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte(`"\$`+"`", s[i+1]) >= 0 {
					i++
				}
				w.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, fmt.Errorf("unterminated double quote in %q", s)
			}
			inWord = true
		case c == '\\':
			if i+1 < len(s) {
				i++
				w.WriteByte(s[i])
			}
			inWord = true
		case strings.IndexByte("$`;|&<>(){}", c) >= 0:
			return nil, fmt.Errorf("%q needs the shell (%c); the docs test cannot run it", s, c)
		default:
			w.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, w.String())
	}
	return words, nil
}

// substitutionEnd returns the index of the ")" closing the $( at i.
func substitutionEnd(s string, i int) (int, error) {
	depth := 0
	for j := i + 1; j < len(s); j++ {
		switch s[j] {
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				return j, nil
			}
		}
	}
	return 0, fmt.Errorf("unterminated $( in %q", s)
}

// Flags of helm install/upgrade that carry a value, kept for helm template.
var keptValueFlags = map[string]bool{
	"--set": true, "--set-string": true, "--set-file": true, "--set-json": true, "--set-literal": true,
	"-f": true, "--values": true, "-n": true, "--namespace": true, "--kube-version": true,
}

// Flags with a value that only matter to a live install.
var droppedValueFlags = map[string]bool{
	"--version": true, "--timeout": true, "--description": true, "--repo": true,
}

// Boolean flags that do not change what is rendered.
var droppedBoolFlags = map[string]bool{
	"--create-namespace": true, "--wait": true, "--wait-for-jobs": true, "--atomic": true, "--install": true,
	"-i": true, "--debug": true, "--reuse-values": true, "--reset-then-reuse-values": true, "--cleanup-on-fail": true,
	"--dry-run": true, "--devel": true, "--force": true,
}

// helmTemplateArgs turns `helm install|upgrade [flags] NAME CHART [flags]`
// into the release name, the chart reference, the value flags, and whether
// the command reuses the release's earlier values.
func helmTemplateArgs(c docCommand) (name, chart string, flags []string, reuse bool, err error) {
	var pos []string
	w := c.words[2:]
	for i := 0; i < len(w); i++ {
		a := w[i]
		if !strings.HasPrefix(a, "-") {
			pos = append(pos, a)
			continue
		}
		flag, val, hasVal := strings.Cut(a, "=")
		if flag == "--reuse-values" || flag == "--reset-then-reuse-values" {
			reuse = true
		}
		switch {
		case keptValueFlags[flag] || droppedValueFlags[flag]:
			if !hasVal {
				if i+1 >= len(w) {
					return "", "", nil, false, fmt.Errorf("%s: %s has no value", c, flag)
				}
				i++
				val = w[i]
			}
			if keptValueFlags[flag] {
				flags = append(flags, flag, val)
			}
		case droppedBoolFlags[flag]:
		default:
			return "", "", nil, false, fmt.Errorf("%s: flag %s is unknown to the docs test; teach it whether the flag changes the render", c, flag)
		}
	}
	if len(pos) != 2 {
		return "", "", nil, false, fmt.Errorf("%s: want a release name and a chart, got %q", c, pos)
	}
	return pos[0], pos[1], flags, reuse, nil
}

// TestDocsHelmCommands: every helm install/upgrade command in the
// repository's Markdown renders against this chart as written (the chart
// reference pointed at the local chart, every value flag kept, paths from
// the repository root), and the envoy-rls binary accepts the rendered
// Deployment's args. An upgrade with --reuse-values starts from the values
// of the file's latest install of that release.
func TestDocsHelmCommands(t *testing.T) {
	root := deploytest.ModuleRoot(t)
	cmds := docHelmCommands(t, root)
	seen := map[string]bool{}
	for _, c := range cmds {
		seen[c.file] = true
	}
	for _, f := range []string{"docs/istio.md", "deploy/helm/envoy-rls/README.md"} {
		if !seen[f] {
			t.Errorf("no helm install/upgrade command found in %s; the extractor is broken or the guide lost its command", f)
		}
	}
	installs := map[string][]string{} // file + release -> value flags
	for _, c := range cmds {
		t.Run(fmt.Sprintf("%s:%d", c.file, c.line), func(t *testing.T) {
			name, chart, flags, reuse, err := helmTemplateArgs(c)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasSuffix(strings.TrimSuffix(chart, "/"), "envoy-rls") {
				t.Fatalf("%s: chart %q is not envoy-rls", c, chart)
			}
			if c.words[1] == "install" {
				installs[c.file+" "+name] = flags
			}
			if reuse {
				prev, ok := installs[c.file+" "+name]
				if !ok {
					t.Fatalf("%s: --reuse-values without an earlier helm install of %s in %s", c, name, c.file)
				}
				flags = append(append([]string{}, prev...), flags...)
			}
			args := append([]string{"template", name, chartDir(t)}, flags...)
			cmd := exec.Command(helmBin(t), args...)
			cmd.Dir = root
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("%s\nas helm %s: %v\n%s", c, strings.Join(args, " "), err, stderr.String())
			}
			m := manifests(t, args, stdout.String())
			if len(m["Deployment"]) != 1 {
				t.Fatalf("%s: rendered %d Deployments, want 1", c, len(m["Deployment"]))
			}
		})
	}
}

// TestDocsHelmCommandsExtraction: the extractor finds commands split over
// lines, in code blocks only, and keeps every value flag as the shell would
// pass it.
func TestDocsHelmCommandsExtraction(t *testing.T) {
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
		"```\n"
	cmds, err := helmCommandsIn("x.md", []byte(md))
	if err != nil {
		t.Fatal(err)
	}
	if len(cmds) != 2 {
		t.Fatalf("found %d commands, want 2: %v", len(cmds), cmds)
	}
	if cmds[0].line != 5 {
		t.Errorf("first command at line %d, want 5", cmds[0].line)
	}
	name, chart, flags, reuse, err := helmTemplateArgs(cmds[0])
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"-n", "envoy-rls", "--set", "store=redis", "--set", "redis.addr=a:6379,b:6379", // the shell ate the backslash

		"--set-string", `hmac.secret=0123456789abcdef"x`, "--set-file", `rules.files.ingress\.yaml=config/examples/istio/rules/ingress.yaml`}
	if name != "rls" || chart != "oci://ghcr.io/envoy-rls/charts/envoy-rls" || reuse || strings.Join(flags, "|") != strings.Join(want, "|") {
		t.Errorf("got name %q chart %q reuse %v flags %q; want rls, the OCI chart, false, %q", name, chart, reuse, flags, want)
	}
	_, _, flags, reuse, err = helmTemplateArgs(cmds[1])
	if err != nil || !reuse || strings.Join(flags, "|") != "-f|my.yaml" {
		t.Errorf("upgrade: flags %q reuse %v err %v; want [-f my.yaml], reuse", flags, reuse, err)
	}
	words, err := shellWords(`helm install rls . --set-string hmac.secret="$(head -c 32 /dev/urandom | base64)" --set-string x=$(date)`)
	if err != nil || len(words) != 8 || words[5] != "hmac.secret="+substituted || words[7] != "x="+substituted {
		t.Errorf("command substitution: words %q, err %v; want the stand-in in both values", words, err)
	}
	for _, bad := range []string{"helm install rls . --set a=$X", "helm install rls . | tee", "helm install rls . --set 'a=b", "helm install rls . --set a=$(date"} {
		if _, err := shellWords(bad); err == nil {
			t.Errorf("shellWords(%q) passed; want an error", bad)
		}
	}
	if _, _, _, _, err := helmTemplateArgs(docCommand{words: []string{"helm", "install", "rls", ".", "--post-renderer", "x"}}); err == nil {
		t.Error("an unknown flag passed; want an error naming it")
	}
}
