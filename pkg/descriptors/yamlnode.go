package descriptors

import (
	"errors"
	"regexp"
	"strconv"

	"gopkg.in/yaml.v3"
)

var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

func (p *parser) yamlError(err error) {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		for _, e := range te.Errors {
			p.lineError(e)
		}
		return
	}
	p.lineError(err.Error())
}

func (p *parser) lineError(msg string) {
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		p.ps.add(p.file, line, 0, "invalid YAML: %s", m[2])
		return
	}
	p.ps.add(p.file, 0, 0, "invalid YAML: %s", msg)
}

func (p *parser) errorf(n *yaml.Node, format string, args ...any) {
	p.ps.add(p.file, n.Line, n.Column, format, args...)
}

// resolve follows aliases and spends the node budget. It returns nil when
// the budget is exhausted (reported once).
func (p *parser) resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 100; i++ {
		n = n.Alias
	}
	if n == nil || n.Kind == yaml.AliasNode {
		return nil
	}
	if !p.charge(n, 1) {
		return nil
	}
	return n
}

// charge spends cost units of the budget; it reports (once) and returns
// false when the budget is exhausted.
func (p *parser) charge(n *yaml.Node, cost int) bool {
	if p.budget <= 0 {
		return false
	}
	p.budget -= cost
	if p.budget <= 0 {
		p.errorf(n, "file is too complex (more than %d YAML nodes, aliases expanded, and nesting levels)", p.limit)
		return false
	}
	return true
}

// mapping calls fn for each key of a mapping node, reporting duplicate and
// non-string keys. what names the mapping in messages.
func (p *parser) mapping(n *yaml.Node, what string, fn func(key string, k, v *yaml.Node)) bool {
	n = p.resolve(n)
	if n == nil {
		return false
	}
	if n.Kind != yaml.MappingNode {
		if isNull(n) {
			return true
		}
		p.errorf(n, "%s must be a mapping, got %s", what, describe(n))
		return false
	}
	seen := make(map[string]int, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := p.resolve(n.Content[i]), n.Content[i+1]
		if k == nil {
			return false
		}
		if k.Kind != yaml.ScalarNode {
			p.errorf(k, "%s: keys must be strings, got %s", what, describe(k))
			continue
		}
		if line, dup := seen[k.Value]; dup {
			p.errorf(k, "%s: key %q is repeated (first at line %d)", what, k.Value, line)
			continue
		}
		seen[k.Value] = k.Line
		fn(k.Value, k, v)
	}
	return true
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if isNull(n) {
			return "null"
		}
		return strconv.Quote(truncate(n.Value, 40))
	}
	return "an unsupported node"
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// str reads a scalar as a string, as the reference's decoder does: numbers
// and booleans keep their literal text, null is "".
func (p *parser) str(n *yaml.Node, field string) (string, bool) {
	n = p.resolve(n)
	if n == nil {
		return "", false
	}
	if n.Kind != yaml.ScalarNode {
		p.errorf(n, "%s must be a string, got %s", field, describe(n))
		return "", false
	}
	if isNull(n) {
		return "", true
	}
	return n.Value, true
}

func (p *parser) boolean(n *yaml.Node, field string) (bool, bool) {
	n = p.resolve(n)
	if n == nil {
		return false, false
	}
	var b bool
	if n.Kind != yaml.ScalarNode || n.Decode(&b) != nil {
		p.errorf(n, "%s must be true or false, got %s", field, describe(n))
		return false, false
	}
	return b, true
}

func (p *parser) uint32(n *yaml.Node, field string, minimum uint32) (uint32, bool) {
	n = p.resolve(n)
	if n == nil {
		return 0, false
	}
	var v int64
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" || n.Decode(&v) != nil {
		p.errorf(n, "%s must be an integer, got %s", field, describe(n))
		return 0, false
	}
	if v < int64(minimum) || v > 1<<32-1 {
		p.errorf(n, "%s must be between %d and %d, got %d", field, minimum, uint32(1<<32-1), v)
		return 0, false
	}
	return uint32(v), true
}
