package descriptors

import (
	"errors"
	"io"

	"gopkg.in/yaml.v3"
)

// This file turns the YAML of one rule file into the raw model below. It
// walks yaml.v3 nodes itself, rather than decoding into structs, so that every
// problem carries a line and a column and so that all problems of a file are
// reported together. Each kind of mapping is read through one table of its
// keys (see field); a key the table does not hold is an error (the
// KnownFields(true) behaviour), and the valid keys a message lists are read
// from the same table.

// maxFileSize bounds one rule file, so that a hostile or broken file
// cannot cost unbounded memory (reader.go bounds the work of reading it).
const maxFileSize = 8 << 20

type pos struct{ line, col int }

func at(n *yaml.Node) pos { return pos{n.Line, n.Column} }

// rawFile is one parsed rule file.
type rawFile struct {
	name        string
	domain      string
	domainPos   pos
	policies    map[string]*rawLimit
	policyOrder []string
	descriptors []*rawDesc
}

type rawDesc struct {
	pos           pos
	depth         int // 1 at the top of the file
	key           string
	keyPos        pos
	value         string
	valuePos      pos
	limit         *rawLimit
	limitPos      pos
	limits        []*rawLimit // rate_limits (see ratelimits.go)
	limitsPos     pos
	policy        string
	policyPos     pos
	children      []*rawDesc
	shadow        bool
	quota         bool
	share         bool
	sharePos      pos
	detailed      bool
	valueToMetric bool
	metadata      map[string]any
	colocate      string
	colocatePos   pos
}

// rootFields are the keys at the top of a rule file.
var rootFields = fields[rawFile]{
	nonEmptyField("domain", "domain must not be empty", func(f *rawFile) (*string, *pos) { return &f.domain, &f.domainPos }),
	{"descriptors", func(p *parser, f *rawFile, _, v *yaml.Node) { f.descriptors = p.descriptorList(v, 1) }},
	{"policies", func(p *parser, f *rawFile, _, v *yaml.Node) { p.policies(v, f) }},
}

// descriptorFields are the keys of a descriptor. It is a function, not a
// variable, because its descriptors key reads descriptors again.
func descriptorFields() fields[rawDesc] {
	return fields[rawDesc]{
		nonEmptyField("key", "descriptor key must not be empty", func(d *rawDesc) (*string, *pos) { return &d.key, &d.keyPos }),
		strField("value", func(d *rawDesc) (*string, *pos) { return &d.value, &d.valuePos }),
		{"rate_limit", func(p *parser, d *rawDesc, k, v *yaml.Node) {
			d.limitPos = at(k)
			// `rate_limit:` with no value is no limit, as in the reference.
			if r := p.resolve(v); r != nil && !isNull(r) {
				d.limit = p.rateLimit(r, "rate_limit")
			}
		}},
		nodeField("rate_limits", (*parser).rateLimitList, func(d *rawDesc) (*[]*rawLimit, *pos) { return &d.limits, &d.limitsPos }),
		nonEmptyField("policy", "policy must name an entry of the top-level policies map", func(d *rawDesc) (*string, *pos) { return &d.policy, &d.policyPos }),
		{"descriptors", func(p *parser, d *rawDesc, _, v *yaml.Node) { d.children = p.descriptorList(v, d.depth+1) }},
		boolField("shadow_mode", func(d *rawDesc) (*bool, *pos) { return &d.shadow, nil }),
		boolField("quota_mode", func(d *rawDesc) (*bool, *pos) { return &d.quota, nil }),
		boolField("share_threshold", func(d *rawDesc) (*bool, *pos) { return &d.share, &d.sharePos }),
		boolField("detailed_metric", func(d *rawDesc) (*bool, *pos) { return &d.detailed, nil }),
		boolField("value_to_metric", func(d *rawDesc) (*bool, *pos) { return &d.valueToMetric, nil }),
		nodeField("metadata", (*parser).metadata, func(d *rawDesc) (*map[string]any, *pos) { return &d.metadata, nil }),
		nonEmptyField("colocate", "colocate must name a descriptor key", func(d *rawDesc) (*string, *pos) { return &d.colocate, &d.colocatePos }),
	}
}

func (p pos) set() bool { return p.line > 0 }

type parser struct {
	reader
	data []byte
	read int // bytes of data the YAML parser read
}

