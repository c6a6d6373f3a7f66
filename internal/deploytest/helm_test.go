package deploytest

import (
	"slices"
	"strings"
	"testing"
)

// TestParseHelm: a documented helm command is read as the shell would pass
// it, every value flag kept for helm template, and a flag the test does not
// know fails. (How commands are found in Markdown and split is
// TestParseMarkdownBlocks and TestSplitWords.)
func TestParseHelm(t *testing.T) {
	var cmds []DocCommand
	for _, line := range []string{
		"helm install rls oci://ghcr.io/envoy-rls/charts/envoy-rls --version 0.2.0 -n envoy-rls --create-namespace " +
			"--set store=redis --set redis.addr=a:6379\\,b:6379 --set-string \"hmac.secret=0123456789abcdef\\\"x\" " +
			"--set-file 'rules.files.ingress\\.yaml=config/examples/istio/rules/ingress.yaml' # a comment",
		"helm upgrade rls deploy/helm/envoy-rls --reuse-values -f=my.yaml",
		"helm install rls . --set-string hmac.secret=\"$(head -c 32 /dev/urandom | base64)\" --set-string x=$(date)",
		"helm install rls . --set a=$X",
	} {
		words, err := SplitWords(line, substituteOnly)
		cmds = append(cmds, DocCommand{File: "x.md", Line: len(cmds) + 1, Text: line, Words: words, Err: err})
	}
	h, err := ParseHelm(cmds[0])
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"-n", "envoy-rls", "--set", "store=redis", "--set", "redis.addr=a:6379,b:6379", // the shell ate the backslash
		"--set-string", `hmac.secret=0123456789abcdef"x`, "--set-file", `rules.files.ingress\.yaml=config/examples/istio/rules/ingress.yaml`}
	if h.Release != "rls" || h.Chart != "oci://ghcr.io/envoy-rls/charts/envoy-rls" || h.Reuse || !slices.Equal(h.Flags, want) {
		t.Errorf("got release %q chart %q reuse %v flags %q; want rls, the OCI chart, false, %q", h.Release, h.Chart, h.Reuse, h.Flags, want)
	}
	if h.Verb != "install" || h.Namespace != "envoy-rls" || !h.CreateNamespace || h.Set["store"] != "redis" ||
		h.Set["redis.addr"] != "a:6379,b:6379" || h.Set["hmac.secret"] != `0123456789abcdef"x` ||
		h.SetFile[`rules.files.ingress\.yaml`] != "config/examples/istio/rules/ingress.yaml" {
		t.Errorf("install read as %+v", h)
	}
	h, err = ParseHelm(cmds[1])
	if err != nil || !h.Reuse || strings.Join(h.Flags, "|") != "-f|my.yaml" || !slices.Equal(h.ValuesFiles, []string{"my.yaml"}) || h.Verb != "upgrade" {
		t.Errorf("upgrade: flags %q values %q reuse %v err %v; want [-f my.yaml], reuse", h.Flags, h.ValuesFiles, h.Reuse, err)
	}
	h, err = ParseHelm(cmds[2])
	if err != nil || h.Set["hmac.secret"] != placeholder || h.Set["x"] != placeholder {
		t.Errorf("command substitution: set %q, err %v; want the stand-in in both values", h.Set, err)
	}
	if _, err := ParseHelm(cmds[3]); err == nil || !strings.Contains(err.Error(), "$X") {
		t.Errorf("a command reading $X: error %v, want one naming $X", err)
	}
	for _, words := range [][]string{
		{"helm", "install", "rls", ".", "--post-renderer", "x"},
		{"helm", "install", "rls", ".", "--set"},
		{"helm", "install", "rls"},
	} {
		if _, err := ParseHelm(DocCommand{Words: words}); err == nil {
			t.Errorf("%q passed; want an error", words)
		}
	}
}
