package deploytest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// shellFences are the info strings of the fenced blocks that hold shell
// commands; "" is a block without one.
var shellFences = map[string]bool{"sh": true, "shell": true, "bash": true, "zsh": true, "console": true, "": true}

// MarkdownCommands returns the commands of the Markdown file at path, with
// expansions kept literally (see ParseMarkdown); File is path.
func MarkdownCommands(t testing.TB, path string) []DocCommand {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cmds, err := ParseMarkdown(path, b, nil)
	if err != nil {
		t.Fatal(err)
	}
	return cmds
}

// DocsCommands returns the commands of every *.md file below root (hidden
// directories, testdata and node_modules left out), each with File relative
// to root in slash form, expansions replaced by expand.
func DocsCommands(t testing.TB, root string, expand Expander) []DocCommand {
	t.Helper()
	var cmds []DocCommand
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
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		found, err := ParseMarkdown(filepath.ToSlash(rel), b, expand)
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

// Block is one fenced code block (```) of a Markdown file.
type Block struct {
	// Lang is the first word of the info string ("sh" for ```sh title),
	// "" when there is none.
	Lang string
	// Line is the line of the opening fence; Lines[i] is on line Line+1+i.
	Line int
	// Lines are the lines between the fences, as written.
	Lines []string
}

// ParseBlocks returns the fenced code blocks of the Markdown text b of
// file, in order. A fence is a line starting with ``` (indentation
// ignored); the block ends at a line that is ``` alone. The error reports a
// block that is not closed.
func ParseBlocks(file string, b []byte) ([]Block, error) {
	var (
		out []Block
		cur *Block
	)
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		trimmed := strings.TrimSpace(sc.Text())
		if cur == nil {
			if info, ok := strings.CutPrefix(trimmed, "```"); ok {
				lang, _, _ := strings.Cut(strings.TrimSpace(info), " ")
				cur = &Block{Lang: lang, Line: n}
			}
			continue
		}
		if trimmed == "```" {
			out = append(out, *cur)
			cur = nil
			continue
		}
		cur.Lines = append(cur.Lines, sc.Text())
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if cur != nil {
		return nil, fmt.Errorf("%s:%d: the code block is not closed", file, cur.Line)
	}
	return out, nil
}

// MarkdownBlocks returns the fenced code blocks of the Markdown file at
// path whose language is lang.
func MarkdownBlocks(t testing.TB, path, lang string) []Block {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := ParseBlocks(path, b)
	if err != nil {
		t.Fatal(err)
	}
	var out []Block
	for _, bl := range blocks {
		if bl.Lang == lang {
			out = append(out, bl)
		}
	}
	return out
}

// ParseMarkdown returns the commands of the fenced blocks marked sh, shell,
// bash, zsh or console, or not marked at all, in the Markdown text b of
// file. A command is what a user would paste: a leading "$ " prompt is
// dropped, backslash-newline joins lines, a word starting with # ends the
// command (a comment), and a trailing & (run in the background) is dropped.
// In a block whose commands carry the "$ " prompt, the lines without it are
// the programs' output and are skipped; blank lines and comment lines are
// skipped everywhere. Blocks of other languages (yaml, promql...) hold no
// commands. The error reports a block that is not closed (see
// ParseBlocks), or a command of a marked shell block that no shell would
// run (an unterminated quote or substitution); other problems are the
// command's Err.
func ParseMarkdown(file string, b []byte, expand Expander) ([]DocCommand, error) {
	blocks, err := ParseBlocks(file, b)
	if err != nil {
		return nil, err
	}
	var out []DocCommand
	for _, bl := range blocks {
		if !shellFences[bl.Lang] {
			continue
		}
		cmds, err := blockCommands(file, bl, expand)
		if err != nil {
			return nil, err
		}
		out = append(out, cmds...)
	}
	return out, nil
}

// blockCommands returns the commands of the shell block bl (see
// ParseMarkdown).
func blockCommands(file string, bl Block, expand Expander) ([]DocCommand, error) {
	var (
		out      []DocCommand
		marked   = bl.Lang != "" // the block's info string names a shell
		prompted bool            // the block marks commands with "$ "
		pending  string
		start    int
	)
	emit := func() error {
		text := strings.TrimSpace(pending)
		pending = ""
		if text == "" {
			return nil
		}
		words, err := SplitWords(text, expand)
		if err != nil && marked && errors.Is(err, errUnterminated) {
			return fmt.Errorf("%s:%d: %w", file, start, err)
		}
		if len(words) > 0 || err != nil {
			out = append(out, DocCommand{File: file, Line: start, Lang: bl.Lang, Text: text, Words: words, Err: err})
		}
		return nil
	}
	for i, line := range bl.Lines {
		trimmed := strings.TrimSpace(line)
		if pending == "" {
			if cmd, ok := strings.CutPrefix(trimmed, "$ "); ok {
				prompted, trimmed = true, cmd
			} else if prompted || trimmed == "" || strings.HasPrefix(trimmed, "#") {
				continue // output of a prompted command, a blank or a comment line
			}
			start = bl.Line + 1 + i
		}
		if cont, ok := strings.CutSuffix(trimmed, `\`); ok {
			pending += strings.TrimSpace(cont) + " "
			continue
		}
		pending += trimmed
		if err := emit(); err != nil {
			return nil, err
		}
	}
	// A continuation that runs into the closing fence.
	if err := emit(); err != nil {
		return nil, err
	}
	return out, nil
}
