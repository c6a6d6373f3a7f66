package deploytest

import (
	"strings"
	"testing"
)

// TestYAMLDocuments: every document of a stream, an empty one as the zero
// value; a field the type does not know is refused.
func TestYAMLDocuments(t *testing.T) {
	type doc struct {
		Name string `yaml:"name"`
	}
	docs, err := YAMLDocuments[doc]([]byte("name: a\n---\n---\nname: b\n"))
	if err != nil || len(docs) != 3 || docs[0].Name != "a" || docs[1].Name != "" || docs[2].Name != "b" {
		t.Fatalf("documents %+v, error %v", docs, err)
	}
	if _, err := YAMLDocuments[doc]([]byte("name: a\n---\nnmae: b\n")); err == nil || !strings.Contains(err.Error(), "nmae") {
		t.Fatalf("an unknown field: error %v", err)
	}
}
