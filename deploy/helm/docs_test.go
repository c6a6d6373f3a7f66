package helm_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/deploytest"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
)

// substituted stands for the output of a command substitution $(...) in a
// documented command (such as a generated HMAC key): 32 bytes, letters only.
const substituted = "docsTestStandInForCommandOutputX"

// substitute is how the docs tests read expansions: $(...) stands in as
// substituted, and what reads the user's environment ($VAR) fails.
var substitute = deploytest.Substitute(substituted)

// docCommands returns the commands of every Markdown file in the
// repository, expansions replaced by substitute.
func docCommands(t *testing.T) []deploytest.DocCommand {
	t.Helper()
	return deploytest.DocsCommands(t, deploytest.ModuleRoot(t), substitute)
}

// isHelmInstall tells a helm install or helm upgrade command, even one
// whose words could not all be split.
func isHelmInstall(c deploytest.DocCommand) bool {
	if len(c.Words) >= 2 && c.Words[0] == "helm" {
		return c.Words[1] == "install" || c.Words[1] == "upgrade"
	}
	return strings.HasPrefix(c.Text, "helm install ") || strings.HasPrefix(c.Text, "helm upgrade ")
}

// helmCommand is a documented `helm install|upgrade [flags] NAME CHART
// [flags]`, read flag by flag.
type helmCommand struct {
	deploytest.DocCommand
	verb            string // install or upgrade
	release, chart  string
	namespace       string
	createNamespace bool
	reuse           bool              // starts from the release's earlier values
	flags           []string          // the value flags helm template takes, in order
	set             map[string]string // --set, --set-string, --set-literal, --set-json: key -> value
	setFile         map[string]string // --set-file: key -> path
	valuesFiles     []string          // -f, --values
}

// Flags of helm install/upgrade that carry a value, kept for helm template.
var keptValueFlags = map[string]bool{
	"--set": true, "--set-string": true, "--set-file": true, "--set-json": true, "--set-literal": true,
	"-f": true, "--values": true, "-n": true, "--namespace": true, "--kube-version": true,
}

// Flags with a value that only matter to a live install.
var droppedValueFlags = map[string]bool{
	"--version": true, "--timeout": true, "--description": true, "--repo": true,
}

// Boolean flags that do not change what is rendered.
var droppedBoolFlags = map[string]bool{
	"--create-namespace": true, "--wait": true, "--wait-for-jobs": true, "--atomic": true, "--install": true,
	"-i": true, "--debug": true, "--reuse-values": true, "--reset-then-reuse-values": true, "--cleanup-on-fail": true,
	"--dry-run": true, "--devel": true, "--force": true,
}

// parseHelm reads a documented helm install or upgrade command. A flag the
// tables above do not know is an error: the test must be taught whether it
// changes the render.
func parseHelm(c deploytest.DocCommand) (helmCommand, error) {
	h := helmCommand{DocCommand: c, set: map[string]string{}, setFile: map[string]string{}}
	if c.Err != nil {
		return h, fmt.Errorf("%s: %w", c, c.Err)
	}
	if !isHelmInstall(c) {
		return h, fmt.Errorf("%s: not a helm install or upgrade", c)
	}
	h.verb = c.Words[1]
	var pos []string
	w := c.Words[2:]
	for i := 0; i < len(w); i++ {
		a := w[i]
		if !strings.HasPrefix(a, "-") {
			pos = append(pos, a)
			continue
		}
		flag, val, hasVal := strings.Cut(a, "=")
		switch {
		case keptValueFlags[flag] || droppedValueFlags[flag]:
			if !hasVal {
				if i+1 >= len(w) {
					return h, fmt.Errorf("%s: %s has no value", c, flag)
				}
				i++
				val = w[i]
			}
			if !keptValueFlags[flag] {
				continue
			}
			h.flags = append(h.flags, flag, val)
			k, v, _ := strings.Cut(val, "=")
			switch flag {
			case "--set", "--set-string", "--set-literal", "--set-json":
				h.set[k] = v
			case "--set-file":
				h.setFile[k] = v
			case "-f", "--values":
				h.valuesFiles = append(h.valuesFiles, val)
			case "-n", "--namespace":
				h.namespace = val
			}
		case droppedBoolFlags[flag]:
			switch flag {
			case "--create-namespace":
				h.createNamespace = true
			case "--reuse-values", "--reset-then-reuse-values":
				h.reuse = true
			}
		default:
			return h, fmt.Errorf("%s: flag %s is unknown to the docs test; teach it whether the flag changes the render", c, flag)
		}
	}
	if len(pos) != 2 {
		return h, fmt.Errorf("%s: want a release name and a chart, got %q", c, pos)
	}
	h.release, h.chart = pos[0], pos[1]
	return h, nil
}