// parseFile parses data as one rule file. It returns nil when the file is
// unusable; problems are added to ps either way. count, if not nil, counts
// its descriptors.
func parseFile(name string, data []byte, ps *problems, budget int, count *descCount) (rf *rawFile) {
	p := &parser{reader: newReader(name, ps, count, budget, "file is too complex (more than %d YAML nodes, aliases expanded, and nesting levels)"), data: data}
	if len(data) > maxFileSize {
		p.problem(pos{}, "file is larger than %d bytes", maxFileSize)
		return nil
	}
	// Count before parsing: the parser's tree costs many times the bytes
	// of a file dense in tokens (docs/config.md gives the measured memory),
	// and is built whole before any of it can be looked at.
	if countTokens(data, maxTokens) > maxTokens {
		p.problem(pos{}, "file is too complex (more than %d YAML tokens: scalars, aliases and the indicators -, ?, :, [ and {)", maxTokens)
		return nil
	}
	var doc yaml.Node
	var extra yaml.Node
	// One byte per read, so that how far the parser read tells where a
	// syntax error is (see syntaxPosition); it costs no measurable time
	// next to the parsing itself.
	r := &byteReader{data: data}
	err, err2 := decodeDocs(r, &doc, &extra)
	p.read = r.off
	if errors.Is(err, io.EOF) {
		p.problem(pos{}, "file is empty: a rule file needs a domain")
		return nil
	}
	if err != nil {
		p.yamlError(err)
		return nil
	}
	if err2 == nil {
		p.errorf(&extra, "a rule file holds one YAML document; found a second one")
		return nil
	}
	if !errors.Is(err2, io.EOF) {
		p.yamlError(err2)
		return nil
	}
	root := &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			p.problem(pos{}, "file is empty: a rule file needs a domain")
			return nil
		}
		root = root.Content[0]
	}
	rf = p.root(root)
	if p.spent() {
		return nil // too complex: do not compile what was read
	}
	return rf
}

func (p *parser) root(n *yaml.Node) *rawFile {
	rf := &rawFile{name: p.file}
	if !rootFields.read(p, n, "the file", "at the top level", rf) {
		return nil
	}
	if !rf.domainPos.set() {
		if r := p.resolve(n); r != nil {
			p.errorf(r, "the file has no domain")
		}
	}
	return rf
}

func (p *parser) policies(n *yaml.Node, rf *rawFile) {
	rf.policies = map[string]*rawLimit{}
	p.mapping(n, "policies", func(name string, k, v *yaml.Node) {
		if name == "" {
			p.errorf(k, "a policy name must not be empty")
			return
		}
		rl := p.rateLimit(v, "policies."+name)
		if rl == nil {
			return
		}
		if rl.namePos.set() {
			p.problem(rl.namePos, "policies.%s: name is not allowed in a named policy (name identifies a descriptor rule; set it in the descriptor's rate_limit)", name)
		}
		if rl.replacesPos.set() {
			p.problem(rl.replacesPos, "policies.%s: replaces is not allowed in a named policy (set it in the descriptor's rate_limit)", name)
		}
		rf.policies[name] = rl
		rf.policyOrder = append(rf.policyOrder, name)
	})
}

func (p *parser) descriptorList(n *yaml.Node, depth int) []*rawDesc {
	if n = p.sequence(n, "descriptors must be a list"); n == nil {
		return nil
	}
	if !p.nest(at(n), depth) {
		return nil
	}
	out := make([]*rawDesc, 0, len(n.Content))
	for _, c := range n.Content {
		if d := p.descriptor(c, depth); d != nil {
			out = append(out, d)
		}
	}
	return out
}

func (p *parser) descriptor(n *yaml.Node, depth int) *rawDesc {
	n = p.resolve(n)
	if n == nil {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		p.errorf(n, "a descriptor must be a mapping, got %s", describe(n))
		return nil
	}
	if !p.enter(at(n), depth) {
		return nil
	}
	d := &rawDesc{pos: at(n), depth: depth}
	if !descriptorFields().read(p, n, "a descriptor", "in a descriptor", d) {
		return nil
	}
	if !d.keyPos.set() {
		p.errorf(n, "descriptor has no key")
	}
	return p.keep(d)
}

func (p *parser) metadata(n *yaml.Node) map[string]any {
	r := p.resolve(n)
	if r == nil || isNull(r) {
		return nil
	}
	if r.Kind != yaml.MappingNode {
		p.errorf(r, "metadata must be a mapping, got %s", describe(r))
		return nil
	}
	// Spend the budget on the metadata subtree too: yaml.v3 expands aliases
	// while decoding it.
	if p.spend(r) {
		return nil
	}
	var m map[string]any
	if err := r.Decode(&m); err != nil {
		p.errorf(r, "metadata: %v", err)
		return nil
	}
	return m
}
