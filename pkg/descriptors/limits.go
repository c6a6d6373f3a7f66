package descriptors

import (
	"errors"
	"fmt"
)

// Bounds of a whole rule set (every file of a --config directory together).
// They keep the memory of a load, and of a reload that runs while the
// previous rules are still in service, proportional to a size the operator
// chose: the compiled rules, and the YAML trees they are read from, grow
// with the number of descriptors.
const (
	// DefaultMaxBytes bounds the total size of the rule files: two files of
	// MaxFileSize.
	DefaultMaxBytes = 16 << 20
	// DefaultMaxDescriptors bounds the number of descriptors of all files,
	// nested ones included.
	DefaultMaxDescriptors = 100_000
	// maxTokens bounds the YAML tokens of one file (scalars, aliases, and
	// the indicators -, ?, :, [ and {), counted before the file is parsed:
	// the parser's tree holds at most about one node per token, so a file
	// rejected for this costs its bytes and one pass over them, not a tree.
	maxTokens = 1_000_000
)

// Limits bound a whole rule set. The zero value means the defaults.
type Limits struct {
	// MaxBytes bounds the total size of the rule files, in bytes.
	// (Optional, default DefaultMaxBytes)
	MaxBytes int64
	// MaxDescriptors bounds the number of descriptors of all files, nested
	// ones included. (Optional, default DefaultMaxDescriptors)
	MaxDescriptors int
}

// withDefaults fills the zero fields with the defaults.
func (l Limits) withDefaults() Limits {
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultMaxBytes
	}
	if l.MaxDescriptors <= 0 {
		l.MaxDescriptors = DefaultMaxDescriptors
	}
	return l
}

// What a LimitError bounds.
const (
	limitBytes       = "bytes"
	LimitDescriptors = "descriptors"
)

// errTooLarge is matched by every *LimitError.
var errTooLarge = errors.New("descriptors: the rule set is larger than its limit")

// LimitError is returned when a rule set as a whole is over one of its
// Limits. Nothing of it is compiled.
type LimitError struct {
	// Limit is LimitBytes or LimitDescriptors.
	Limit string
	// Max is the limit in force.
	Max int64
	// Total is what the rule files hold, measured over every file.
	Total int64
	// Files is the number of rule files.
	Files int
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("descriptors: the %d rule file(s) hold %d %s, more than the limit of %d", e.Files, e.Total, e.Limit, e.Max)
}

// Is makes errors.Is(err, errTooLarge) true.
func (e *LimitError) Is(target error) bool { return target == errTooLarge }

// countTokens counts the YAML tokens of data that can each stand for a node
// of the parsed tree: plain, quoted and block scalars, aliases, the block
// indicators "- ", "? " and ": ", and the flow openers [ and {. It stops
// as soon as the count passes limit. It is a lexical pass that never fails
// and never allocates, and errs on the high side (a plain scalar that
// continues over several lines counts once per line; in flow context every
// ":" counts); a syntax error is left for the parser to report. The tree
// has at most one node more per mapping than the count
// (TestCountTokensBoundsTheTree).
func countTokens(data []byte, limit int) int {
	n, flow := 0, 0
	i, lineStart := 0, true
	indent := 0 // indentation of the current line
	for i < len(data) && n <= limit {
		c := data[i]
		switch {
		case c == '\n':
			i++
			lineStart, indent = true, 0
			continue
		case c == ' ' || c == '\t' || c == '\r':
			if lineStart && c == ' ' {
				indent++
			}
			i++
			continue
		}
		atLineStart := lineStart
		lineStart = false
		switch {
		case c == '#':
			i = skipLine(data, i)
		case atLineStart && indent == 0 && (c == '%' || hasPrefix(data[i:], "---") || hasPrefix(data[i:], "...")):
			if c == '%' {
				i = skipLine(data, i)
			} else {
				i += 3
			}
		case c == '"':
			n++
			i = skipDoubleQuoted(data, i+1)
		case c == '\'':
			n++
			i = skipSingleQuoted(data, i+1)
		case c == '[' || c == '{':
			n++
			flow++
			i++
		case c == ']' || c == '}':
			flow = max(flow-1, 0)
			i++
		case c == ',':
			i++
		case (c == '-' || c == '?' || c == ':') && (i+1 == len(data) || isBlank(data[i+1]) || (flow > 0 && c == ':')):
			n++
			i++
			if c == '-' || c == '?' {
				// Content after "- " starts further right: it is the
				// indentation of what follows for block scalars.
				indent = i - lineStartOf(data, i) + 1
			}
		case c == '&' || c == '!':
			i = skipWord(data, i)
		case c == '*':
			n++
			i = skipWord(data, i)
		case (c == '|' || c == '>') && flow == 0:
			n++
			i = skipBlockScalar(data, skipLine(data, i), indent)
			lineStart, indent = true, 0
		default:
			n++
			i = skipPlain(data, i, flow > 0)
		}
	}
	return n
}

func hasPrefix(b []byte, s string) bool { return len(b) >= len(s) && string(b[:len(s)]) == s }

func isBlank(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func lineStartOf(data []byte, i int) int {
	for i > 0 && data[i-1] != '\n' {
		i--
	}
	return i
}

// skipLine returns the index of the newline ending the line of i (or
// len(data)).
func skipLine(data []byte, i int) int {
	for i < len(data) && data[i] != '\n' {
		i++
	}
	return i
}

func skipDoubleQuoted(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case '\\':
			i += 2
			continue
		case '"':
			return i + 1
		}
		i++
	}
	return i
}

func skipSingleQuoted(data []byte, i int) int {
	for i < len(data) {
		if data[i] == '\'' {
			if i+1 < len(data) && data[i+1] == '\'' {
				i += 2
				continue
			}
			return i + 1
		}
		i++
	}
	return i
}

func skipWord(data []byte, i int) int {
	for i < len(data) && !isBlank(data[i]) && data[i] != ',' && data[i] != ']' && data[i] != '}' {
		i++
	}
	return i
}

// skipPlain skips a plain scalar on one line: up to ": ", " #", the end of
// the line, and in flow context , [ ] { }.
func skipPlain(data []byte, i int, flow bool) int {
	for i < len(data) {
		c := data[i]
		switch {
		case c == '\n':
			return i
		case c == ':' && (i+1 == len(data) || isBlank(data[i+1]) || flow):
			return i
		case c == '#' && i > 0 && isBlank(data[i-1]):
			return i
		case flow && (c == ',' || c == '[' || c == ']' || c == '{' || c == '}'):
			return i
		}
		i++
	}
	return i
}

// skipBlockScalar skips the lines of a block scalar's content, starting at
// the newline that ends its header: empty lines and lines indented more
// than parent.
func skipBlockScalar(data []byte, i, parent int) int {
	for i < len(data) {
		// i is at a newline: look at the next line.
		j := i + 1
		sp := 0
		for j < len(data) && data[j] == ' ' {
			j++
			sp++
		}
		if j < len(data) && data[j] != '\n' && data[j] != '\r' && sp <= parent {
			return i
		}
		i = skipLine(data, j)
	}
	return i
}