// TestDocsHelmCommands: every helm install/upgrade command in the
// repository's Markdown renders against this chart as written (the chart
// reference pointed at the local chart, every value flag kept, paths from
// the repository root), and the envoy-rls binary accepts the rendered
// Deployment's args (manifests runs them through app.CheckServeArgs). An
// upgrade with --reuse-values starts from the values of the file's latest
// install of that release.
func TestDocsHelmCommands(t *testing.T) {
	root := deploytest.ModuleRoot(t)
	var cmds []deploytest.DocCommand
	seen := map[string]bool{}
	for _, c := range docCommands(t) {
		if isHelmInstall(c) {
			cmds = append(cmds, c)
			seen[c.File] = true
		}
	}
	for _, f := range []string{"docs/istio.md", "deploy/helm/envoy-rls/README.md"} {
		if !seen[f] {
			t.Errorf("no helm install/upgrade command found in %s; the extractor is broken or the guide lost its command", f)
		}
	}
	installs := map[string][]string{} // file + release -> value flags
	for _, c := range cmds {
		t.Run(fmt.Sprintf("%s:%d", c.File, c.Line), func(t *testing.T) {
			h, err := parseHelm(c)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasSuffix(strings.TrimSuffix(h.chart, "/"), "envoy-rls") {
				t.Fatalf("%s: chart %q is not envoy-rls", c, h.chart)
			}
			flags := h.flags
			if h.verb == "install" {
				installs[c.File+" "+h.release] = flags
			}
			if h.reuse {
				prev, ok := installs[c.File+" "+h.release]
				if !ok {
					t.Fatalf("%s: --reuse-values without an earlier helm install of %s in %s", c, h.release, c.File)
				}
				flags = append(append([]string{}, prev...), flags...)
			}
			args := append([]string{"template", h.release, chartDir(t)}, flags...)
			cmd := exec.Command(helmBin(t), args...)
			cmd.Dir = root
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("%s\nas helm %s: %v\n%s", c, strings.Join(args, " "), err, stderr.String())
			}
			m := manifests(t, args, stdout.String())
			if len(m["Deployment"]) != 1 {
				t.Fatalf("%s: rendered %d Deployments, want 1", c, len(m["Deployment"]))
			}
		})
	}
}

// TestDocsHelmCommandsExtraction: a documented helm command is read as the
// shell would pass it, every value flag kept for helm template, and a flag
// the test does not know fails. (How commands are found in Markdown and
// split is internal/deploytest's TestParseMarkdownBlocks and
// TestSplitWords.)
func TestDocsHelmCommandsExtraction(t *testing.T) {
	var cmds []deploytest.DocCommand
	for _, line := range []string{
		"helm install rls oci://ghcr.io/envoy-rls/charts/envoy-rls --version 0.2.0 -n envoy-rls --create-namespace " +
			"--set store=redis --set redis.addr=a:6379\\,b:6379 --set-string \"hmac.secret=0123456789abcdef\\\"x\" " +
			"--set-file 'rules.files.ingress\\.yaml=config/examples/istio/rules/ingress.yaml' # a comment",
		"helm upgrade rls deploy/helm/envoy-rls --reuse-values -f=my.yaml",
		"helm install rls . --set-string hmac.secret=\"$(head -c 32 /dev/urandom | base64)\" --set-string x=$(date)",
		"helm install rls . --set a=$X",
	} {
		words, err := deploytest.SplitWords(line, substitute)
		cmds = append(cmds, deploytest.DocCommand{File: "x.md", Line: len(cmds) + 1, Text: line, Words: words, Err: err})
	}
	h, err := parseHelm(cmds[0])
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"-n", "envoy-rls", "--set", "store=redis", "--set", "redis.addr=a:6379,b:6379", // the shell ate the backslash
		"--set-string", `hmac.secret=0123456789abcdef"x`, "--set-file", `rules.files.ingress\.yaml=config/examples/istio/rules/ingress.yaml`}
	if h.release != "rls" || h.chart != "oci://ghcr.io/envoy-rls/charts/envoy-rls" || h.reuse || !slices.Equal(h.flags, want) {
		t.Errorf("got release %q chart %q reuse %v flags %q; want rls, the OCI chart, false, %q", h.release, h.chart, h.reuse, h.flags, want)
	}
	if h.verb != "install" || h.namespace != "envoy-rls" || !h.createNamespace || h.set["store"] != "redis" ||
		h.set["redis.addr"] != "a:6379,b:6379" || h.set["hmac.secret"] != `0123456789abcdef"x` ||
		h.setFile[`rules.files.ingress\.yaml`] != "config/examples/istio/rules/ingress.yaml" {
		t.Errorf("install read as %+v", h)
	}
	h, err = parseHelm(cmds[1])
	if err != nil || !h.reuse || strings.Join(h.flags, "|") != "-f|my.yaml" || !slices.Equal(h.valuesFiles, []string{"my.yaml"}) || h.verb != "upgrade" {
		t.Errorf("upgrade: flags %q values %q reuse %v err %v; want [-f my.yaml], reuse", h.flags, h.valuesFiles, h.reuse, err)
	}
	h, err = parseHelm(cmds[2])
	if err != nil || h.set["hmac.secret"] != substituted || h.set["x"] != substituted {
		t.Errorf("command substitution: set %q, err %v; want the stand-in in both values", h.set, err)
	}
	if _, err := parseHelm(cmds[3]); err == nil || !strings.Contains(err.Error(), "$X") {
		t.Errorf("a command reading $X: error %v, want one naming $X", err)
	}
	for _, words := range [][]string{
		{"helm", "install", "rls", ".", "--post-renderer", "x"},
		{"helm", "install", "rls", ".", "--set"},
		{"helm", "install", "rls"},
	} {
		if _, err := parseHelm(deploytest.DocCommand{Words: words}); err == nil {
			t.Errorf("%q passed; want an error", words)
		}
	}
}

