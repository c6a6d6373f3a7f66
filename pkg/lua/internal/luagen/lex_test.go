package luagen

import (
	"fmt"
	"slices"
	"strings"
)

// This file reads Lua 5.1 source as far as the tests of the programs need: its
// tokens, the line span of each function, and the names a piece of code
// uses without declaring them (its free names).

// token is one Lua token: a name, keyword, number, string or operator.
// Comments and white space are dropped.
type token struct {
	Kind tokenKind
	Text string
	Line int
}

// tokenKind is the kind of a Token.
type tokenKind int

// The kinds of Token.
const (
	tokName tokenKind = iota
	tokKeyword
	tokNumber
	tokString
	tokOp
)

var keywords = map[string]bool{
	"and": true, "break": true, "do": true, "else": true, "elseif": true, "end": true, "false": true,
	"for": true, "function": true, "if": true, "in": true, "local": true, "nil": true, "not": true,
	"or": true, "repeat": true, "return": true, "then": true, "true": true, "until": true, "while": true,
}

// tokens splits src into tokens.
func tokens(src string) ([]token, error) {
	var out []token
	line := 1
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == '\n':
			line++
			i++
		case c == ' ' || c == '\t' || c == '\r':
			i++
		case strings.HasPrefix(src[i:], "--"):
			if n, ok := longBracket(src[i+2:]); ok {
				end := strings.Index(src[i+2+n:], "]"+strings.Repeat("=", n-2)+"]")
				if end < 0 {
					return nil, fmt.Errorf("line %d: unterminated long comment", line)
				}
				body := src[i : i+2+n+end+n]
				line += strings.Count(body, "\n")
				i += len(body)
				continue
			}
			for i < len(src) && src[i] != '\n' {
				i++
			}
		case c == '[' && isLong(src[i:]):
			n, _ := longBracket(src[i:])
			end := strings.Index(src[i+n:], "]"+strings.Repeat("=", n-2)+"]")
			if end < 0 {
				return nil, fmt.Errorf("line %d: unterminated long string", line)
			}
			body := src[i : i+n+end+n]
			out = append(out, token{tokString, body, line})
			line += strings.Count(body, "\n")
			i += len(body)
		case c == '\'' || c == '"':
			j := i + 1
			for j < len(src) && src[j] != c {
				if src[j] == '\\' {
					j++
				}
				if j < len(src) && src[j] == '\n' {
					return nil, fmt.Errorf("line %d: unterminated string", line)
				}
				j++
			}
			if j >= len(src) {
				return nil, fmt.Errorf("line %d: unterminated string", line)
			}
			out = append(out, token{tokString, src[i : j+1], line})
			i = j + 1
		case isDigit(c) || c == '.' && i+1 < len(src) && isDigit(src[i+1]):
			j := i
			for j < len(src) && (isNameByte(src[j]) || src[j] == '.' ||
				(src[j] == '-' || src[j] == '+') && (src[j-1] == 'e' || src[j-1] == 'E') && !strings.HasPrefix(src[i:], "0x")) {
				j++
			}
			out = append(out, token{tokNumber, src[i:j], line})
			i = j
		case isNameByte(c):
			j := i
			for j < len(src) && isNameByte(src[j]) {
				j++
			}
			kind := tokName
			if keywords[src[i:j]] {
				kind = tokKeyword
			}
			out = append(out, token{kind, src[i:j], line})
			i = j
		default:
			n := 1
			for _, op := range []string{"...", "..", "==", "~=", "<=", ">="} {
				if strings.HasPrefix(src[i:], op) {
					n = len(op)
					break
				}
			}
			out = append(out, token{tokOp, src[i : i+n], line})
			i += n
		}
	}
	return out, nil
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
func isNameByte(c byte) bool {
	return c == '_' || isDigit(c) || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func isLong(s string) bool { _, ok := longBracket(s); return ok }

// longBracket reports whether s starts with a long bracket "[[" or "[=*[",
// and its length.
func longBracket(s string) (int, bool) {
	if !strings.HasPrefix(s, "[") {
		return 0, false
	}
	n := 1
	for n < len(s) && s[n] == '=' {
		n++
	}
	if n < len(s) && s[n] == '[' {
		return n + 1, true
	}
	return 0, false
}

// funcSpan is one function of a Lua source: its name ("" when anonymous) and
// the lines of its first and last token.
type funcSpan struct {
	Name       string
	Start, End int
}

// Lines is the number of lines the function spans.
func (f funcSpan) Lines() int { return f.End - f.Start + 1 }

// functions lists the functions of src, in the order they end.
func functions(src string) ([]funcSpan, error) {
	toks, err := tokens(src)
	if err != nil {
		return nil, err
	}
	type open struct {
		kw   string
		fn   funcSpan
		line int
	}
	var stack []open
	var out []funcSpan
	for i, t := range toks {
		if t.Kind != tokKeyword {
			continue
		}
		switch t.Text {
		case "function":
			name := ""
			if i+1 < len(toks) && toks[i+1].Kind == tokName {
				name = toks[i+1].Text
			}
			stack = append(stack, open{kw: "function", fn: funcSpan{Name: name, Start: t.Line}})
		case "if", "do", "repeat":
			stack = append(stack, open{kw: t.Text, line: t.Line})
		case "end", "until":
			if len(stack) == 0 {
				return nil, fmt.Errorf("line %d: %s without a block", t.Line, t.Text)
			}
			top := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if (t.Text == "until") != (top.kw == "repeat") {
				return nil, fmt.Errorf("line %d: %s closes %s of line %d", t.Line, t.Text, top.kw, top.line)
			}
			if top.kw == "function" {
				top.fn.End = t.Line
				out = append(out, top.fn)
			}
		}
	}
	if len(stack) > 0 {
		return nil, fmt.Errorf("%d blocks not closed", len(stack))
	}
	return out, nil
}

// names is what a piece of Lua source declares and uses.
type names struct {
	// TopLevel: the names it declares local outside any block or function
	// (what it defines for the code after it).
	TopLevel []string
	// Free: the names it reads or assigns without declaring them anywhere
	// in it (globals and names another piece declares), each once.
	Free []string
	// Declared: every name it declares (locals, parameters, loop
	// variables), each once.
	Declared []string
}

// analyze returns what src declares at its top level and the names it uses
// free. A name counts as declared anywhere in src once any local, function
// parameter or loop variable of that name is; a field name (after '.' or
// ':', or a table constructor's key) is no use of a name.
func analyze(src string) (names, error) {
	toks, err := tokens(src)
	if err != nil {
		return names{}, err
	}
	declared := map[string]bool{}
	var names names
	depth := 0
	var braces []string
	params := false
	for i, t := range toks {
		prev := func(k int) token {
			if i-k >= 0 {
				return toks[i-k]
			}
			return token{}
		}
		switch t.Kind {
		case tokKeyword:
			switch t.Text {
			case "function", "if", "do", "repeat":
				depth++
			case "end", "until":
				depth--
			}
			if t.Text == "function" {
				params = true
			}
			continue
		case tokOp:
			switch t.Text {
			case "(", "{", "[":
				braces = append(braces, t.Text)
			case ")", "}", "]":
				if len(braces) > 0 {
					if braces[len(braces)-1] == "(" {
						params = false
					}
					braces = braces[:len(braces)-1]
				}
			}
			continue
		case tokName:
		default:
			continue
		}
		p := prev(1)
		if p.Kind == tokOp && (p.Text == "." || p.Text == ":") {
			continue
		}
		next := token{}
		if i+1 < len(toks) {
			next = toks[i+1]
		}
		if len(braces) > 0 && braces[len(braces)-1] == "{" && next.Kind == tokOp && next.Text == "=" &&
			p.Kind == tokOp && (p.Text == "{" || p.Text == "," || p.Text == ";") {
			continue // a table constructor's key
		}
		if decl, local, fn := declaresName(toks, i, params, braces); decl {
			declared[t.Text] = true
			// (A local function's name comes after its "function", which
			// opened its body.)
			if local && (!fn && depth == 0 || fn && depth == 1) {
				names.TopLevel = append(names.TopLevel, t.Text)
			}
			continue
		}
		names.Free = append(names.Free, t.Text)
	}
	seen := map[string]bool{}
	free := names.Free[:0]
	for _, n := range names.Free {
		if !declared[n] && !seen[n] {
			seen[n] = true
			free = append(free, n)
		}
	}
	names.Free = free
	for n := range declared {
		names.Declared = append(names.Declared, n)
	}
	slices.Sort(names.Declared)
	return names, nil
}

// declaresName reports whether the name token toks[i] is declared there (a
// local, a local function, a parameter or a loop variable), whether the
// declaration is a local statement's (which, at the top level, the source
// defines for the code after it) and whether it is a local function's.
func declaresName(toks []token, i int, params bool, braces []string) (decl, local, fn bool) {
	// Walk back over "name ," pairs to the token before the name list.
	j := i - 1
	for j >= 1 && toks[j].Kind == tokOp && toks[j].Text == "," && toks[j-1].Kind == tokName {
		j -= 2
	}
	if j < 0 {
		return false, false, false
	}
	b := toks[j]
	switch {
	case b.Kind == tokKeyword && b.Text == "local":
		return true, true, false
	case b.Kind == tokKeyword && b.Text == "function" && j >= 1 && toks[j-1].Kind == tokKeyword && toks[j-1].Text == "local":
		return true, true, true
	case b.Kind == tokKeyword && b.Text == "for":
		return true, false, false
	case b.Kind == tokOp && b.Text == "(" && params && len(braces) > 0 && braces[len(braces)-1] == "(" &&
		j >= 1 && (toks[j-1].Kind == tokKeyword && toks[j-1].Text == "function" || toks[j-1].Kind == tokName && j >= 2 && toks[j-2].Kind == tokKeyword && toks[j-2].Text == "function"):
		return true, false, false
	}
	return false, false, false
}
