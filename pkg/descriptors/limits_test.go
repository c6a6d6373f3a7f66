package descriptors

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// descriptorsFile is a rule file of domain with n top-level descriptors,
// each with one nested descriptor: 2n descriptors.
func descriptorsFile(domain string, n int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "domain: %s\ndescriptors:\n", domain)
	for i := range n {
		fmt.Fprintf(&b, "  - key: k\n    value: v%d\n    rate_limit: {unit: second, requests_per_unit: 1}\n    descriptors:\n      - key: n\n        rate_limit: {unit: minute, requests_per_unit: 2}\n", i)
	}
	return b.String()
}

func limitError(t *testing.T, err error) *LimitError {
	t.Helper()
	var le *LimitError
	if !errors.As(err, &le) || !errors.Is(err, errTooLarge) {
		t.Fatalf("err = %v (%T), want a *LimitError", err, err)
	}
	return le
}

func TestLimitsDefaults(t *testing.T) {
	if got := (Limits{}).withDefaults(); got != (Limits{MaxBytes: DefaultMaxBytes, MaxDescriptors: DefaultMaxDescriptors}) {
		t.Errorf("zero Limits = %+v, want the defaults", got)
	}
	if got := (Limits{MaxBytes: 10, MaxDescriptors: 3}).withDefaults(); got != (Limits{MaxBytes: 10, MaxDescriptors: 3}) {
		t.Errorf("set Limits changed to %+v", got)
	}
}

// TestTotalBytesLimit: the size of every file together is bounded, and a
// set over it is refused from the sizes alone (the broken file is never
// parsed).
func TestTotalBytesLimit(t *testing.T) {
	dir := t.TempDir()
	var total int64
	for i, content := range []string{descriptorsFile("a", 3), descriptorsFile("b", 3), "domain: c\ndescriptors: [\n"} {
		writeFile(t, fmt.Sprintf("%s/%d.yaml", dir, i), content)
		total += int64(len(content))
	}
	_, err := Load(dir, Options{Secret: testSecret, Limits: Limits{MaxBytes: total - 1}})
	le := limitError(t, err)
	if *le != (LimitError{Limit: limitBytes, Max: total - 1, Total: total, Files: 3}) {
		t.Errorf("LimitError = %+v, want bytes %d over %d in 3 files", *le, total, total-1)
	}
	if !strings.Contains(err.Error(), fmt.Sprintf("hold %d bytes, more than the limit of %d", total, total-1)) {
		t.Errorf("Error() = %q", err.Error())
	}
	// At the limit the set is read: the broken file is then reported.
	_, err = Load(dir, Options{Secret: testSecret, Limits: Limits{MaxBytes: total}})
	if !errors.Is(err, errInvalidConfig) || !strings.Contains(err.Error(), "2.yaml:") {
		t.Errorf("at the limit: err = %v, want the syntax error of 2.yaml", err)
	}
}

// TestTotalDescriptorsLimit: descriptors of every file, nested ones
// included, are counted against one bound, and the whole count is
// reported even past it.
func TestTotalDescriptorsLimit(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir+"/a.yaml", descriptorsFile("a", 3))  // 6 descriptors
	writeFile(t, dir+"/b.yaml", descriptorsFile("b", 20)) // 40
	s, err := Load(dir, Options{Secret: testSecret, Limits: Limits{MaxDescriptors: 46}})
	if err != nil {
		t.Fatalf("46 descriptors at a limit of 46: %v", err)
	}
	if s.rules != 46 {
		t.Errorf("%d rules, want 46", s.rules)
	}
	for _, max := range []int{45, 7, 2} {
		_, err := Load(dir, Options{Secret: testSecret, Limits: Limits{MaxDescriptors: max}})
		le := limitError(t, err)
		if *le != (LimitError{Limit: LimitDescriptors, Max: int64(max), Total: 46, Files: 2}) {
			t.Errorf("limit %d: LimitError = %+v, want 46 descriptors in 2 files", max, *le)
		}
	}
}

