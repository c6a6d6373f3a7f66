package descriptors

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"

	"gopkg.in/yaml.v3"
)

// This file turns the YAML of one rule file into the raw model below. It
// walks yaml.v3 nodes itself, rather than decoding into structs, so that every
// problem carries a line and a column and so that all problems of a file are
// reported together. Each mapping is read by one switch over its keys; a key
// that no case names is an error (the KnownFields(true) behaviour), so there
// is no second, hand-kept list of valid keys.

// Limits that keep a hostile or broken file from costing unbounded time or
// memory.
const (
	// MaxFileSize bounds one rule file.
	MaxFileSize = 8 << 20
	// MaxDepth bounds the nesting of descriptors (and so the number of
	// entries a request descriptor can usefully carry).
	MaxDepth = 64
	// maxNodes bounds the work of parsing and compiling one file: one unit
	// per YAML node visited (an alias is walked each time it is used) plus,
	// per descriptor, its nesting depth (the compiler's work per rule grows
	// with it).
	maxNodes = 1_000_000
)

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
	pos            pos
	key            string
	value          string
	valuePos       pos
	limit          *rawLimit
	policy         string
	policyPos      pos
	children       []*rawDesc
	shadow         bool
	quota          bool
	share          bool
	sharePos       pos
	detailed       bool
	valueToMetric  bool
	metadata       map[string]any
	hasDescriptors bool
	colocate       string
	colocatePos    pos
}

type nameRef struct {
	name string
	pos  pos
}

// rawLimit is one rate_limit block (or one entry of `policies:`). A field's
// *Pos is non-zero when the key was present.
type rawLimit struct {
	pos pos

	unit               string
	unitPos            pos
	rpu                uint32
	rpuPos             pos
	unlimited          bool
	unlimitedPos       pos
	name               string
	namePos            pos
	replaces           []nameRef
	replacesPos        pos
	unitMultiplier     uint32
	unitMultiplierPos  pos
	algorithm          string
	algorithmPos       pos
	burst              uint32
	burstPos           pos
	failureMode        string
	failureModePos     pos
	revision           uint32
	revisionPos        pos
	headers            string
	headersPos         pos
	extensionPositions []pos
}

func (p pos) set() bool { return p.line > 0 }

type parser struct {
	file   string
	ps     *problems
	budget int
	limit  int
}

var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// parseFile parses data as one rule file. It returns nil when the file is
// unusable; problems are added to ps either way.
func parseFile(name string, data []byte, ps *problems, budget int) (rf *rawFile) {
	p := &parser{file: name, ps: ps, budget: budget, limit: budget}
	if len(data) > MaxFileSize {
		p.ps.add(name, 0, 0, "file is larger than %d bytes", MaxFileSize)
		return nil
	}
	var doc yaml.Node
	var extra yaml.Node
	var err, err2 error
	func() {
		// yaml.v3 reports errors by panicking internally and recovering; a
		// panic that escapes it on some odd input must not take the service
		// down with it.
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("yaml: the YAML parser failed on this input: %v", r)
			}
		}()
		dec := yaml.NewDecoder(bytes.NewReader(data))
		err = dec.Decode(&doc)
		if err == nil {
			err2 = dec.Decode(&extra)
		}
	}()
	if errors.Is(err, io.EOF) {
		p.ps.add(name, 0, 0, "file is empty: a rule file needs a domain")
		return nil
	}
	if err != nil {
		p.yamlError(err)
		return nil
	}
	if err2 == nil {
		p.ps.add(name, extra.Line, extra.Column, "a rule file holds one YAML document; found a second one")
		return nil
	}
	if !errors.Is(err2, io.EOF) {
		p.yamlError(err2)
		return nil
	}
	root := &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			p.ps.add(name, 0, 0, "file is empty: a rule file needs a domain")
			return nil
		}
		root = root.Content[0]
	}
	rf = p.root(root)
	if p.budget <= 0 {
		return nil // too complex: do not compile what was read
	}
	return rf
}

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

func (p *parser) root(n *yaml.Node) *rawFile {
	rf := &rawFile{name: p.file}
	var domainSeen bool
	ok := p.mapping(n, "the file", func(key string, k, v *yaml.Node) {
		switch key {
		case "domain":
			domainSeen = true
			rf.domainPos = at(k)
			if s, ok := p.str(v, "domain"); ok {
				rf.domain = s
				if s == "" {
					p.errorf(k, "domain must not be empty")
				}
			}
		case "descriptors":
			rf.descriptors = p.descriptorList(v, 1)
		case "policies":
			p.policies(v, rf)
		default:
			p.errorf(k, "unknown key %q at the top level (expected domain, descriptors, policies)", key)
		}
	})
	if !ok {
		return nil
	}
	if !domainSeen {
		r := p.resolve(n)
		if r != nil {
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
			p.ps.add(p.file, rl.namePos.line, rl.namePos.col, "policies.%s: name is not allowed in a named policy (name identifies a descriptor rule; set it in the descriptor's rate_limit)", name)
		}
		if rl.replacesPos.set() {
			p.ps.add(p.file, rl.replacesPos.line, rl.replacesPos.col, "policies.%s: replaces is not allowed in a named policy (set it in the descriptor's rate_limit)", name)
		}
		rf.policies[name] = rl
		rf.policyOrder = append(rf.policyOrder, name)
	})
}

