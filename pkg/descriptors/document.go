package descriptors

import (
	"fmt"
	"hash"
	"slices"
	"strconv"
	"strings"
)

// Document is one rule document given as values instead of YAML text: what
// a source of structured rules (an xDS server's RateLimitConfig resources,
// see package xds) fills. It holds the fields of the reference service's
// rule files; Compile validates it exactly as the same rules in a file.
type Document struct {
	// Name is what problems and rule sources are reported against; unique
	// among the Documents compiled together. (Required)
	Name string
	// Domain is the domain of every descriptor. (Required)
	Domain      string
	Descriptors []DocDescriptor
}

// DocDescriptor is one descriptor of a Document: key, value, rate_limit,
// nested descriptors, shadow_mode and detailed_metric of a rule file.
type DocDescriptor struct {
	// Key is the entry key. (Required)
	Key string
	// Value is the entry value; "" matches every value, a value with '*'
	// is a wildcard. (Optional)
	Value string
	// RateLimit is the descriptor's limit (Optional; nil: the descriptor
	// only holds nested descriptors).
	RateLimit      *DocLimit
	Descriptors    []DocDescriptor
	ShadowMode     bool
	DetailedMetric bool
}

// DocLimit is the rate_limit of a DocDescriptor. A zero field is a field
// the rule file leaves out, except RequestsPerUnit, which is left out only
// when zero with Unlimited.
type DocLimit struct {
	// Unit is second, minute, hour, day, week, month or year, in any case.
	Unit            string
	RequestsPerUnit uint32
	Unlimited       bool
	// Name names the rule for Replaces.
	Name string
	// Replaces names the rules of the domain this one replaces.
	Replaces []string
}

// Compile compiles Documents as one rule set with the compiler of Load:
// the same validation, Options.Limits, policy IDs and subject digests as
// the same rules in files. Documents are compiled in name order; two with
// the same name are refused. A problem is reported as name:field: reason
// (Problem.Field). For Limits.MaxBytes a Document weighs the bytes of its
// strings; the work of compiling one Document is bounded as a file's is
// (one unit per field, plus its depth per descriptor). An empty list
// compiles to a snapshot without domains.
func Compile(docs []Document, opts Options) (*Snapshot, error) {
	return compileBudget(docs, opts, maxNodes)
}

// compileBudget is Compile with a per-Document work budget.
func compileBudget(docs []Document, opts Options, budget int) (*Snapshot, error) {
	if len(opts.Secret) < MinSecretLength {
		return nil, ErrSecret
	}
	lim := opts.Limits.withDefaults()
	sorted := make([]*Document, len(docs))
	for i := range docs {
		sorted[i] = &docs[i]
	}
	slices.SortStableFunc(sorted, func(a, b *Document) int { return strings.Compare(a.Name, b.Name) })
	for i := 1; i < len(sorted); i++ {
		if sorted[i].Name == sorted[i-1].Name {
			return nil, fmt.Errorf("descriptors: two rule documents are named %q", sorted[i].Name)
		}
	}
	ps := problems{fields: make(map[string]docFields, len(docs))}
	count := &descCount{max: lim.MaxDescriptors}
	b := &docBuilder{h: newFingerprint()}
	files := make([]*rawFile, 0, len(sorted))
	names := make([]string, 0, len(sorted))
	for _, doc := range sorted {
		b.reader = newReader(doc.Name, &ps, count, budget, "document is too complex (more than %d fields and nesting levels)")
		if rf := b.document(doc); rf != nil && !count.over() {
			files = append(files, rf)
		}
		names = append(names, doc.Name)
	}
	if b.bytes > lim.MaxBytes {
		return nil, &LimitError{Limit: limitBytes, Max: lim.MaxBytes, Total: b.bytes, Files: len(docs)}
	}
	if count.over() {
		return nil, &LimitError{Limit: LimitDescriptors, Max: int64(count.max), Total: int64(count.n), Files: len(docs)}
	}
	var fp [32]byte
	b.h.Sum(fp[:0])
	return assemble(files, names, fp, &ps, opts)
}

// docFields is a Document's table of fields. A position in a Document
// numbers a field: its line is the field's index (from 1) in the table, its
// column 0; the problems, rule sources and explanations name the field
// from the table. A field is its name within its parent (a list's element
// has no name, only an index), so the table costs the same per field at
// any depth.
type docFields []docField

type docField struct {
	parent int32 // line of the parent field; 0 at the top level
	index  int32 // the index of a list's element; -1 for a named field
	name   string
}

