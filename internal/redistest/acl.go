package redistest

import (
	"fmt"
	"os"
	"slices"
	"strings"
)

// DocACL returns the ACL SETUSER lines of the "Least privilege" section of
// the Markdown file at path (docs/redis.md), split into command arguments
// with PASSWORD replaced by password. A selector in parentheses ("(~key
// +get +setnx)") is one argument, as ACL SETUSER takes it. The first line
// is the user every deployment needs; the others add what optional
// features need.
func DocACL(path, password string) ([][]string, error) {
	doc, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## Least privilege\n")
	if !ok {
		return nil, fmt.Errorf("redistest: %s has no Least privilege section", path)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var lines [][]string
	for _, l := range strings.Split(section, "\n") {
		if !strings.HasPrefix(l, "ACL SETUSER envoy-rls ") {
			continue
		}
		args, err := aclArgs(strings.ReplaceAll(l, ">PASSWORD", ">"+password))
		if err != nil {
			return nil, fmt.Errorf("redistest: %s: %q: %w", path, l, err)
		}
		lines = append(lines, args)
	}
	if len(lines) < 2 {
		return nil, fmt.Errorf("redistest: %s: Least privilege: ACL lines %q, want the base line and the optional ones", path, lines)
	}
	return lines, nil
}

// OptionalACL returns the first optional line of lines (DocACL's: every
// line after the base one) that holds grant, such as "+fcall".
func OptionalACL(lines [][]string, grant string) ([]string, error) {
	for _, l := range lines[min(1, len(lines)):] {
		if slices.Contains(l, grant) {
			return l, nil
		}
	}
	return nil, fmt.Errorf("redistest: no optional ACL line grants %s", grant)
}

// aclArgs splits an ACL SETUSER line at spaces outside parentheses.
func aclArgs(line string) ([]string, error) {
	var args []string
	depth, start := 0, -1
	for i, r := range line {
		switch {
		case r == '(':
			depth++
		case r == ')':
			if depth--; depth < 0 {
				return nil, fmt.Errorf("unbalanced ')' at %d", i)
			}
		}
		if r == ' ' && depth == 0 {
			if start >= 0 {
				args = append(args, line[start:i])
				start = -1
			}
		} else if start < 0 {
			start = i
		}
	}
	if depth != 0 {
		return nil, fmt.Errorf("unbalanced '('")
	}
	if start >= 0 {
		args = append(args, line[start:])
	}
	return args, nil
}
