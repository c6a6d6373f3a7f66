package deploytest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/binarytest"
)

// DockerfileFinalStage returns the instructions of the last stage of the
// Dockerfile name (relative to the module root), starting with its FROM:
// continuation lines joined, blank and comment lines dropped, runs of
// blanks collapsed to one space.
func DockerfileFinalStage(t testing.TB, name string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(binarytest.ModuleRoot(t), name))
	if err != nil {
		t.Fatal(err)
	}
	return finalStage(string(b))
}

func finalStage(text string) []string {
	var stage []string
	for _, line := range strings.Split(strings.ReplaceAll(text, "\\\n", " "), "\n") {
		line = strings.Join(strings.Fields(line), " ")
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if word, _, _ := strings.Cut(line, " "); strings.EqualFold(word, "FROM") {
			stage = nil
		}
		stage = append(stage, line)
	}
	return stage
}
