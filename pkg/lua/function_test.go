package lua

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/pkg/lua/internal/luagen"
)

// TestBatchFunctionNames: the library and its function carry the same
// digest of the library, which the library's own text gives.
func TestBatchFunctionNames(t *testing.T) {
	f := BatchFunction()
	lib := regexp.MustCompile(`^envoy_rls_rate_v2_([0-9a-f]{12})$`).FindStringSubmatch(f.Library)
	fn := regexp.MustCompile(`^envoy_rls_rate_batch_v2_([0-9a-f]{12})$`).FindStringSubmatch(f.Function)
	if lib == nil || fn == nil || lib[1] != fn[1] {
		t.Fatalf("library %q, function %q: want envoy_rls_rate_v2_<12 hex> and envoy_rls_rate_batch_v2_<the same>", f.Library, f.Function)
	}
	if !strings.HasPrefix(f.Source, "#!lua name="+f.Library+"\n") {
		t.Fatalf("the library does not start with its name line")
	}
	again, err := luagen.Library(Batch().Source)
	if err != nil || again != f.Source {
		t.Fatalf("the library is not the batch program's (%v)", err)
	}
}

// TestBatchFunctionRunState: the library's top level runs once per FUNCTION
// LOAD, so every top-level local of rate-batch-v2.lua that the program
// assigns after its declaration must be reset by each call
// (luagen.RunState), but serverNow, which the clock block sets at the start
// of every call. This fails when a fragment adds run state without adding
// it to RunState.
func TestBatchFunctionRunState(t *testing.T) {
	src := Batch().Source
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
		if top[n] && n != "serverNow" && !slices.Contains(luagen.RunState, n) {
			t.Errorf("top-level local %s is assigned by a run but not reset by the library's function: add it to luagen.RunState", n)
		}
	}
	for _, n := range luagen.RunState {
		if !top[n] {
			t.Errorf("luagen.RunState names %s, not a top-level local of %s", n, Batch().Name)
		}
	}
	reset := strings.Join(luagen.RunState, ", ") + " = false"
	if !strings.Contains(BatchFunction().Source, "\n"+reset) {
		t.Errorf("the library's function does not reset %v", luagen.RunState)
	}
}
