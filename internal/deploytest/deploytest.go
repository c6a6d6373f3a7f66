// Package deploytest holds what the deployment tests (the Helm chart, the
// compose demo, the Istio example, the release files) share: the flag names
// the serve command of the binary (internal/binarytest) accepts (so that a
// manifest cannot pass a flag the binary does not have), the pinned tools,
// the final stage of a Dockerfile, the chart's values.yaml and Chart.yaml,
// the fenced blocks and shell commands of the Markdown docs, and the
// documented helm install commands read flag by flag. Paths are relative to
// the repository root (binarytest.ModuleRoot).
package deploytest

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/binarytest"
)

// flagLine matches a flag in the serve help: "  --grpc-addr [HOST]:PORT".
var flagLine = regexp.MustCompile(`^  --([a-z0-9][a-z0-9-]*)`)

// ServeFlags returns the names of the flags `envoy-rls serve` accepts, read
// from the real binary's usage text.
func ServeFlags(t testing.TB) map[string]bool {
	t.Helper()
	cmd := exec.Command(binarytest.Build(t), "serve", "-h")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("envoy-rls serve -h: %v\n%s", err, out.String())
	}
	flags := map[string]bool{}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		if m := flagLine.FindStringSubmatch(sc.Text()); m != nil {
			flags[m[1]] = true
		}
	}
	if !flags["config"] || !flags["store"] {
		t.Fatalf("could not read the serve flags from:\n%s", out.String())
	}
	return flags
}

// CheckArgs fails t for every --flag in args that `envoy-rls serve` does not
// define. args are the words after "serve"; only "--name" and "--name=value"
// forms are accepted, the style the manifests use.
func CheckArgs(t testing.TB, where string, args []string, flags map[string]bool) {
	t.Helper()
	for _, a := range args {
		if !strings.HasPrefix(a, "--") {
			t.Errorf("%s: argument %q is not a --flag", where, a)
			continue
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !flags[name] {
			t.Errorf("%s: envoy-rls serve has no flag --%s", where, name)
		}
	}
}

// Tool returns the path of a pinned developer tool (helm, helm-docs,
// goreleaser, actionlint) as scripts/ensure-tool.sh finds it, or the path in
// $HELM, $HELM_DOCS, ... when set. A missing tool skips the test, except in
// CI (CI=true), where `make deps` must have installed it: there it fails.
func Tool(t testing.TB, name string) string {
	t.Helper()
	if p := os.Getenv(strings.ToUpper(strings.ReplaceAll(name, "-", "_"))); p != "" {
		return p
	}
	cmd := exec.Command(filepath.Join(binarytest.ModuleRoot(t), "scripts", "ensure-tool.sh"), "--find", name)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err == nil {
		return strings.TrimSpace(string(out))
	}
	msg := strings.TrimSpace(stderr.String())
	if msg == "" {
		msg = err.Error()
	}
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}
