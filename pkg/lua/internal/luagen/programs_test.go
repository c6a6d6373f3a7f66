package luagen

import (
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// These tests read the programs as checked in next to pkg/lua (pkg), which
// embeds exactly them (its TestProgramsEmbedded), and their sources (pkg/src).
const pkg = "../.."

// program is one program checked in next to pkg/lua.
type program struct{ Name, Source string }

func checkedIn(t testing.TB, name string) program {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(pkg, name))
	if err != nil {
		t.Fatal(err)
	}
	return program{Name: name, Source: string(b)}
}

// ratePrograms are pkg/lua's rate programs (lua.Batch, lua.Refund): the
// templates named rate-*.
func ratePrograms(t testing.TB) []program {
	t.Helper()
	names, err := programs(os.DirFS(filepath.Join(pkg, "src")))
	if err != nil {
		t.Fatal(err)
	}
	var out []program
	for _, n := range names {
		if strings.HasPrefix(n, "rate-") {
			out = append(out, checkedIn(t, n))
		}
	}
	if len(out) < 2 {
		t.Fatalf("rate programs %v", names)
	}
	return out
}

// TestProgramsGenerated: the programs checked in next to pkg/lua are what
// `go generate ./pkg/lua` makes of its src/ now (run it after changing a
// template or a fragment), and no others.
func TestProgramsGenerated(t *testing.T) {
	want, err := Generate(os.DirFS(filepath.Join(pkg, "src")))
	if err != nil {
		t.Fatal(err)
	}
	paths, _ := filepath.Glob(filepath.Join(pkg, "*.lua"))
	var files []string
	for _, p := range paths {
		files = append(files, filepath.Base(p))
	}
	if names := slices.Sorted(maps.Keys(want)); len(names) == 0 || !slices.Equal(files, names) {
		t.Fatalf("programs on disk %v, templates %v: run go generate ./pkg/lua", files, names)
	}
	for name, text := range want {
		if checkedIn(t, name).Source != text {
			t.Errorf("%s is stale: run go generate ./pkg/lua", name)
		}
	}
}

// TestLibrary: the checked-in function library is the checked-in batch
// program as a library.
func TestLibrary(t *testing.T) {
	got, err := library(checkedIn(t, libraryOf).Source)
	if err != nil || got != checkedIn(t, libraryFile).Source {
		t.Fatalf("%s is not %s as a library (%v)", libraryFile, libraryOf, err)
	}
}

