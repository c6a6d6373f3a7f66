package luagen

import (
	"slices"
	"testing"
	"testing/fstest"
)

func TestAssemble(t *testing.T) {
	fsys := fstest.MapFS{
		"fragments/a.lua": {Data: []byte("head\n-- #section one\n1\n-- #section two\n2\n")},
		"p.lua":           {Data: []byte("x\n-- #include a.lua two one\ny\n")},
	}
	got, err := Generate(fsys)
	if err != nil {
		t.Fatal(err)
	}
	if want := header + "p.lua; DO NOT EDIT.\nx\n2\n1\ny\n"; got["p.lua"] != want {
		t.Errorf("Generate = %q, want %q", got["p.lua"], want)
	}
	if _, err := fragment(fsys, "a.lua nope"); err == nil {
		t.Error("fragment accepted an unknown section")
	}
	if _, err := assemble("-- #include nope.lua\n", func(f string) (string, error) { return fragment(fsys, f) }, 0); err == nil {
		t.Error("assemble accepted an unknown fragment")
	}
	if whole, _ := fragment(fsys, "a.lua"); whole != "head\n-- #section one\n1\n-- #section two\n2\n" {
		t.Errorf("the whole fragment: %q", whole)
	}
}

func TestAnalyze(t *testing.T) {
	src := `local A, B = 1, x.y
local function f(p, q)
  local r = { k = p, [q] = 1 }
  for i, v in pairs(r) do g(i, v, A) end
  return r.k .. 'z' .. "w" -- c
end
do local inner = 1 end
--[[ long
comment ]] return f(B, [[s]])`
	n, err := analyze(src)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(n.Free)
	if !slices.Equal(n.TopLevel, []string{"A", "B", "f"}) || !slices.Equal(n.Free, []string{"g", "pairs", "x"}) {
		t.Errorf("analyze = %+v", n)
	}
}
