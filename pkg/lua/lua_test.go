package lua

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

func mustPolicy(t testing.TB, spec limiter.PolicySpec) *limiter.Policy {
	t.Helper()
	p, err := limiter.NewPolicy(spec)
	if err != nil {
		t.Fatalf("NewPolicy: %v", err)
	}
	return p
}

func TestProgramsShape(t *testing.T) {
	prelude, err := Fragment("prelude.lua")
	if err != nil {
		t.Fatal(err)
	}
	batch, refund := Batch(), Refund()
	all := []Program{batch, refund}
	for _, p := range all {
		src := p.Source
		if src == "" {
			t.Fatalf("%s: empty source", p.Name)
		}
		for _, want := range []string{"-- KEYS[1", "-- ARGV", "-- Reply:"} {
			if !strings.Contains(src, want) {
				t.Errorf("%s: missing %q", p.Name, want)
			}
		}
		if strings.Contains(src, includePrefix) {
			t.Errorf("%s: an include line was not assembled", p.Name)
		}
		// The shared prelude, verbatim.
		if !strings.Contains(src, prelude) {
			t.Errorf("%s: does not contain fragments/prelude.lua verbatim", p.Name)
		}
		wantTime := 1
		if p.Name == "rate-refund-v1.lua" {
			wantTime = 0
		}
		if n := strings.Count(src, "redis.call('TIME')"); n != wantTime {
			t.Errorf("%s: TIME called %d times in the source, want %d", p.Name, n, wantTime)
		}
		if regexp.MustCompile(`redis\.p?call\('(SET|DEL|INCR|EXPIRE|HINCRBY)`).MatchString(src) {
			t.Errorf("%s: writes outside HSET + PEXPIRE", p.Name)
		}
	}
	// Each algorithm's fragment, named after it, is in the programs
	// verbatim, section by section, under the algorithm's name and byte:
	// valid and step in the batch program, refund in the refund program.
	for _, alg := range limiter.Algorithms() {
		frag := strings.ReplaceAll(alg.String(), "_", "-") + ".lua"
		for section, p := range map[string]Program{"valid": batch, "step": batch, "refund": refund} {
			text, err := Fragment(frag + " " + section)
			if err != nil {
				t.Fatal(err)
			}
			if text == "" || strings.Contains(text, sectionPrefix) {
				t.Errorf("%s %s: section text %q", frag, section, text)
			}
			if !strings.Contains(p.Source, text) {
				t.Errorf("%s %s: not verbatim in %s", frag, section, p.Name)
			}
		}
		if !strings.Contains(batch.Source, "'"+alg.String()+"'") {
			t.Errorf("%s: does not name %s", batch.Name, alg)
		}
		if byByte := fmt.Sprintf("algorithm == %d then\n    alg = '%s'\n", alg, alg); !strings.Contains(batch.Source, byByte) {
			t.Errorf("%s: does not map byte %d to %s", batch.Name, alg, alg)
		}
	}
	if _, err := Fragment("fixed-window.lua nope"); err == nil {
		t.Error("Fragment accepted an unknown section")
	}
	// The shared steps, verbatim; the refund program reads the state as
	// the batch program does.
	for name, progs := range map[string][]Program{
		"time.lua": {batch}, "valid.lua": {batch}, "load.lua": all, "clock.lua": {batch}, "store.lua": {batch},
		"exact.lua": {batch},
	} {
		text, err := Fragment(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range progs {
			if !strings.Contains(p.Source, text) {
				t.Errorf("%s: does not contain fragments/%s verbatim", p.Name, name)
			}
		}
	}
	// The batch program's whole body runs on every EVALSHA: it defines one
	// function (a closure made per run), the evaluation of one request,
	// which it runs under pcall.
	code := regexp.MustCompile(`--[^\n]*`).ReplaceAllString(batch.Source, "")
	if n := len(regexp.MustCompile(`\bfunction\b`).FindAllString(code, -1)); n != 1 {
		t.Errorf("%s defines %d functions, want 1", batch.Name, n)
	}
	if _, err := Assemble("-- #include nope.lua\n", Fragment); err == nil {
		t.Error("Assemble accepted an unknown fragment")
	}
	if got, _ := Assemble("a\n-- #include x\nb\n", func(string) (string, error) { return "X\n", nil }); got != "a\nX\nb\n" {
		t.Errorf("Assemble = %q", got)
	}
}