func TestProgramsShape(t *testing.T) {
	src := os.DirFS(filepath.Join(pkg, "src"))
	prelude, err := fragment(src, "prelude.lua")
	if err != nil {
		t.Fatal(err)
	}
	batch, refund := checkedIn(t, "rate-batch-v2.lua"), checkedIn(t, "rate-refund-v2.lua")
	for _, p := range ratePrograms(t) {
		text := p.Source
		for _, want := range []string{header + p.Name, "-- KEYS[1", "-- ARGV", "-- Reply:"} {
			if !strings.Contains(text, want) {
				t.Errorf("%s: missing %q", p.Name, want)
			}
		}
		if strings.Contains(text, includePrefix) {
			t.Errorf("%s: an include line was not assembled", p.Name)
		}
		if !strings.Contains(text, prelude) {
			t.Errorf("%s: does not contain fragments/prelude.lua verbatim", p.Name)
		}
		wantTime := 1
		if strings.HasPrefix(p.Name, "rate-refund-") {
			wantTime = 0
		}
		if n := strings.Count(text, "redis.call('TIME')"); n != wantTime {
			t.Errorf("%s: TIME called %d times in the source, want %d", p.Name, n, wantTime)
		}
		// They write strings (SET, PEXPIRE), nothing else.
		other := `redis\.p?call\('(HSET|HMGET|DEL|UNLINK|INCR|EXPIRE|HINCRBY|GETSET|APPEND)'`
		if regexp.MustCompile(other).MatchString(text) {
			t.Errorf("%s: writes outside its layout's commands", p.Name)
		}
	}
	// Each algorithm's fragment, named after it, is in the programs
	// verbatim, section by section: valid and step in the batch program,
	// refund in the refund program; the batch program maps its byte to its
	// name.
	for _, alg := range limiter.Algorithms() {
		frag := strings.ReplaceAll(alg.String(), "_", "-") + ".lua"
		for section, progs := range map[string][]program{"valid": {batch, refund}, "step": {batch}, "refund": {refund}} {
			text, err := fragment(src, frag+" "+section)
			if err != nil {
				t.Fatal(err)
			}
			if text == "" || strings.Contains(text, sectionPrefix) {
				t.Errorf("%s %s: section text %q", frag, section, text)
			}
			for _, p := range progs {
				if !containsBlock(p.Source, text) {
					t.Errorf("%s %s: not verbatim in %s", frag, section, p.Name)
				}
			}
		}
		for _, p := range []program{batch, refund} {
			if byByte := fmt.Sprintf("algorithm == %d then\nalg = '%s'\n", alg, alg); !strings.Contains(unindent(p.Source), byByte) {
				t.Errorf("%s: does not map byte %d to %s", p.Name, alg, alg)
			}
		}
		if toByte := fmt.Sprintf("alg == '%s' then\nalgorithm = %d\n", alg, alg); alg != limiter.SlidingLog && !strings.Contains(unindent(batch.Source), toByte) {
			t.Errorf("%s: does not map %s to byte %d", batch.Name, alg, alg)
		}
	}
	// The shared steps, verbatim; the refund program reads the state as
	// the batch program does.
	for name, progs := range map[string][]program{
		"time.lua": {batch}, "valid.lua": {batch, refund}, "clock.lua": {batch},
		"string-v2.lua load": {batch, refund}, "string-v2.lua encode": {refund}, "string-v2.lua value": {batch, refund},
		"string-v2.lua store": {batch}, "exact.lua check": {batch}, "exact.lua exact": {refund},
		"evaluate.lua": {batch}, "record.lua offsets": {batch}, "group.lua": {batch},
		"args.lua": {batch, refund},
	} {
		text, err := fragment(src, name)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range progs {
			if !containsBlock(p.Source, text) {
				t.Errorf("%s: does not contain fragments/%s verbatim", p.Name, name)
			}
		}
	}
}

// containsBlock reports whether text holds block verbatim, but for the
// indentation of its lines (an inline block takes that of its include
// line) and its own include lines (assembled in place).
func containsBlock(text, block string) bool {
	var b strings.Builder
	for line := range strings.Lines(block) {
		if !strings.HasPrefix(strings.TrimSpace(line), includePrefix) {
			b.WriteString(line)
		}
	}
	parts := strings.Split(unindent(b.String()), "\n")
	src := unindent(text)
	for _, p := range parts {
		i := strings.Index(src, p)
		if i < 0 {
			return false
		}
		src = src[i+len(p):]
	}
	return true
}

// unindent drops the leading spaces of every line of s.
func unindent(s string) string {
	var b strings.Builder
	for line := range strings.Lines(s) {
		b.WriteString(strings.TrimLeft(line, " "))
	}
	return b.String()
}

// maxFunctionLines bounds every function of a program, and the code of a
// program's top level outside its functions: each can be read as one unit.
const maxFunctionLines = 150

func TestFunctionLength(t *testing.T) {
	for _, p := range ratePrograms(t) {
		fns, err := functions(p.Source)
		if err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
		if len(fns) < 10 {
			t.Errorf("%s: %d functions", p.Name, len(fns))
		}
		inFunction := map[int]bool{}
		for _, f := range fns {
			if f.Lines() > maxFunctionLines {
				t.Errorf("%s: function %s (line %d) has %d lines, more than %d", p.Name, f.Name, f.Start, f.Lines(), maxFunctionLines)
			}
			for l := f.Start; l <= f.End; l++ {
				inFunction[l] = true
			}
		}
		top := 0
		for i, line := range strings.Split(p.Source, "\n") {
			s := strings.TrimSpace(line)
			if !inFunction[i+1] && s != "" && !strings.HasPrefix(s, "--") {
				top++
			}
		}
		if top > maxFunctionLines {
			t.Errorf("%s: %d lines of code at the top level, more than %d", p.Name, top, maxFunctionLines)
		}
	}
	if _, err := functions("local function f()\nif x then\nend\n"); err == nil {
		t.Error("functions accepted an unclosed function")
	}
	fns, err := functions("local function f(a)\n  local s = '[[end'\n  for i = 1, 2 do\n  end\n  return a\nend\nlocal g = function() end\n")
	if err != nil || len(fns) != 2 || fns[0].Name != "f" || fns[0].Lines() != 6 || fns[1].Name != "" {
		t.Errorf("functions = %+v, %v", fns, err)
	}
}

