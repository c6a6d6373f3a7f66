package lua

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/algorithm"
	"github.com/envoy-rls/envoy-rls/pkg/lua/internal/luagen"
)

func mustPolicy(t testing.TB, spec limiter.PolicySpec) *limiter.Policy {
	t.Helper()
	p, err := limiter.NewPolicy(spec)
	if err != nil {
		t.Fatalf("NewPolicy: %v", err)
	}
	return p
}

// TestProgramsGenerated: the checked-in programs are what `go generate`
// makes of src/ now (run it after changing a template or a fragment), and
// the package embeds exactly them.
func TestProgramsGenerated(t *testing.T) {
	want, err := luagen.Generate(os.DirFS("src"))
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob("*.lua")
	if slices.Sorted(func(yield func(string) bool) {
		for k := range want {
			if !yield(k) {
				return
			}
		}
	}) == nil || !slices.Equal(files, sortedKeys(want)) {
		t.Fatalf("programs on disk %v, templates %v: run go generate ./pkg/lua", files, sortedKeys(want))
	}
	for name, text := range want {
		got, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != text {
			t.Errorf("%s is stale: run go generate ./pkg/lua", name)
		}
	}
	var embedded []string
	for _, p := range append(Programs(), Lease(), Reset(), program{Name: BatchFunction().Name, Source: BatchFunction().Source}) {
		embedded = append(embedded, p.Name)
		if p.Source != want[p.Name] {
			t.Errorf("%s: the embedded source is not the generated one", p.Name)
		}
	}
	if slices.Sort(embedded); !slices.Equal(embedded, files) {
		t.Errorf("embedded %v, generated %v", embedded, files)
	}
}

func sortedKeys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func TestProgramsShape(t *testing.T) {
	src := os.DirFS("src")
	prelude, err := luagen.Fragment(src, "prelude.lua")
	if err != nil {
		t.Fatal(err)
	}
	batch, refund := Batch(), Refund()
	for _, p := range Programs() {
		text := p.Source
		for _, want := range []string{luagen.Header + p.Name, "-- KEYS[1", "-- ARGV", "-- Reply:"} {
			if !strings.Contains(text, want) {
				t.Errorf("%s: missing %q", p.Name, want)
			}
		}
		if strings.Contains(text, luagen.IncludePrefix) {
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
			text, err := luagen.Fragment(src, frag+" "+section)
			if err != nil {
				t.Fatal(err)
			}
			if text == "" || strings.Contains(text, luagen.SectionPrefix) {
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
		text, err := luagen.Fragment(src, name)
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
		if !strings.HasPrefix(strings.TrimSpace(line), luagen.IncludePrefix) {
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
	for _, p := range Programs() {
		fns, err := luagen.Functions(p.Source)
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
	if _, err := luagen.Functions("local function f()\nif x then\nend\n"); err == nil {
		t.Error("Functions accepted an unclosed function")
	}
	fns, err := luagen.Functions("local function f(a)\n  local s = '[[end'\n  for i = 1, 2 do\n  end\n  return a\nend\nlocal g = function() end\n")
	if err != nil || len(fns) != 2 || fns[0].Name != "f" || fns[0].Lines() != 6 || fns[1].Name != "" {
		t.Errorf("Functions = %+v, %v", fns, err)
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
	src := os.DirFS("src")
	names, err := luagen.Programs(src)
	if err != nil {
		t.Fatal(err)
	}
	blocks := 0
	for _, name := range names {
		tmpl, err := os.ReadFile(filepath.Join("src", name))
		if err != nil {
			t.Fatal(err)
		}
		defined := map[string]bool{}
		for _, g := range luaGlobals {
			defined[g] = true
		}
		var own strings.Builder
		for line := range strings.Lines(string(tmpl)) {
			inc, ok := strings.CutPrefix(strings.TrimRight(line, "\n"), luagen.IncludePrefix)
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
		an, err := luagen.Analyze(own.String())
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
	text, err := luagen.Fragment(src, inc)
	if err != nil {
		t.Fatal(err)
	}
	c := contract(text)
	assembled, err := luagen.Assemble(text, func(f string) (string, error) { return luagen.Fragment(src, f) })
	if err != nil {
		t.Fatalf("%s: %v", inc, err)
	}
	an, err := luagen.Analyze(assembled)
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
		nested, ok := strings.CutPrefix(strings.TrimSpace(line), luagen.IncludePrefix)
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
		host, err := luagen.Analyze(before.String())
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

// TestStateNames: the programs name the state's fields as algorithm.State
// does (lower camel case), in the one function that writes a state: the
// parameters of storeState are the fields a store keeps.
func TestStateNames(t *testing.T) {
	var want []string
	for f := range reflect.TypeFor[algorithm.State]().Fields() {
		switch f.Name {
		case "Exists", "Schema", "Algorithm", "PolicyID", "Revision", "ExpiresAtMs":
			// Told by the key and the program, not kept as state fields.
			continue
		}
		r := []rune(f.Name)
		r[0] = unicode.ToLower(r[0])
		want = append(want, string(r))
	}
	if len(want) != 7 {
		t.Fatalf("algorithm.State's fields: %v", want)
	}
	sig := regexp.MustCompile(`local function storeState\(([^)]*)\)`)
	for _, p := range Programs() {
		if strings.HasPrefix(p.Name, "rate-refund-") {
			continue
		}
		m := sig.FindStringSubmatch(p.Source)
		if m == nil {
			t.Fatalf("%s: no storeState", p.Name)
		}
		params := strings.Fields(strings.NewReplacer(",", " ", "\n", " ").Replace(m[1]))
		for _, w := range want {
			if !slices.Contains(params, w) {
				t.Errorf("%s: storeState(%s) has no parameter %s (algorithm.State)", p.Name, strings.Join(params, ", "), w)
			}
		}
	}
}

// Programs returns the rate programs of the package (Lease is the other).
func Programs() []program { return []program{Batch(), Refund()} }