// TestTooManyTokensRejectedBeforeParsing: a file dense in YAML tokens is
// refused from a lexical count, without the parser's tree (which costs
// about 190 bytes a token).
func TestTooManyTokensRejectedBeforeParsing(t *testing.T) {
	data := []byte("domain: d\ndescriptors: [" + strings.Repeat("a,", maxTokens) + "a]\n")
	var ps problems
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	rf := parseFile("dense.yaml", data, &ps, maxNodes, nil)
	runtime.ReadMemStats(&after)
	if rf != nil || len(ps.list) != 1 || !strings.Contains(ps.list[0].Reason, fmt.Sprintf("more than %d YAML tokens", maxTokens)) {
		t.Fatalf("problems = %v", ps.list)
	}
	// A generous bound: the tree of this file would take hundreds of MiB.
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 4<<20 {
		t.Errorf("rejecting the file allocated %d bytes, want under 4 MiB", alloc)
	}
}

func TestCountTokens(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		want int
	}{
		{"", 0},
		{"# only a comment\n---\n", 0},
		{"a: b\n", 3},
		{"a:\n", 2},
		{"- a\n- b\n", 4},
		{"[a, b, c]\n", 4},
		{"{a: 1, b: 2}\n", 7},
		{"a: 'x: y # z'\n", 3},
		{"a: \"x\\\" [y]\"\n", 3},
		{"a: &x b\nc: *x\n", 6},
		{"a: !!str 1 # comment: [x]\n", 3},
		{"a: |\n  - x\n  y: z\n\nb: c\n", 6},
		{"- k: >-\n    x: [y]\n  v: w\n", 7},
		{"url: http://x:80/y\n", 3},
	} {
		if got := countTokens([]byte(tc.yaml), 1<<20); got != tc.want {
			t.Errorf("countTokens(%q) = %d, want %d", tc.yaml, got, tc.want)
		}
	}
	if got := countTokens([]byte(strings.Repeat("a: b\n", 1000)), 10); got != 11 {
		t.Errorf("countTokens past a limit of 10 = %d, want 11 (it stops there)", got)
	}
	data := []byte(descriptorsFile("d", 10))
	if a := testing.AllocsPerRun(10, func() { countTokens(data, maxTokens) }); a != 0 {
		t.Errorf("countTokens allocates %v times", a)
	}
}

// TestCountTokensBoundsTheTree: on every rule file of the repository, the
// parser's tree has at most one node more per mapping than the count, so
// the count bounds the tree's memory.
func TestCountTokensBoundsTheTree(t *testing.T) {
	var files []string
	for _, glob := range []string{"testdata/*/*.yaml", "testdata/*.yaml", "../../config/examples/*.yaml"} {
		m, _ := filepath.Glob(glob)
		files = append(files, m...)
	}
	if len(files) < 10 {
		t.Fatalf("found %d rule files", len(files))
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var doc yaml.Node
		if yaml.Unmarshal(data, &doc) != nil {
			continue
		}
		nodes, maps := countNodes(&doc)
		if got := countTokens(data, 1<<30); nodes > got+maps+1 {
			t.Errorf("%s: %d tokens counted for %d nodes (%d mappings)", f, got, nodes, maps)
		}
	}
}

func countNodes(n *yaml.Node) (nodes, maps int) {
	nodes = 1
	if n.Kind == yaml.MappingNode {
		maps = 1
	}
	for _, c := range n.Content {
		a, b := countNodes(c)
		nodes, maps = nodes+a, maps+b
	}
	return nodes, maps
}

// TestSyntaxErrorPositions: a YAML syntax error is reported at the line
// and column of the mistake, not at the line where the enclosing block
// starts.
func TestSyntaxErrorPositions(t *testing.T) {
	const head = "domain: d\ndescriptors:\n  - key: a\n    value: b\n    rate_limit:\n      unit: second\n      requests_per_unit: 5\n  - key: c\n    value: d\n"
	const tail = "  - key: z\n    value: y\n"
	for name, tc := range map[string]struct {
		yaml      string
		line, col int
		reason    string
	}{
		"bad indentation":   {head + "   bad: x\n" + tail, 10, 4, "did not find expected '-' indicator (in the block that starts at line 2)"},
		"unclosed quote":    {head + "  - key: \"e\n" + tail, 10, 10, "found unexpected end of stream"},
		"unclosed flow map": {head + "  - key: e\n    rate_limit: {unit: second\n" + tail, 11, 24, "did not find expected ',' or '}'"},
		"second colon":      {head + "  - key: e: f\n" + tail, 10, 11, "mapping values are not allowed in this context"},
		"tab indentation":   {head + "\tkey: e\n" + tail, 10, 1, "found a tab character"},
		"unknown alias":     {head + "  - key: *nope\n" + tail, 10, 14, "unknown anchor 'nope' referenced"},
		"dedented key":      {head + "  key: c\n" + tail, 10, 6, "did not find expected '-' indicator"},
		"on the first line": {"domain: [d\n", 1, 10, "did not find expected ',' or ']'"},
		"in a 2nd document": {head + "---\ndomain: e\n a: b\n", 12, 3, "mapping values are not allowed in this context"},
	} {
		t.Run(name, func(t *testing.T) {
			var ps problems
			parseFile("f.yaml", []byte(tc.yaml), &ps, maxNodes, nil)
			if len(ps.list) != 1 {
				t.Fatalf("problems = %v", ps.list)
			}
			p := ps.list[0]
			if p.Line != tc.line || p.Column != tc.col || !strings.Contains(p.Reason, "invalid YAML: "+tc.reason) {
				t.Errorf("%s, want f.yaml:%d:%d: invalid YAML: %s", p, tc.line, tc.col, tc.reason)
			}
		})
	}
}

