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

// codeDocRef is a doc the code names in a comment, a help text or an error.
var codeDocRef = regexp.MustCompile(`docs/([a-z0-9-]+\.md)`)

// TestCodeNamesExistingDocs: every docs/*.md file that the Go code (tests
// aside), the chart or the scripts name exists, so that a help text or an error never
// sends a user to a doc that has moved.
func TestCodeNamesExistingDocs(t *testing.T) {
	root := binarytest.ModuleRoot(t)
	named := 0
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); name == ".git" || name == "bench" || name == "dist" || name == "node_modules" {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".go", ".yaml", ".yml", ".tpl", ".json", ".sh":
		default:
			return nil
		}
		if strings.HasSuffix(path, "_test.go") {
			return nil // a test that reads a doc fails by itself when it is gone
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		for _, m := range codeDocRef.FindAllStringSubmatch(string(b), -1) {
			named++
			if _, err := os.Stat(filepath.Join(root, "docs", m[1])); err != nil {
				t.Errorf("%s names docs/%s: no such file", rel, m[1])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if named == 0 {
		t.Fatal("no doc named in the code; the pattern is broken")
	}
}
