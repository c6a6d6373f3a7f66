package deploytest

import (
	"bufio"
	"bytes"
	"os"
	"strings"
	"testing"
)

// DocCommand is one shell command from a ```sh block of a Markdown file.
type DocCommand struct {
	Line  int      // line of the file where the command starts
	Words []string // the command split as a POSIX shell would, quotes removed
}

// MarkdownCommands returns the commands of every ```sh (or ```shell,
// ```bash) block in the Markdown file at path, as a user would paste them:
// a leading "$ " prompt is dropped, backslash-newline joins lines, a word
// starting with # ends the command (a comment), and a trailing & (run in
// the background) is dropped. Lines inside the block that do not start a
// command (a program's output after a "$ " line) are skipped. Quoted words
// keep their content literally, so "$PWD" stays "$PWD": substitution is the
// caller's business.
func MarkdownCommands(t testing.TB, path string) []DocCommand {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var (
		out      []DocCommand
		in       bool
		prompted bool // the block marks commands with "$ "
		pending  string
		start    int
	)
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if !in {
			switch trimmed {
			case "```sh", "```shell", "```bash":
				in, prompted, pending = true, false, ""
			}
			continue
		}
		if trimmed == "```" {
			in = false
			continue
		}
		if pending == "" {
			if cmd, ok := strings.CutPrefix(trimmed, "$ "); ok {
				prompted, trimmed = true, cmd
			} else if prompted || trimmed == "" || strings.HasPrefix(trimmed, "#") {
				continue // output of a prompted command, a blank or a comment line
			}
			start = n
		}
		if cont, ok := strings.CutSuffix(trimmed, `\`); ok {
			pending += cont + " "
			continue
		}
		words, err := splitWords(pending + trimmed)
		pending = ""
		if err != "" {
			t.Fatalf("%s:%d: %s", path, start, err)
		}
		if len(words) > 0 && words[len(words)-1] == "&" {
			words = words[:len(words)-1]
		}
		if len(words) > 0 {
			out = append(out, DocCommand{Line: start, Words: words})
		}
	}
	if in {
		t.Fatalf("%s: a code block is not closed", path)
	}
	return out
}

// splitWords splits s into words with POSIX quoting: single quotes keep
// everything, double quotes keep everything but \" and \\, a backslash
// outside quotes escapes the next character. It returns a message for an
// unterminated quote.
func splitWords(s string) ([]string, string) {
	var (
		words []string
		cur   strings.Builder
		have  bool // cur is a word, possibly empty ("")
	)
	flush := func() {
		if have {
			words = append(words, cur.String())
		}
		cur.Reset()
		have = false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t':
			flush()
		case c == '#' && !have:
			flush()
			return words, ""
		case c == '\\' && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
			have = true
		case c == '\'':
			end := strings.IndexByte(s[i+1:], '\'')
			if end < 0 {
				return nil, "unterminated single quote"
			}
			cur.WriteString(s[i+1 : i+1+end])
			i += end + 1
			have = true
		case c == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && (s[i+1] == '"' || s[i+1] == '\\') {
					i++
				}
				cur.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, "unterminated double quote"
			}
			have = true
		default:
			cur.WriteByte(c)
			have = true
		}
	}
	flush()
	return words, ""
}
