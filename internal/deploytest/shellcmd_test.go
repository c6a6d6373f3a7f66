package deploytest

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestMarkdownCommands(t *testing.T) {
	md := "text\n" +
		"```sh\n" +
		"docker run --rm -v \"$PWD/a b:/x:ro\" \\\n" +
		"  img:1 # a comment\n" +
		"\n" +
		"# a comment line\n" +
		"helm install r chart --set-file 'rules.files.a\\.yaml=f.yaml' &\n" +
		"```\n" +
		"```yaml\n" +
		"not: a command\n" +
		"```\n" +
		"```sh\n" +
		"$ grpcurl -d '{\"a\":1}' host list\n" +
		"{\n" +
		"  \"output\": true\n" +
		"}\n" +
		"$ echo \"x\\\"y\" a\\ b ''\n" +
		"```\n"
	path := filepath.Join(t.TempDir(), "doc.md")
	if err := os.WriteFile(path, []byte(md), 0o600); err != nil {
		t.Fatal(err)
	}
	got := MarkdownCommands(t, path)
	want := []DocCommand{
		{3, []string{"docker", "run", "--rm", "-v", "$PWD/a b:/x:ro", "img:1"}},
		{7, []string{"helm", "install", "r", "chart", "--set-file", `rules.files.a\.yaml=f.yaml`}},
		{13, []string{"grpcurl", "-d", `{"a":1}`, "host", "list"}},
		{17, []string{"echo", `x"y`, "a b", ""}},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d commands %v, want %d", len(got), got, len(want))
	}
	for i := range want {
		if got[i].Line != want[i].Line || !slices.Equal(got[i].Words, want[i].Words) {
			t.Errorf("command %d: %d %q, want %d %q", i, got[i].Line, got[i].Words, want[i].Line, want[i].Words)
		}
	}
}

func TestSplitWordsUnterminated(t *testing.T) {
	for _, s := range []string{`a 'b`, `a "b`} {
		if _, msg := splitWords(s); msg == "" {
			t.Errorf("%q: no error for an unterminated quote", s)
		}
	}
}
