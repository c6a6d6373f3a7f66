package lua

import (
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
)

func mustPolicy(t testing.TB, spec limiter.PolicySpec) *limiter.Policy {
	t.Helper()
	p, err := limiter.NewPolicy(spec)
	if err != nil {
		t.Fatalf("NewPolicy: %v", err)
	}
	return p
}

// TestProgramsEmbedded: the package embeds exactly the programs checked in
// next to it, which luagen's TestProgramsGenerated checks are what `go
// generate` makes of src/ now.
func TestProgramsEmbedded(t *testing.T) {
	files, _ := filepath.Glob("*.lua")
	if len(files) == 0 {
		t.Fatal("no programs checked in")
	}
	var embedded []string
	for _, p := range append(Programs(), Lease(), Reset(), Demand(), program{Name: BatchFunction().Name, Source: BatchFunction().Source}) {
		embedded = append(embedded, p.Name)
		if got, err := os.ReadFile(p.Name); err != nil || p.Source != string(got) {
			t.Errorf("%s: the embedded source is not the checked-in one (%v)", p.Name, err)
		}
	}
	if slices.Sort(embedded); !slices.Equal(embedded, files) {
		t.Errorf("embedded %v, checked in %v", embedded, files)
	}
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
	if len(want) != 8 {
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
