package descriptors

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// yamlMsgRE splits yaml.v3's error text: "yaml: line N: message" or
// "yaml: message".
var yamlMsgRE = regexp.MustCompile(`^yaml: (?:line (\d+): )?(.*)$`)

// decodeDocs decodes the first two YAML documents of r: a rule file holds
// one, so err2 is io.EOF for a good file.
func decodeDocs(r io.Reader, doc, extra *yaml.Node) (err, err2 error) {
	// yaml.v3 reports errors by panicking internally and recovering; a
	// panic that escapes it on some odd input must not take the service
	// down with it.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("yaml: the YAML parser failed on this input: %v", r)
		}
	}()
	dec := yaml.NewDecoder(r)
	err = dec.Decode(doc)
	if err == nil {
		err2 = dec.Decode(extra)
	}
	return err, err2
}

// syntaxError is the first error of data's first two documents, or nil.
func syntaxError(r io.Reader) error {
	var doc, extra yaml.Node
	err, err2 := decodeDocs(r, &doc, &extra)
	switch {
	case err != nil && !errors.Is(err, io.EOF):
		return err
	case err2 != nil && !errors.Is(err2, io.EOF):
		return err2
	}
	return nil
}

// yamlError reports a syntax error of the YAML parser at its line and
// column (decoding into yaml.Node, it reports no type errors).
func (p *parser) yamlError(err error) {
	m := yamlMsgRE.FindStringSubmatch(err.Error())
	if m == nil {
		p.problem(pos{}, "invalid YAML: %s", err)
		return
	}
	context, _ := strconv.Atoi(m[1])
	line, col := syntaxPosition(p.data, p.read, m[2], context)
	switch {
	case line == 0:
		p.problem(pos{context, 0}, "invalid YAML: %s", m[2])
	case context > 0 && context < line:
		p.problem(pos{line, col}, "invalid YAML: %s (in the block that starts at line %d)", m[2], context)
	default:
		p.problem(pos{line, col}, "invalid YAML: %s", m[2])
	}
}

// positionWork bounds the bytes parsed again to place one syntax error, on
// top of two parses of the file: a small file gets the line and the column,
// a file of megabytes the line.
const positionWork = 4 << 20

// positionLines bounds the lines looked back from where the parser stopped
// reading.
const positionLines = 32

// syntaxPosition finds the line and column of the syntax error msg in data
// (0, 0 when it cannot), given read, the bytes the parser had read when it
// failed, one at a time. yaml.v3 puts in its messages the line where the
// enclosing construct starts (libyaml's context mark), not the line of the
// offending token, and no column; from is that line. The offending token
// is at or after it and ends before read, and it ends the shortest prefix
// of data that fails with the same message (an unclosed quote or bracket
// fails from its own line on). The search parses prefixes of data again,
// line by line back from read, then by halves within the line.
func syntaxPosition(data []byte, read int, msg string, from int) (line, col int) {
	work := positionWork + 2*len(data)
	fails := func(prefix []byte) bool {
		if work -= len(prefix); work < 0 {
			return false
		}
		err := syntaxError(bytes.NewReader(prefix))
		if err == nil {
			return false
		}
		m := yamlMsgRE.FindStringSubmatch(err.Error())
		return m != nil && m[2] == msg
	}
	if read <= 0 || read > len(data) {
		return 0, 0
	}
	starts := lineStarts(data)
	lineEnd := func(l int) int { // index after line l's newline (1-based l)
		if l < len(starts) {
			return starts[l]
		}
		return len(data)
	}
	l := sort.Search(len(starts), func(i int) bool { return starts[i] > read-1 }) // 1-based line of data[read-1]
	if !fails(data[:lineEnd(l)]) {
		return 0, 0
	}
	for k := 0; k < positionLines && l-1 >= max(from, 1) && fails(data[:lineEnd(l-1)]); k++ {
		l--
	}
	// The column: the shortest prefix of the line that fails.
	start, end := starts[l-1], lineEnd(l)
	for end > start && (data[end-1] == '\n' || data[end-1] == '\r') {
		end--
	}
	if !fails(data[:end]) {
		return l, 0
	}
	c := sort.Search(end-start, func(i int) bool { return fails(data[:start+i+1]) })
	if work < 0 {
		return l, 0
	}
	return l, c + 1
}

// lineStarts returns the index of the first byte of each line.
func lineStarts(data []byte) []int {
	starts := []int{0}
	for i, b := range data {
		if b == '\n' && i+1 < len(data) {
			starts = append(starts, i+1)
		}
	}
	return starts
}

// byteReader hands out one byte per Read, so that how much the parser has
// read tells where it stopped.
type byteReader struct {
	data []byte
	off  int
}

func (r *byteReader) Read(b []byte) (int, error) {
	if r.off >= len(r.data) {
		return 0, io.EOF
	}
	if len(b) == 0 {
		return 0, nil
	}
	b[0] = r.data[r.off]
	r.off++
	return 1, nil
}