// TestNonRegularFilesAreProblems: a named pipe as --config is refused at
// once (never opened blocking), and *.yaml entries of a rule directory
// that are not files are reported, not skipped.
func TestNonRegularFilesAreProblems(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "pipe.yaml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := Load(fifo, Options{Secret: testSecret})
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, errInvalidConfig) || !strings.Contains(err.Error(), fifo+": not a regular file (a named pipe)") {
			t.Errorf("FIFO as the path: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Load of a FIFO did not return within 10s: it waits for a writer")
	}

	writeFile(t, dir+"/good.yaml", rules("5"))
	if err := os.Mkdir(dir+"/sub.yml", 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := Load(dir, Options{Secret: testSecret})
	var ce *ConfigError
	if !errors.As(err, &ce) || len(ce.Problems) != 2 {
		t.Fatalf("err = %v, want two problems", err)
	}
	for i, want := range []string{fifo + ": not a regular file (a named pipe)", dir + "/sub.yml: not a regular file (a directory)"} {
		if !strings.HasPrefix(ce.Problems[i].String(), want) {
			t.Errorf("problem %d = %q, want prefix %q", i, ce.Problems[i], want)
		}
	}
	// A pipe put in place of a file after the listing is refused too.
	if _, err := readLimited(fifo); err == nil || !strings.Contains(err.Error(), "not a regular file (a named pipe)") {
		t.Errorf("readLimited(FIFO) = %v", err)
	}
}

// TestLoadChanged: identical rule files give back the snapshot in service,
// uncompiled; changed ones (or no snapshot to compare with) are compiled.
func TestLoadChanged(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir+"/r.yaml", rules("5"))
	opts := Options{Secret: testSecret}
	cur := mustLoad(t, dir)
	if s, changed, err := LoadChanged(dir, opts, cur); err != nil || changed || s != cur {
		t.Fatalf("unchanged files: %p, %v, %v; want the snapshot in service, unchanged", s, changed, err)
	}
	s, changed, err := LoadChanged(dir, opts, nil)
	if err != nil || !changed || s == cur || s.Fingerprint() != cur.Fingerprint() {
		t.Fatalf("no snapshot to compare with: %v, %v; want a new snapshot of the same files", changed, err)
	}
	writeFile(t, dir+"/r.yaml", rules("6"))
	s, changed, err = LoadChanged(dir, opts, cur)
	if err != nil || !changed || s.Fingerprint() == cur.Fingerprint() {
		t.Fatalf("changed files: %v, %v; want a new snapshot", changed, err)
	}
	if m, ok := s.Match("d", e("user=alice")); !ok || m.Rule.RequestsPerUnit != 6 {
		t.Errorf("changed files compiled to %+v", m)
	}
	writeFile(t, dir+"/r.yaml", rules("6")+"    bogus: 1\n")
	if s, changed, err := LoadChanged(dir, opts, cur); !errors.Is(err, errInvalidConfig) || changed || s != nil {
		t.Errorf("broken files: %p, %v, %v; want a configuration error", s, changed, err)
	}
	if _, _, err := LoadChanged(dir, Options{Secret: []byte("short")}, cur); !errors.Is(err, ErrSecret) {
		t.Errorf("short secret: %v, want ErrSecret", err)
	}
}