// kubectlNamespace returns the -n value of a kubectl command and its other
// words.
func kubectlNamespace(words []string) (string, []string) {
	ns, rest := "", []string{}
	for i := 1; i < len(words); i++ {
		if (words[i] == "-n" || words[i] == "--namespace") && i+1 < len(words) {
			ns = words[i+1]
			i++
			continue
		}
		rest = append(rest, words[i])
	}
	return ns, rest
}

// TestDocsKubernetes checks the Kubernetes commands of every Markdown file
// against each other and the chart: every `helm install` uses the chart in
// this repository with files that exist (rule files that load), a namespace
// that is created, and, with store=redis, redis.addr and an HMAC key: given
// to the chart, or an existing Secret that an earlier kubectl command
// creates in that namespace under the key the chart reads; every
// port-forward and rollout names the Service or Deployment the chart makes
// for that release, and the chart's ports. (TestDocsHelmCommands renders
// each command with helm; this test needs no helm.)
func TestDocsKubernetes(t *testing.T) {
	root := deploytest.ModuleRoot(t)
	values := readValues(t)
	installs := 0 // in the README and docs/
	var (
		file       string
		namespaces map[string]bool
		secrets    map[string]string // namespace/name -> key
		releases   map[string]string // namespace/fullname -> release
	)
	for _, c := range docCommands(t) {
		if c.File != file { // each guide stands alone
			file, namespaces, secrets, releases = c.File, map[string]bool{}, map[string]string{}, map[string]string{}
		}
		switch {
		case len(c.Words) > 2 && c.Words[0] == "kubectl":
			ns, rest := kubectlNamespace(c.Words)
			createNamespace := len(rest) == 3 && rest[0] == "create" && rest[1] == "namespace"
			createSecret := len(rest) >= 4 && slices.Equal(rest[:3], []string{"create", "secret", "generic"})
			reach := len(rest) > 1 && rest[0] == "port-forward" || len(rest) > 2 && rest[0] == "rollout" && rest[1] == "status"
			if (createNamespace || createSecret || reach) && c.Err != nil {
				t.Errorf("%s: %v", c, c.Err)
				continue
			}
			switch {
			case createNamespace:
				namespaces[rest[2]] = true
			case createSecret:
				for _, r := range rest[4:] {
					if lit, ok := strings.CutPrefix(r, "--from-literal="); ok {
						k, _, _ := strings.Cut(lit, "=")
						secrets[ns+"/"+rest[3]] = k
					} else if f, ok := strings.CutPrefix(r, "--from-file="); ok {
						k, _, hasKey := strings.Cut(f, "=")
						if !hasKey {
							k = filepath.Base(f)
						}
						secrets[ns+"/"+rest[3]] = k
					}
				}
			case reach:
				target := rest[1]
				if rest[0] == "rollout" {
					target = rest[2]
				}
				kind, name, _ := strings.Cut(target, "/")
				if _, ok := releases[ns+"/"+name]; !ok || (kind != "svc" && kind != "service" && kind != "deployment" && kind != "deploy") {
					t.Errorf("%s:%d: %s in namespace %q is not what a helm install above creates (%v)", file, c.Line, target, ns, releases)
				}
				if rest[0] == "port-forward" {
					for _, p := range rest[2:] {
						remote := p[strings.LastIndex(p, ":")+1:]
						if remote != values.grpcPort && remote != values.adminPort {
							t.Errorf("%s:%d: port %s: the chart's ports are %s (gRPC) and %s (admin)", file, c.Line, p, values.grpcPort, values.adminPort)
						}
					}
				}
			}
		case isHelmInstall(c):
			h, err := parseHelm(c)
			if err != nil {
				t.Error(err)
				continue
			}
			if strings.HasPrefix(h.chart, "oci://") {
				continue // checking it needs the registry
			}
			if h.chart != "deploy/helm/envoy-rls" {
				t.Errorf("%s: chart %q: want deploy/helm/envoy-rls (the chart in this repository, from its root)", c, h.chart)
				continue
			}
			fullname := h.release
			if !strings.Contains(h.release, "envoy-rls") {
				fullname += "-envoy-rls"
			}
			releases[h.namespace+"/"+fullname] = h.release
			if h.verb == "upgrade" {
				continue
			}
			if file == "README.md" || strings.HasPrefix(file, "docs/") {
				installs++
			}
			if h.namespace == "" || !(h.createNamespace || namespaces[h.namespace]) {
				t.Errorf("%s:%d: namespace %q is neither created above nor --create-namespace", file, h.Line, h.namespace)
			}
			for _, path := range h.valuesFiles {
				if _, err := os.Stat(filepath.Join(root, path)); err != nil {
					t.Errorf("%s:%d: -f %s: %v", file, h.Line, path, err)
				}
			}
			for k, path := range h.setFile {
				if _, err := os.Stat(filepath.Join(root, path)); err != nil {
					t.Errorf("%s:%d: --set-file %s: %v", file, h.Line, k, err)
					continue
				}
				if strings.HasPrefix(k, "rules.files.") {
					if _, err := descriptors.Load(filepath.Join(root, path), descriptors.Options{Secret: make([]byte, 32)}); err != nil {
						t.Errorf("%s:%d: --set-file %s: %v", file, h.Line, k, err)
					}
				}
			}
			if h.set["store"] != "redis" {
				continue
			}
			secret, key := h.set["hmac.existingSecret"], values.hmacKey
			if k, ok := h.set["hmac.key"]; ok {
				key = k
			}
			_, inline := h.setFile["hmac.secret"]
			inline = inline || h.set["hmac.secret"] != ""
			got, created := secrets[h.namespace+"/"+secret]
			if secret == "" && !inline {
				t.Errorf("%s:%d: store=redis without hmac.existingSecret or hmac.secret", file, h.Line)
			} else if secret != "" && (!created || got != key) {
				t.Errorf("%s:%d: hmac.existingSecret=%s: no kubectl command above creates it in namespace %s with the key %s the chart reads (have %v)", file, h.Line, secret, h.namespace, key, secrets)
			}
			if h.set["redis.addr"] == "" {
				t.Errorf("%s:%d: store=redis without redis.addr", file, h.Line)
			}
		}
	}
	if installs < 3 {
		t.Errorf("found %d helm install commands in README.md and docs/; the README has two and docs/istio.md one", installs)
	}
}

// docValues are the chart values the docs' commands must agree with.
type docValues struct{ grpcPort, adminPort, hmacKey string }

func readValues(t *testing.T) docValues {
	t.Helper()
	v := chartValues(t)
	grpcPort, adminPort := get(v, "grpc", "port"), get(v, "admin", "port")
	if grpcPort == nil || adminPort == nil || str(get(v, "hmac", "key")) == "" {
		t.Fatal("values.yaml lacks grpc.port, admin.port or hmac.key")
	}
	return docValues{fmt.Sprint(grpcPort), fmt.Sprint(adminPort), str(get(v, "hmac", "key"))}
}