// luaGlobals are the names a program may use without a fragment defining
// them: Redis's script environment.
var luaGlobals = []string{"redis", "struct", "bit", "KEYS", "ARGV", "string", "math", "table", "tostring",
	"tonumber", "type", "error", "pcall", "select"}

// TestFragmentContracts: the fragments share names only as they declare.
// A fragment (or each section of one) says in "-- uses:" lines the names
// it takes from the program's top level (Redis's script environment aside)
// and in "-- defines:" lines the names it declares at its own top level;
// an inline block (a fragment included inside a function, so that a hot
// path pays no call) says in "-- in:" and "-- out:" lines the locals of
// the code around it that it reads and sets. Checked: the names a fragment
// uses without declaring them are exactly its uses (and its ins and outs),
// the names it declares at its top level exactly its defines; every in and
// out of an inline block is declared where it is included, before it; in
// every program each use of a fragment included at the top level is
// defined by what is included before it; the template's own code uses
// only what its fragments define.
func TestFragmentContracts(t *testing.T) {
	src := os.DirFS(filepath.Join(pkg, "src"))
	names, err := programs(src)
	if err != nil {
		t.Fatal(err)
	}
	blocks := 0
	for _, name := range names {
		tmpl, err := os.ReadFile(filepath.Join(pkg, "src", name))
		if err != nil {
			t.Fatal(err)
		}
		defined := map[string]bool{}
		for _, g := range luaGlobals {
			defined[g] = true
		}
		var own strings.Builder
		for line := range strings.Lines(string(tmpl)) {
			inc, ok := strings.CutPrefix(strings.TrimRight(line, "\n"), includePrefix)
			if !ok {
				own.WriteString(line)
				continue
			}
			c := checkFragment(t, src, inc, &blocks)
			for _, u := range c.uses {
				if !defined[u] {
					t.Errorf("%s, including %s: %s is not defined before it", name, inc, u)
				}
			}
			for _, d := range c.defines {
				defined[d] = true
			}
		}
		an, err := analyze(own.String())
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, u := range an.Free {
			if !defined[u] {
				t.Errorf("%s: its own code uses %s, which no fragment defines", name, u)
			}
		}
	}
	if blocks < 5 {
		t.Errorf("%d inline blocks checked", blocks)
	}
}

// fragmentContract is what a fragment declares of the names it shares.
type fragmentContract struct {
	uses, defines, in, out []string
	inline                 bool // it has an "-- in:" line
}

// checkFragment checks the fragment inc (see TestFragmentContracts) and
// the inline blocks it includes, and returns its contract; blocks counts
// the inline blocks checked.
func checkFragment(t *testing.T, src fs.FS, inc string, blocks *int) fragmentContract {
	t.Helper()
	text, err := fragment(src, inc)
	if err != nil {
		t.Fatal(err)
	}
	c := contract(text)
	assembled, err := assemble(text, func(f string) (string, error) { return fragment(src, f) }, 0)
	if err != nil {
		t.Fatalf("%s: %v", inc, err)
	}
	an, err := analyze(assembled)
	if err != nil {
		t.Fatalf("%s: %v", inc, err)
	}
	free := slices.DeleteFunc(slices.Clone(an.Free), func(n string) bool { return slices.Contains(luaGlobals, n) })
	want := slices.Concat(c.uses, c.in, c.out)
	slices.Sort(free)
	slices.Sort(want)
	if want = slices.Compact(want); !slices.Equal(free, want) {
		t.Errorf("%s: uses %v without declaring them, declares it uses %v", inc, free, want)
	}
	top := slices.Clone(an.TopLevel)
	slices.Sort(top)
	if top = slices.Compact(top); !slices.Equal(top, c.defines) {
		t.Errorf("%s: defines %v, declares it defines %v", inc, top, c.defines)
	}
	// Its inline blocks: each in and out declared before the include.
	var before strings.Builder
	for line := range strings.Lines(text) {
		nested, ok := strings.CutPrefix(strings.TrimSpace(line), includePrefix)
		if !ok {
			before.WriteString(line)
			continue
		}
		b := checkFragment(t, src, nested, blocks)
		if !b.inline {
			t.Errorf("%s includes %s, which is no inline block (no -- in: line)", inc, nested)
			continue
		}
		*blocks++
		host, err := analyze(before.String())
		if err != nil {
			t.Fatalf("%s before %s: %v", inc, nested, err)
		}
		for _, n := range slices.Concat(b.in, b.out) {
			// (An inline block passes on its own ins and outs.)
			if !slices.Contains(host.Declared, n) && !slices.Contains(c.in, n) && !slices.Contains(c.out, n) {
				t.Errorf("%s includes %s, whose %s it has not declared before", inc, nested, n)
			}
		}
	}
	return c
}