func (p *parser) descriptorList(n *yaml.Node, depth int) []*rawDesc {
	n = p.resolve(n)
	if n == nil || isNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, "descriptors must be a list, got %s", describe(n))
		return nil
	}
	if depth > MaxDepth {
		p.errorf(n, "descriptors are nested more than %d levels deep", MaxDepth)
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
	if !p.charge(n, depth) {
		return nil
	}
	d := &rawDesc{pos: at(n)}
	var keySeen bool
	ok := p.mapping(n, "a descriptor", func(key string, k, v *yaml.Node) {
		switch key {
		case "key":
			keySeen = true
			if s, ok := p.str(v, "key"); ok {
				d.key = s
				if s == "" {
					p.errorf(k, "descriptor key must not be empty")
				}
			}
		case "value":
			d.valuePos = at(k)
			d.value, _ = p.str(v, "value")
		case "rate_limit":
			// `rate_limit:` with no value is no limit, as in the reference.
			if r := p.resolve(v); r != nil && !isNull(r) {
				d.limit = p.rateLimit(r, "rate_limit")
			}
		case "policy":
			d.policyPos = at(k)
			if s, ok := p.str(v, "policy"); ok {
				d.policy = s
				if s == "" {
					p.errorf(k, "policy must name an entry of the top-level policies map")
				}
			}
		case "descriptors":
			d.hasDescriptors = true
			d.children = p.descriptorList(v, depth+1)
		case "shadow_mode":
			d.shadow, _ = p.boolean(v, "shadow_mode")
		case "quota_mode":
			d.quota, _ = p.boolean(v, "quota_mode")
		case "share_threshold":
			d.sharePos = at(k)
			d.share, _ = p.boolean(v, "share_threshold")
		case "detailed_metric":
			d.detailed, _ = p.boolean(v, "detailed_metric")
		case "value_to_metric":
			d.valueToMetric, _ = p.boolean(v, "value_to_metric")
		case "metadata":
			d.metadata = p.metadata(v)
		case "colocate":
			d.colocatePos = at(k)
			if s, ok := p.str(v, "colocate"); ok {
				d.colocate = s
				if s == "" {
					p.errorf(k, "colocate must name a descriptor key")
				}
			}
		default:
			p.errorf(k, "unknown key %q in a descriptor (expected key, value, rate_limit, policy, descriptors, shadow_mode, quota_mode, share_threshold, detailed_metric, value_to_metric, metadata, colocate)", key)
		}
	})
	if !ok {
		return nil
	}
	if !keySeen {
		p.errorf(n, "descriptor has no key")
	}
	return d
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

// spend walks a subtree, charging the budget; it reports whether the budget
// ran out.
func (p *parser) spend(n *yaml.Node) bool {
	n = p.resolve(n)
	if n == nil {
		return true
	}
	for _, c := range n.Content {
		if p.spend(c) {
			return true
		}
	}
	return false
}

func (p *parser) rateLimit(n *yaml.Node, what string) *rawLimit {
	n = p.resolve(n)
	if n == nil {
		return nil
	}
	if isNull(n) {
		p.errorf(n, "%s must be a mapping, got null", what)
		return nil
	}
	rl := &rawLimit{pos: at(n)}
	ext := func(k *yaml.Node) pos {
		ps := at(k)
		rl.extensionPositions = append(rl.extensionPositions, ps)
		return ps
	}
	ok := p.mapping(n, what, func(key string, k, v *yaml.Node) {
		switch key {
		case "unit":
			rl.unitPos = at(k)
			rl.unit, _ = p.str(v, "unit")
		case "requests_per_unit":
			rl.rpuPos = at(k)
			rl.rpu, _ = p.uint32(v, "requests_per_unit", 0)
		case "unlimited":
			rl.unlimitedPos = at(k)
			rl.unlimited, _ = p.boolean(v, "unlimited")
		case "name":
			rl.namePos = at(k)
			rl.name, _ = p.str(v, "name")
		case "replaces":
			rl.replacesPos = at(k)
			rl.replaces = p.replaces(v)
		case "unit_multiplier":
			rl.unitMultiplierPos = ext(k)
			rl.unitMultiplier, _ = p.uint32(v, "unit_multiplier", 1)
		case "algorithm":
			rl.algorithmPos = ext(k)
			rl.algorithm, _ = p.str(v, "algorithm")
		case "burst":
			rl.burstPos = ext(k)
			rl.burst, _ = p.uint32(v, "burst", 1)
		case "failure_mode":
			rl.failureModePos = ext(k)
			rl.failureMode, _ = p.str(v, "failure_mode")
		case "revision":
			rl.revisionPos = ext(k)
			rl.revision, _ = p.uint32(v, "revision", 1)
		case "headers":
			rl.headersPos = ext(k)
			rl.headers, _ = p.str(v, "headers")
		default:
			p.errorf(k, "unknown key %q in %s (expected unit, requests_per_unit, unlimited, name, replaces, unit_multiplier, algorithm, burst, failure_mode, revision, headers)", key, what)
		}
	})
	if !ok {
		return nil
	}
	return rl
}

func (p *parser) replaces(n *yaml.Node) []nameRef {
	n = p.resolve(n)
	if n == nil || isNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, "replaces must be a list of {name: ...}, got %s", describe(n))
		return nil
	}
	var out []nameRef
	for _, c := range n.Content {
		c = p.resolve(c)
		if c == nil {
			return out
		}
		ref := nameRef{pos: at(c)}
		var seen bool
		p.mapping(c, "a replaces entry", func(key string, k, v *yaml.Node) {
			switch key {
			case "name":
				seen = true
				ref.name, _ = p.str(v, "replaces.name")
			default:
				p.errorf(k, "unknown key %q in a replaces entry (expected name)", key)
			}
		})
		if c.Kind == yaml.MappingNode && !seen {
			p.errorf(c, "a replaces entry needs a name")
			continue
		}
		if c.Kind == yaml.MappingNode && ref.name == "" {
			p.errorf(c, "should not have an empty replaces entry")
			continue
		}
		if c.Kind == yaml.MappingNode {
			out = append(out, ref)
		}
	}
	return out
}