func (p *parser) errorf(n *yaml.Node, format string, args ...any) {
	p.problem(at(n), format, args...)
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
	if !p.charge(at(n), 1) {
		return nil
	}
	return n
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

// A field is one key that a mapping of a rule file may hold, with how its
// value is read into T, the raw model of that mapping. The fields of a
// mapping are one table (rootFields, descriptorFields, limitFields,
// penaltyFields, replacesFields): the parser reads a key only through its
// table, and the keys an "unknown key" message lists come from it, in its
// order.
type field[T any] struct {
	key  string
	read func(p *parser, t *T, k, v *yaml.Node)
}

// fields is the table of one kind of mapping.
type fields[T any] []field[T]

// read reads mapping n into t, each key by its field; a key with no field is
// an error. what names the mapping in messages ("rate_limit"), where says
// where an unknown key stands ("in rate_limit"). It reports whether n was a
// mapping (or null) that could be read.
func (fs fields[T]) read(p *parser, n *yaml.Node, what, where string, t *T) bool {
	return p.mapping(n, what, func(key string, k, v *yaml.Node) {
		for _, f := range fs {
			if f.key == key {
				f.read(p, t, k, v)
				return
			}
		}
		p.errorf(k, "unknown key %q %s (expected %s)", key, where, fs.keys())
	})
}

// block reads n, a mapping that must not be null (ifNull is then the
// problem), into the T that place returns for n's position, by the table
// fs; what names the mapping in messages. It returns nil when n cannot be
// read.
func block[T any](p *parser, n *yaml.Node, fs fields[T], what, ifNull string, place func(pos) *T) *T {
	if n = p.resolve(n); n == nil {
		return nil
	}
	if isNull(n) {
		p.errorf(n, "%s", ifNull)
		return nil
	}
	t := place(at(n))
	if !fs.read(p, n, what, "in "+what, t) {
		return nil
	}
	return t
}

// keys lists the keys of the table, for messages.
func (fs fields[T]) keys() string {
	keys := make([]string, len(fs))
	for i, f := range fs {
		keys[i] = f.key
	}
	return strings.Join(keys, ", ")
}

// nodeField reads the value of key with read (a parser method) into the
// place get returns, and the position of the key into the pos get returns
// (nil: not kept).
func nodeField[T, V any](key string, read func(p *parser, v *yaml.Node) V, get func(*T) (*V, *pos)) field[T] {
	return field[T]{key, func(p *parser, t *T, k, v *yaml.Node) {
		dst, keyPos := get(t)
		keepPos(keyPos, k)
		*dst = read(p, v)
	}}
}

// scalarField is nodeField for a scalar read by a parser method that names
// key in its messages.
func scalarField[T, V any](key string, read func(p *parser, v *yaml.Node, key string) (V, bool), get func(*T) (*V, *pos)) field[T] {
	return nodeField(key, func(p *parser, v *yaml.Node) V { x, _ := read(p, v, key); return x }, get)
}

// strField reads a string (see parser.str).
func strField[T any](key string, get func(*T) (*string, *pos)) field[T] {
	return scalarField(key, (*parser).str, get)
}

// boolField reads true or false.
func boolField[T any](key string, get func(*T) (*bool, *pos)) field[T] {
	return scalarField(key, (*parser).boolean, get)
}

// uint32Field reads an integer from minimum to 2^32-1.
func uint32Field[T any](key string, minimum uint32, get func(*T) (*uint32, *pos)) field[T] {
	return scalarField(key, func(p *parser, v *yaml.Node, key string) (uint32, bool) { return p.uint32(v, key, minimum) }, get)
}

// nonEmptyField reads a string that must not be empty: an empty one is
// reported at its key as ifEmpty (a value that is not a string is reported
// by parser.str and read as "").
func nonEmptyField[T any](key, ifEmpty string, get func(*T) (*string, *pos)) field[T] {
	return field[T]{key, func(p *parser, t *T, k, v *yaml.Node) {
		dst, keyPos := get(t)
		keepPos(keyPos, k)
		var ok bool
		if *dst, ok = p.str(v, key); ok && *dst == "" {
			p.errorf(k, "%s", ifEmpty)
		}
	}}
}

// keepPos keeps the position of key node k in dst, unless dst is nil.
func keepPos(dst *pos, k *yaml.Node) {
	if dst != nil {
		*dst = at(k)
	}
}

// sequence returns the list node n resolves to, or nil: for null (no
// items), and for any other kind, reported as "<must>, got <kind>".
func (p *parser) sequence(n *yaml.Node, must string) *yaml.Node {
	n = p.resolve(n)
	if n == nil || isNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, "%s, got %s", must, describe(n))
		return nil
	}
	return n
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
	v, ok := p.integer(n, field, int64(minimum), 1<<32-1)
	return uint32(v), ok
}

// integer reads an integer from lo to hi.
func (p *parser) integer(n *yaml.Node, field string, lo, hi int64) (int64, bool) {
	n = p.resolve(n)
	if n == nil {
		return 0, false
	}
	var v int64
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" || n.Decode(&v) != nil {
		p.errorf(n, "%s must be an integer, got %s", field, describe(n))
		return 0, false
	}
	if v < lo || v > hi {
		p.errorf(n, "%s must be between %d and %d, got %d", field, lo, hi, v)
		return 0, false
	}
	return v, true
}