// contract reads the "-- uses:", "-- defines:", "-- in:" and "-- out:"
// lines of a fragment's text, each list sorted.
func contract(text string) fragmentContract {
	var c fragmentContract
	for line := range strings.Lines(text) {
		for prefix, dst := range map[string]*[]string{"-- uses:": &c.uses, "-- defines:": &c.defines, "-- in:": &c.in, "-- out:": &c.out} {
			rest, ok := strings.CutPrefix(strings.TrimSpace(line), prefix)
			if !ok {
				continue
			}
			c.inline = c.inline || prefix == "-- in:"
			for _, n := range strings.Split(rest, ",") {
				if n = strings.TrimSpace(n); n != "" {
					*dst = append(*dst, n)
				}
			}
		}
	}
	for _, l := range []*[]string{&c.defines, &c.in, &c.out} {
		slices.Sort(*l)
		*l = slices.Compact(*l)
	}
	// A use of an include of several sections may be defined by an earlier
	// one of them.
	c.uses = slices.DeleteFunc(c.uses, func(u string) bool { return slices.Contains(c.defines, u) })
	slices.Sort(c.uses)
	c.uses = slices.Compact(c.uses)
	return c
}

// TestBatchFunctionRunState: the library's top level runs once per FUNCTION
// LOAD, so every top-level local of rate-batch-v2.lua that the program
// assigns after its declaration must be reset by each call
// (runState), but serverNow, which the clock block sets at the start
// of every call. This fails when a fragment adds run state without adding
// it to runState.
func TestBatchFunctionRunState(t *testing.T) {
	src := checkedIn(t, libraryOf).Source
	decl := regexp.MustCompile(`^local ([A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*)\s*(?:=|$)`)
	assign := regexp.MustCompile(`^\s*([A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*)\s*=[^=]`)
	top := map[string]bool{}
	var assigned []string
	for line := range strings.Lines(src) {
		line = strings.TrimRight(line, "\n")
		if m := decl.FindStringSubmatch(line); m != nil {
			for n := range strings.SplitSeq(m[1], ",") {
				top[strings.TrimSpace(n)] = true
			}
			continue
		}
		if strings.HasPrefix(strings.TrimSpace(line), "local ") {
			continue
		}
		if m := assign.FindStringSubmatch(line); m != nil {
			for n := range strings.SplitSeq(m[1], ",") {
				assigned = append(assigned, strings.TrimSpace(n))
			}
		}
	}
	if len(top) < 20 {
		t.Fatalf("found %d top-level locals: the test no longer reads the program", len(top))
	}
	for _, n := range assigned {
		if top[n] && n != "serverNow" && !slices.Contains(runState, n) {
			t.Errorf("top-level local %s is assigned by a run but not reset by the library's function: add it to runState", n)
		}
	}
	for _, n := range runState {
		if !top[n] {
			t.Errorf("runState names %s, not a top-level local of %s", n, libraryOf)
		}
	}
	reset := strings.Join(runState, ", ") + " = false"
	if !strings.Contains(checkedIn(t, libraryFile).Source, "\n"+reset) {
		t.Errorf("the library's function does not reset %v", runState)
	}
}
