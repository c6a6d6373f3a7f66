package descriptors

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Problem is one reason a rule file or a Document was rejected. Line and
// Column are 1-based; 0 means "unknown" (for example, a file that could not
// be read). In a Document, Field is the path of the field at fault (for
// example descriptors[1].rate_limit.unit) and Line and Column are 0.
type Problem struct {
	File   string `json:"file"`
	Line   int    `json:"line,omitempty"`
	Column int    `json:"column,omitempty"`
	Field  string `json:"field,omitempty"`
	Reason string `json:"reason"`
}

// String formats the problem as file:line:col: reason, leaving out unknown
// positions, or as name:field: reason for a Document.
func (p Problem) String() string {
	switch {
	case p.Field != "":
		return fmt.Sprintf("%s:%s: %s", p.File, p.Field, p.Reason)
	case p.Line > 0 && p.Column > 0:
		return fmt.Sprintf("%s:%d:%d: %s", p.File, p.Line, p.Column, p.Reason)
	case p.Line > 0:
		return fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.Reason)
	}
	return fmt.Sprintf("%s: %s", p.File, p.Reason)
}

// ConfigError lists every problem found while loading rule files. Load
// collects as many problems as it can instead of stopping at the first.
type ConfigError struct {
	Problems []Problem
}

// Error prints one problem per line, file:line:col: reason.
func (e *ConfigError) Error() string {
	var b strings.Builder
	for i, p := range e.Problems {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(p.String())
	}
	return b.String()
}

// Is makes errors.Is(err, errInvalidConfig) true for every *ConfigError.
func (e *ConfigError) Is(target error) bool { return target == errInvalidConfig }

// errInvalidConfig is matched by every *ConfigError.
var errInvalidConfig = errors.New("descriptors: invalid configuration")

// ErrSecret is returned when Options.Secret is missing or too short.
var ErrSecret = fmt.Errorf("descriptors: the HMAC secret must be at least %d bytes", MinSecretLength)

// problems collects Problems; it caps their number so that a hostile file
// cannot make the error itself unbounded.
type problems struct {
	list    []Problem
	seen    map[Problem]bool
	dropped int
	// fields holds, by Document name, the fields that the line of a
	// position in that Document numbers (see docFields).
	fields map[string]docFields
}

const maxProblems = 200

func (ps *problems) add(file string, line, col int, format string, args ...any) {
	p := Problem{File: file, Line: line, Column: col, Reason: fmt.Sprintf(format, args...)}
	if ps.seen[p] {
		return // the same problem reached again through an alias
	}
	if len(ps.list) >= maxProblems {
		ps.dropped++
		return
	}
	if ps.seen == nil {
		ps.seen = map[Problem]bool{}
	}
	ps.seen[p] = true
	ps.list = append(ps.list, p)
}

func (ps *problems) err() error {
	if len(ps.list) == 0 {
		return nil
	}
	list := slices.Clone(ps.list)
	slices.SortStableFunc(list, func(a, b Problem) int {
		return cmp.Or(cmp.Compare(a.File, b.File), cmp.Compare(a.Line, b.Line), cmp.Compare(a.Column, b.Column))
	})
	for i, p := range list {
		if f, ok := ps.fields[p.File].path(p.Line); ok {
			list[i].Field, list[i].Line, list[i].Column = f, 0, 0
		}
	}
	if ps.dropped > 0 {
		list = append(list, Problem{File: list[len(list)-1].File, Reason: fmt.Sprintf("%d more problems not shown", ps.dropped)})
	}
	return &ConfigError{Problems: list}
}