// path is the field at line, e.g. descriptors[1].rate_limit.unit.
func (t docFields) path(line int) (string, bool) {
	if line < 1 || line > len(t) {
		return "", false
	}
	var chain []docField
	for l := line; l > 0; l = int(t[l-1].parent) {
		chain = append(chain, t[l-1])
	}
	var b strings.Builder
	for i := len(chain) - 1; i >= 0; i-- {
		f := chain[i]
		if f.index >= 0 {
			b.WriteString("[" + strconv.Itoa(int(f.index)) + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(f.name)
	}
	return b.String(), true
}

// docBuilder turns Documents into the parser's model, numbering their
// fields (docFields); the reader of the Document charges one unit per
// field. It weighs the strings and hashes every field (length-prefixed,
// lists with their length) for the fingerprint.
type docBuilder struct {
	reader
	h      hash.Hash
	bytes  int64
	fields docFields
}

func (b *docBuilder) document(doc *Document) *rawFile {
	b.fields = nil
	b.str(doc.Name)
	rf := &rawFile{name: doc.Name, domain: b.str(doc.Domain), domainPos: b.at(0, "domain")}
	if doc.Domain == "" {
		b.problem(rf.domainPos, "domain must not be empty")
	}
	rf.descriptors = b.descriptors(doc.Descriptors, 0, 1)
	b.ps.fields[doc.Name] = b.fields
	if b.spent() {
		return nil // too complex: do not compile what was converted
	}
	return rf
}

// descriptors converts the list ds, a field of the field at line parent.
func (b *docBuilder) descriptors(ds []DocDescriptor, parent, depth int) []*rawDesc {
	b.num(uint32(len(ds)))
	if len(ds) == 0 {
		return nil
	}
	list := b.at(parent, "descriptors")
	if !b.nest(list, depth) {
		return nil
	}
	out := make([]*rawDesc, 0, len(ds))
	for i := 0; i < len(ds) && !b.spent(); i++ {
		if rd := b.descriptor(&ds[i], b.elem(list, i), depth); rd != nil {
			out = append(out, rd)
		}
	}
	return out
}

func (b *docBuilder) descriptor(d *DocDescriptor, at pos, depth int) *rawDesc {
	if !b.enter(at, depth) {
		return nil
	}
	rd := &rawDesc{pos: at, depth: depth, key: b.str(d.Key), value: b.str(d.Value), shadow: b.flag(d.ShadowMode), detailed: b.flag(d.DetailedMetric)}
	if d.Key == "" {
		b.problem(b.at(at.line, "key"), "descriptor key must not be empty")
	}
	if b.flag(d.RateLimit != nil) {
		rd.limitPos = b.at(at.line, "rate_limit")
		rd.limit = b.limit(d.RateLimit, rd.limitPos)
	}
	rd.children = b.descriptors(d.Descriptors, at.line, depth+1)
	return b.keep(rd)
}

func (b *docBuilder) limit(l *DocLimit, at pos) *rawLimit {
	rl := &rawLimit{pos: at, unit: b.str(l.Unit), rpu: b.num(l.RequestsPerUnit), unlimited: b.flag(l.Unlimited), name: b.str(l.Name)}
	if l.Unit != "" {
		rl.unitPos = b.at(at.line, "unit")
	}
	if !l.Unlimited || l.RequestsPerUnit != 0 {
		rl.rpuPos = b.at(at.line, "requests_per_unit")
	}
	if l.Unlimited {
		rl.unlimitedPos = b.at(at.line, "unlimited")
	}
	if l.Name != "" {
		rl.namePos = b.at(at.line, "name")
	}
	b.num(uint32(len(l.Replaces)))
	if len(l.Replaces) > 0 {
		rl.replacesPos = b.at(at.line, "replaces")
	}
	for i := 0; i < len(l.Replaces) && !b.spent(); i++ {
		name := l.Replaces[i]
		ref := nameRef{name: b.str(name), pos: b.elem(rl.replacesPos, i)}
		if name == "" {
			b.problem(ref.pos, "should not have an empty replaces entry")
			continue
		}
		rl.replaces = append(rl.replaces, ref)
	}
	return rl
}

// at numbers the field name of the field at line parent.
func (b *docBuilder) at(parent int, name string) pos {
	b.fields = append(b.fields, docField{parent: int32(parent), index: -1, name: name})
	b.charge(pos{line: len(b.fields)}, 1)
	return pos{line: len(b.fields)}
}

// elem numbers the element i of the list at p.
func (b *docBuilder) elem(list pos, i int) pos {
	b.fields = append(b.fields, docField{parent: int32(list.line), index: int32(i)})
	b.charge(pos{line: len(b.fields)}, 1)
	return pos{line: len(b.fields)}
}

func (b *docBuilder) str(s string) string {
	b.bytes += int64(len(s))
	writeField(b.h, []byte(s))
	return s
}

func (b *docBuilder) num(n uint32) uint32 {
	b.h.Write([]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
	return n
}

func (b *docBuilder) flag(v bool) bool {
	if v {
		b.h.Write([]byte{1})
	} else {
		b.h.Write([]byte{0})
	}
	return v
}

// where is the location of p in d's rule document: file:line, or
// name:field in a Document.
func (d *domain) where(p pos) string {
	if f, ok := d.fields.path(p.line); ok {
		return d.file + ":" + f
	}
	return d.file + ":" + strconv.Itoa(p.line)
}

// within is where without the document: "line N", or the field path.
func (d *domain) within(p pos) string {
	if f, ok := d.fields.path(p.line); ok {
		return f
	}
	return "line " + strconv.Itoa(p.line)
}
