package deploytest

import (
	"errors"
	"fmt"
	"strings"
)

// DocCommand is one shell command from a fenced code block of a Markdown
// file, as a user would paste it.
type DocCommand struct {
	File string // the file, as the caller named it or relative to the walked root
	Line int    // line of the file where the command starts
	Lang string // the language of its block ("" when it names none)
	// Text is the command on one line: the "$ " prompt dropped,
	// backslash-newline continuations joined.
	Text string
	// Words is the command split as a POSIX shell would, quotes removed
	// (see SplitWords). When Err is set, Words holds the words before the
	// part that could not be split.
	Words []string
	// Err is set when the command needs something SplitWords does not
	// reproduce (a pipe, a redirection, an expansion the Expander refuses),
	// or, in an untyped block, when it does not split at all (such blocks
	// often hold output or diagrams rather than commands). A caller checking
	// the command must fail on it.
	Err error
}

func (c DocCommand) String() string {
	return fmt.Sprintf("%s:%d: %s", c.File, c.Line, c.Text)
}

// Expander returns what a shell expansion in a command stands for. expr is
// the expansion as written: "$NAME", "${NAME}", "$(command)", "`command`".
// An error makes the command's Err (the caller cannot reproduce it). A nil
// Expander keeps every expansion literally, so "$PWD/x" stays "$PWD/x".
type Expander func(expr string) (string, error)

// Substitute returns an Expander that replaces every command substitution
// $(...) with placeholder, and refuses the expansions that read the user's
// environment ($NAME, ${NAME}) or the backquoted form, which a test cannot
// reproduce.
func Substitute(placeholder string) Expander {
	return func(expr string) (string, error) {
		if strings.HasPrefix(expr, "$(") {
			return placeholder, nil
		}
		return "", errors.New("needs a shell expansion; the docs test cannot run it")
	}
}

// errUnterminated marks text no shell would run: an unterminated quote or
// substitution.
var errUnterminated = errors.New("unterminated")

// SplitWords splits the command line s into words as a POSIX shell does
// for the subset the docs use: blanks separate words; single quotes keep
// everything; double quotes keep everything but \" \\ \$ \` and
// expansions; a backslash outside quotes escapes the next character; a #
// starting a word begins a comment; a trailing & is dropped. Expansions
// ($NAME, ${NAME}, $(...), `...`, in double quotes or not) are replaced by
// what expand returns. Anything else that needs the shell (;, |, &, <, >,
// parentheses, braces) is an error, with the words before it, since a
// caller could not reproduce it; an unterminated quote or substitution is
// an error wrapping errUnterminated.
func SplitWords(s string, expand Expander) ([]string, error) {
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
	// fail returns the words before a part that needs the shell; text no
	// shell would run has no words.
	fail := func(err error) ([]string, error) {
		if errors.Is(err, errUnterminated) {
			return nil, err
		}
		return words, err
	}
	// substitute writes the expansion starting at s[i] and returns the
	// index of its last byte.
	substitute := func(i int) (int, error) {
		expr, err := expansionAt(s, i)
		if err != nil {
			return 0, err
		}
		v := expr
		if expand != nil && expr != "$" {
			if v, err = expand(expr); err != nil {
				return 0, fmt.Errorf("%s: %w", expr, err)
			}
		}
		cur.WriteString(v)
		return i + len(expr) - 1, nil
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t':
			flush()
		case c == '#' && !have:
			return words, nil
		case c == '\\':
			if i+1 < len(s) {
				i++
			}
			cur.WriteByte(s[i])
			have = true
		case c == '\'':
			end := strings.IndexByte(s[i+1:], '\'')
			if end < 0 {
				return nil, fmt.Errorf("%w single quote", errUnterminated)
			}
			cur.WriteString(s[i+1 : i+1+end])
			i += end + 1
			have = true
		case c == '"':
			for i++; i < len(s) && s[i] != '"'; i++ {
				switch {
				case s[i] == '\\' && i+1 < len(s) && strings.IndexByte("\"\\$`", s[i+1]) >= 0:
					i++
					cur.WriteByte(s[i])
				case s[i] == '$' || s[i] == '`':
					end, err := substitute(i)
					if err != nil {
						return fail(err)
					}
					i = end
				default:
					cur.WriteByte(s[i])
				}
			}
			if i >= len(s) {
				return nil, fmt.Errorf("%w double quote", errUnterminated)
			}
			have = true
		case c == '$' || c == '`':
			end, err := substitute(i)
			if err != nil {
				return fail(err)
			}
			i = end
			have = true
		case c == '&' && (strings.TrimSpace(s[i+1:]) == "" || strings.HasPrefix(strings.TrimSpace(s[i+1:]), "#")):
			flush()
			return words, nil
		case strings.IndexByte(";|&<>(){}", c) >= 0:
			flush()
			return words, fmt.Errorf("%c needs the shell", c)
		default:
			cur.WriteByte(c)
			have = true
		}
	}
	flush()
	return words, nil
}

// expansionAt returns the expansion starting at s[i] ($ or `) as written:
// "$NAME", "${NAME}", "$(...)" (nested parentheses and quotes inside
// respected), "`...`", a special parameter such as "$1", or "$" alone when
// nothing follows that the shell would expand.
func expansionAt(s string, i int) (string, error) {
	if s[i] == '`' {
		for j := i + 1; j < len(s); j++ {
			switch s[j] {
			case '\\':
				j++
			case '`':
				return s[i : j+1], nil
			}
		}
		return "", fmt.Errorf("%w backquote", errUnterminated)
	}
	if i+1 >= len(s) {
		return "$", nil
	}
	switch c := s[i+1]; {
	case c == '(':
		depth := 0
		for j := i + 1; j < len(s); j++ {
			switch s[j] {
			case '\\':
				j++
			case '\'':
				end := strings.IndexByte(s[j+1:], '\'')
				if end < 0 {
					return "", fmt.Errorf("%w single quote", errUnterminated)
				}
				j += end + 1
			case '"':
				for j++; j < len(s) && s[j] != '"'; j++ {
					if s[j] == '\\' {
						j++
					}
				}
			case '(':
				depth++
			case ')':
				depth--
				if depth == 0 {
					return s[i : j+1], nil
				}
			}
		}
		return "", fmt.Errorf("%w $(", errUnterminated)
	case c == '{':
		end := strings.IndexByte(s[i:], '}')
		if end < 0 {
			return "", fmt.Errorf("%w ${", errUnterminated)
		}
		return s[i : i+end+1], nil
	case c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z':
		j := i + 2
		for j < len(s) && (s[j] == '_' || 'a' <= s[j] && s[j] <= 'z' || 'A' <= s[j] && s[j] <= 'Z' || '0' <= s[j] && s[j] <= '9') {
			j++
		}
		return s[i:j], nil
	case strings.IndexByte("0123456789@*#?$!-", c) >= 0:
		return s[i : i+2], nil
	}
	return "$", nil
}
