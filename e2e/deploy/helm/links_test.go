package helm_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/binarytest"
)

// docLink is a Markdown link to another Markdown file of the repository or
// to a section of the same file: [text](file.md#anchor), [text](#anchor).
var docLink = regexp.MustCompile(`\]\(([A-Za-z0-9_./-]*\.md)?(#[^)\s]+)?\)`)

// htmlAnchor is an anchor a document sets itself: <a id="name"></a>.
var htmlAnchor = regexp.MustCompile(`<a id="([^"]+)">`)

// TestDocLinks: every link of README.md and docs/*.md to a Markdown file of
// the repository lands on a file that exists and, with an anchor, on one of
// its headings (or of its own <a id> anchors).
func TestDocLinks(t *testing.T) {
	root := binarytest.ModuleRoot(t)
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	docs = append(docs, filepath.Join(root, "README.md"))
	anchors := map[string]map[string]bool{}
	anchorsOf := func(rel string) map[string]bool {
		if a, ok := anchors[rel]; ok {
			return a
		}
		a := docAnchors(t, rel)
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range htmlAnchor.FindAllStringSubmatch(string(b), -1) {
			a[m[1]] = true
		}
		anchors[rel] = a
		return a
	}
	checked := 0
	for _, path := range docs {
		from, _ := filepath.Rel(root, path)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range docLink.FindAllStringSubmatch(string(b), -1) {
			file, anchor := m[1], strings.TrimPrefix(m[2], "#")
			if file == "" && anchor == "" || strings.Contains(file, "://") {
				continue
			}
			target := from
			if file != "" {
				target = filepath.Clean(filepath.Join(filepath.Dir(from), file))
				if _, err := os.Stat(filepath.Join(root, target)); err != nil {
					t.Errorf("%s links to %s: no such file", from, file)
					continue
				}
			}
			checked++
			if anchor != "" && !anchorsOf(target)[anchor] {
				t.Errorf("%s links to %s#%s: no such heading", from, target, anchor)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no links found; the pattern is broken")
	}
}
