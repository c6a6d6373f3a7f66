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

	"github.com/envoy-rls/envoy-rls/internal/binarytest"
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
	return deploytest.DocsCommands(t, binarytest.ModuleRoot(t), substitute)
}

// TestDocsHelmCommands: every helm install/upgrade command in the
// repository's Markdown renders against this chart as written (the chart
// reference pointed at the local chart, every value flag kept, paths from
// the repository root), and the envoy-rls binary accepts the rendered
// Deployment's args (manifests runs them through app.CheckServeArgs). An
// upgrade with --reuse-values starts from the values of the file's latest
// install of that release.
func TestDocsHelmCommands(t *testing.T) {
	root := binarytest.ModuleRoot(t)
	var cmds []deploytest.DocCommand
	seen := map[string]bool{}
	for _, c := range docCommands(t) {
		if deploytest.IsHelmInstall(c) {
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
			h, err := deploytest.ParseHelm(c)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasSuffix(strings.TrimSuffix(h.Chart, "/"), "envoy-rls") {
				t.Fatalf("%s: chart %q is not envoy-rls", c, h.Chart)
			}
			flags := h.Flags
			if h.Verb == "install" {
				installs[c.File+" "+h.Release] = flags
			}
			if h.Reuse {
				prev, ok := installs[c.File+" "+h.Release]
				if !ok {
					t.Fatalf("%s: --reuse-values without an earlier helm install of %s in %s", c, h.Release, c.File)
				}
				flags = append(append([]string{}, prev...), flags...)
			}
			args := append([]string{"template", h.Release, deploytest.ChartDir(t)}, flags...)
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
	root := binarytest.ModuleRoot(t)
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
		case deploytest.IsHelmInstall(c):
			h, err := deploytest.ParseHelm(c)
			if err != nil {
				t.Error(err)
				continue
			}
			if strings.HasPrefix(h.Chart, "oci://") {
				continue // checking it needs the registry
			}
			if h.Chart != "deploy/helm/envoy-rls" {
				t.Errorf("%s: chart %q: want deploy/helm/envoy-rls (the chart in this repository, from its root)", c, h.Chart)
				continue
			}
			fullname := h.Release
			if !strings.Contains(h.Release, "envoy-rls") {
				fullname += "-envoy-rls"
			}
			releases[h.Namespace+"/"+fullname] = h.Release
			if h.Verb == "upgrade" {
				continue
			}
			if file == "README.md" || strings.HasPrefix(file, "docs/") {
				installs++
			}
			if h.Namespace == "" || !(h.CreateNamespace || namespaces[h.Namespace]) {
				t.Errorf("%s:%d: namespace %q is neither created above nor --create-namespace", file, h.Line, h.Namespace)
			}
			for _, path := range h.ValuesFiles {
				if _, err := os.Stat(filepath.Join(root, path)); err != nil {
					t.Errorf("%s:%d: -f %s: %v", file, h.Line, path, err)
				}
			}
			for k, path := range h.SetFile {
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
			if h.Set["store"] != "redis" {
				continue
			}
			secret, key := h.Set["hmac.existingSecret"], values.hmacKey
			if k, ok := h.Set["hmac.key"]; ok {
				key = k
			}
			_, inline := h.SetFile["hmac.secret"]
			inline = inline || h.Set["hmac.secret"] != ""
			got, created := secrets[h.Namespace+"/"+secret]
			if secret == "" && !inline {
				t.Errorf("%s:%d: store=redis without hmac.existingSecret or hmac.secret", file, h.Line)
			} else if secret != "" && (!created || got != key) {
				t.Errorf("%s:%d: hmac.existingSecret=%s: no kubectl command above creates it in namespace %s with the key %s the chart reads (have %v)", file, h.Line, secret, h.Namespace, key, secrets)
			}
			if h.Set["redis.addr"] == "" {
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
	v := deploytest.ChartValues(t)
	grpcPort, adminPort := get(v, "grpc", "port"), get(v, "admin", "port")
	if grpcPort == nil || adminPort == nil || str(get(v, "hmac", "key")) == "" {
		t.Fatal("values.yaml lacks grpc.port, admin.port or hmac.key")
	}
	return docValues{fmt.Sprint(grpcPort), fmt.Sprint(adminPort), str(get(v, "hmac", "key"))}
}
