package descriptors

import "math"

// Bounds of reading one rule document, a file or a Document.
const (
	// MaxDepth bounds the nesting of descriptors (and so the number of
	// entries a request descriptor can usefully carry).
	MaxDepth = 64
	// maxNodes bounds the work of reading and compiling one document: one
	// unit per YAML node visited (an alias is walked each time it is used)
	// or Document field, plus, per descriptor, its nesting depth (the
	// compiler's work per rule grows with it).
	maxNodes = 1_000_000
)

// reader is what reading one rule document into the raw model takes,
// whichever its form (a YAML file: parser; a Document: docBuilder): its
// name, where its problems go, the descriptor count of its rule set and
// its work budget (see maxNodes).
type reader struct {
	file  string
	ps    *problems
	count *descCount
	// budget is the work allowed and left what is left of it (< 0 once
	// spent); tooComplex is the problem reported then, given budget.
	budget, left int
	tooComplex   string
}

func newReader(file string, ps *problems, count *descCount, budget int, tooComplex string) reader {
	if count == nil {
		count = &descCount{max: math.MaxInt}
	}
	return reader{file: file, ps: ps, count: count, budget: budget, left: budget, tooComplex: tooComplex}
}

func (r *reader) problem(at pos, format string, args ...any) {
	r.ps.add(r.file, at.line, at.col, format, args...)
}

// charge spends cost units of the budget; it reports (once, at at) and
// returns false once the budget is spent.
func (r *reader) charge(at pos, cost int) bool {
	if r.left < 0 {
		return false
	}
	if r.left -= cost; r.left < 0 {
		r.problem(at, r.tooComplex, r.budget)
		return false
	}
	return true
}

// spent reports whether the budget ran out: what was read is then not
// compiled.
func (r *reader) spent() bool { return r.left < 0 }

// nest reports whether a list of descriptors at depth (at at) is within
// MaxDepth; it reports the problem when not.
func (r *reader) nest(at pos, depth int) bool {
	if depth > MaxDepth {
		r.problem(at, "descriptors are nested more than %d levels deep", MaxDepth)
		return false
	}
	return true
}

// enter charges a descriptor at depth (at at) its depth, the compiler's
// work per rule, and counts it; false: the budget is spent, do not read it.
func (r *reader) enter(at pos, depth int) bool {
	if !r.charge(at, depth) {
		return false
	}
	r.count.n++
	return true
}

// keep returns rd, or nil past Limits.MaxDescriptors: descriptors are then
// still read, so that what they nest is counted, but no longer kept.
func (r *reader) keep(rd *rawDesc) *rawDesc {
	if r.count.over() {
		return nil
	}
	return rd
}

// descCount counts the descriptors of a rule set across its documents,
// against Limits.MaxDescriptors.
type descCount struct{ n, max int }

func (c *descCount) over() bool { return c.n > c.max }
