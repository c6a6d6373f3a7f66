// Package lua holds the versioned Redis Lua programs of envoy-rls, their
// argument encoding and the strict parser of their replies. It has no
// network code: pkg/limiter/redis runs the programs.
//
// rate-batch-v1.lua is the one rate program: every limit of one Envoy
// request, checked at one TIME and committed all or nothing (limiter.Store).
// rate-refund-v1.lua gives back what a batch took when the request did not
// commit in another Redis Cluster slot.
//
// Each algorithm lives once, in its own file of fragments/ (with the shared
// prelude and the shared steps: reading TIME, the common argument rules,
// loading the state, the clock rule, the range check of what was computed,
// storing the state). A program's source names them with "-- #include
// <file>" lines, or "-- #include <file> <section>" for one section of an
// algorithm's file (valid, step, refund) at the program's dispatch on the
// algorithm; Assemble replaces them by the fragments' text when the package
// initializes. The fragments are blocks on agreed local names,
// not functions: a script's whole body runs on every EVALSHA, so a function
// would be a closure made on every call of the hot batch program.
package lua

import (
	"embed"
	"fmt"
	"strings"
)

var (
	//go:embed rate-batch-v1.lua
	batchV1 string
	//go:embed rate-refund-v1.lua
	refundV1 string
	//go:embed fragments/*.lua
	fragmentFS embed.FS
)

// assembled holds every program's source with its fragments included,
// built once at init and never changed.
var assembled = func() map[string]string {
	out := map[string]string{}
	for name, src := range map[string]string{
		"rate-batch-v1.lua": batchV1, "rate-refund-v1.lua": refundV1,
	} {
		a, err := Assemble(src, Fragment)
		if err != nil {
			panic(fmt.Sprintf("lua: %s: %v", name, err)) // a build defect: the embedded files are fixed
		}
		out[name] = a
	}
	return out
}()

// includePrefix starts a line that Assemble replaces by a fragment;
// sectionPrefix starts a line that opens a named section of a fragment.
const (
	includePrefix = "-- #include "
	sectionPrefix = "-- #section "
)

// Fragment returns the text of one file of fragments/ (e.g. "prelude.lua"),
// or, for "<file> <section>" (e.g. "token-bucket.lua step"), the lines of
// that file between "-- #section <section>" and the next section line or
// the end of the file.
func Fragment(name string) (string, error) {
	file, section, _ := strings.Cut(name, " ")
	b, err := fragmentFS.ReadFile("fragments/" + file)
	if err != nil {
		return "", fmt.Errorf("lua: no fragment %q", file)
	}
	if section == "" {
		return string(b), nil
	}
	var out strings.Builder
	in, found := false, false
	for line := range strings.Lines(string(b)) {
		if s, ok := strings.CutPrefix(strings.TrimRight(line, "\n"), sectionPrefix); ok {
			in = strings.TrimSpace(s) == section
			found = found || in
			continue
		}
		if in {
			out.WriteString(line)
		}
	}
	if !found {
		return "", fmt.Errorf("lua: fragment %q has no section %q", file, section)
	}
	return out.String(), nil
}

// Assemble replaces every "-- #include <name>" line of src by the text of
// fragment name (a file, or a file and a section: see Fragment), verbatim.
func Assemble(src string, fragment func(name string) (string, error)) (string, error) {
	var b strings.Builder
	for line := range strings.Lines(src) {
		name, ok := strings.CutPrefix(strings.TrimRight(line, "\n"), includePrefix)
		if !ok {
			b.WriteString(line)
			continue
		}
		f, err := fragment(strings.TrimSpace(name))
		if err != nil {
			return "", err
		}
		b.WriteString(f)
	}
	return b.String(), nil
}

// Program is one versioned Lua program.
type Program struct {
	// Name is the file name, e.g. "rate-batch-v1.lua".
	Name string
	// Source is the embedded source with its fragments included, sent on
	// NOSCRIPT.
	Source string
}

func program(name string) Program { return Program{Name: name, Source: assembled[name]} }

// Batch returns rate-batch-v1.lua, the rate program of every algorithm.
func Batch() Program { return program("rate-batch-v1.lua") }

// Refund returns rate-refund-v1.lua.
func Refund() Program { return program("rate-refund-v1.lua") }
