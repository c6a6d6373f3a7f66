package release

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/envoy-rls/envoy-rls/internal/deploytest"
)

const root = "../.."

func read(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// runtimeStage returns the instructions of a Dockerfile's last stage
// (deploytest.DockerfileFinalStage) without its ARGs, which shape the build
// rather than the image's layout, and with COPY reduced to its destination
// (the sources differ: a build stage or prebuilt binaries).
func runtimeStage(t *testing.T, name string) []string {
	t.Helper()
	var stage []string
	for _, line := range deploytest.DockerfileFinalStage(t, name) {
		word, _, _ := strings.Cut(line, " ")
		switch strings.ToUpper(word) {
		case "ARG":
		case "COPY":
			f := strings.Fields(line)
			stage = append(stage, "COPY → "+f[len(f)-1])
		default:
			stage = append(stage, line)
		}
	}
	return stage
}

// The release image (goreleaser) and the image built from source must run
// the same way: base image, paths, user, ports, health check, entry point.
func TestDockerfilesShareRuntimeLayout(t *testing.T) {
	src, rel := runtimeStage(t, "Dockerfile"), runtimeStage(t, "release.Dockerfile")
	if !slices.Equal(src, rel) {
		t.Fatalf("runtime stages differ:\nDockerfile:\n  %s\nrelease.Dockerfile:\n  %s", strings.Join(src, "\n  "), strings.Join(rel, "\n  "))
	}
	for _, want := range []string{
		"FROM gcr.io/distroless/static-debian12:nonroot",
		"USER 65532:65532",
		"EXPOSE 8081 8080",
		`ENTRYPOINT ["/usr/local/bin/envoy-rls"]`,
		`CMD ["serve", "--config", "/etc/envoy-rls/rules"]`,
	} {
		if !slices.Contains(rel, want) {
			t.Errorf("release.Dockerfile lacks %q", want)
		}
	}
}

type goreleaser struct {
	Builds []struct {
		ID      string   `yaml:"id"`
		Main    string   `yaml:"main"`
		Env     []string `yaml:"env"`
		Goos    []string `yaml:"goos"`
		Goarch  []string `yaml:"goarch"`
		Ldflags []string `yaml:"ldflags"`
	} `yaml:"builds"`
	Dockers []struct {
		IDs        []string `yaml:"ids"`
		Dockerfile string   `yaml:"dockerfile"`
		Images     []string `yaml:"images"`
		Tags       []string `yaml:"tags"`
		Platforms  []string `yaml:"platforms"`
	} `yaml:"dockers_v2"`
}

// The release publishes the image the chart deploys, for both
// architectures, tagged the way the chart's appVersion names it.
func TestReleaseImageIsTheChartImage(t *testing.T) {
	var g goreleaser
	if err := yaml.Unmarshal([]byte(read(t, ".goreleaser.yaml")), &g); err != nil {
		t.Fatal(err)
	}
	repository := deploytest.ChartValue[string](t, "image", "repository")
	if len(g.Dockers) != 1 {
		t.Fatalf("%d dockers_v2 entries, want 1", len(g.Dockers))
	}
	d := g.Dockers[0]
	if !slices.Equal(d.Images, []string{repository}) {
		t.Errorf("release images %v, chart image.repository %q", d.Images, repository)
	}
	if !slices.Equal(d.Platforms, []string{"linux/amd64", "linux/arm64"}) {
		t.Errorf("image platforms %v", d.Platforms)
	}
	// The workflow packages the chart with appVersion = the tag without its
	// v, and the chart's default image tag is its appVersion.
	if !slices.Contains(d.Tags, "{{ .Version }}") {
		t.Errorf("image tags %v lack {{ .Version }} (the chart's appVersion)", d.Tags)
	}
	wf := read(t, ".github/workflows/release.yml")
	for _, want := range []string{`version="${GITHUB_REF_NAME#v}"`, `--version "$version" --app-version "$version"`, "oci://ghcr.io/envoy-rls/charts"} {
		if !strings.Contains(wf, want) {
			t.Errorf("release.yml lacks %q", want)
		}
	}
	built := map[string]bool{}
	for _, b := range g.Builds {
		built[b.ID] = true
		if !slices.Equal(b.Goos, []string{"linux"}) || !slices.Equal(b.Goarch, []string{"amd64", "arm64"}) || !slices.Contains(b.Env, "CGO_ENABLED=0") {
			t.Errorf("build %s: goos %v goarch %v env %v, want static linux amd64+arm64", b.ID, b.Goos, b.Goarch, b.Env)
		}
	}
	for _, id := range d.IDs {
		if !built[id] {
			t.Errorf("the image uses build %q, which .goreleaser.yaml does not define", id)
		}
	}
}

// Every release path stamps the three variables internal/buildinfo reads.
func TestStampsNameTheBuildinfoVariables(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(root, "internal/buildinfo/buildinfo.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var vars []string
	for _, decl := range f.Decls {
		if gd, ok := decl.(*ast.GenDecl); ok && gd.Tok == token.VAR {
			for _, spec := range gd.Specs {
				for _, n := range spec.(*ast.ValueSpec).Names {
					vars = append(vars, n.Name)
				}
			}
		}
	}
	slices.Sort(vars)
	if !slices.Equal(vars, []string{"date", "revision", "version"}) {
		t.Fatalf("internal/buildinfo declares %v; update the stamps in every release path", vars)
	}
	stamp := regexp.MustCompile(`-X\s+\S*?\.(\w+)=`)
	for _, name := range []string{".goreleaser.yaml", "Makefile", "Dockerfile"} {
		text := read(t, name)
		if !strings.Contains(text, "github.com/envoy-rls/envoy-rls/internal/buildinfo") {
			t.Errorf("%s does not name the buildinfo package", name)
		}
		var got []string
		for _, m := range stamp.FindAllStringSubmatch(text, -1) {
			got = append(got, m[1])
		}
		slices.Sort(got)
		if !slices.Equal(got, vars) {
			t.Errorf("%s stamps %v, want %v", name, got, vars)
		}
	}
}

// The workflows install the goreleaser that scripts/ensure-tool.sh pins for
// `make release-check` and `make release-snapshot`, so CI checks the
// release configuration with the version that publishes it.
func TestWorkflowsUseThePinnedGoreleaser(t *testing.T) {
	m := regexp.MustCompile(`GORELEASER_VERSION="\$\{GORELEASER_VERSION:-(v[0-9.]+)\}"`).FindStringSubmatch(read(t, "scripts/ensure-tool.sh"))
	if m == nil {
		t.Fatal("scripts/ensure-tool.sh pins no GORELEASER_VERSION")
	}
	for _, wf := range []string{".github/workflows/ci.yml", ".github/workflows/release.yml"} {
		var w struct {
			Jobs map[string]struct {
				Steps []struct {
					Uses string            `yaml:"uses"`
					With map[string]string `yaml:"with"`
				} `yaml:"steps"`
			} `yaml:"jobs"`
		}
		if err := yaml.Unmarshal([]byte(read(t, wf)), &w); err != nil {
			t.Fatalf("%s: %v", wf, err)
		}
		found := false
		for _, j := range w.Jobs {
			for _, s := range j.Steps {
				if strings.HasPrefix(s.Uses, "goreleaser/goreleaser-action@") {
					found = true
					if s.With["version"] != m[1] {
						t.Errorf("%s: goreleaser-action installs %q, scripts/ensure-tool.sh pins %s", wf, s.With["version"], m[1])
					}
				}
			}
		}
		if !found {
			t.Errorf("%s: no goreleaser/goreleaser-action step", wf)
		}
	}
}

// Both images, and `make build`, provide ratelimit, the reference
// service's entry point, as a link to the binary the image runs.
func TestRatelimitEntryPoint(t *testing.T) {
	link := "deploy/image/bin/ratelimit"
	target, err := os.Readlink(filepath.Join(root, link))
	if err != nil {
		t.Fatalf("%s must be a symbolic link: %v", link, err)
	}
	if target != "/usr/local/bin/envoy-rls" {
		t.Errorf("%s points at %q, want the image's binary /usr/local/bin/envoy-rls", link, target)
	}
	for _, name := range []string{"Dockerfile", "release.Dockerfile"} {
		found := false
		for _, line := range deploytest.DockerfileFinalStage(t, name) {
			f := strings.Fields(line)
			if len(f) >= 3 && strings.EqualFold(f[0], "COPY") && f[len(f)-2] == "deploy/image/bin/" && f[len(f)-1] == "/bin/" {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: the runtime stage lacks COPY deploy/image/bin/ /bin/ (a directory, so that the link stays a link)", name)
		}
	}
	var g struct {
		Dockers []struct {
			ExtraFiles []string `yaml:"extra_files"`
		} `yaml:"dockers_v2"`
	}
	if err := yaml.Unmarshal([]byte(read(t, ".goreleaser.yaml")), &g); err != nil {
		t.Fatal(err)
	}
	if len(g.Dockers) != 1 || !slices.Contains(g.Dockers[0].ExtraFiles, link) {
		t.Errorf(".goreleaser.yaml: the image's extra_files lack %s", link)
	}
	if mk := read(t, "Makefile"); !strings.Contains(mk, "ln -sf envoy-rls $(BIN)/ratelimit") {
		t.Error("Makefile: build does not link bin/ratelimit to bin/envoy-rls")
	}
}

// The Makefile, the front door: every .PHONY name has a rule (a phony name
// without one does nothing), so has every target .ci/run calls, and `make
// help` lists the targets in two aligned columns, each description
// starting at the same column however long the target's name.
func TestMakefile(t *testing.T) {
	mk := read(t, "Makefile")
	rules := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^([a-zA-Z0-9_-]+):([^=]|$)`).FindAllStringSubmatch(mk, -1) {
		rules[m[1]] = true
	}
	var phony []string
	for _, m := range regexp.MustCompile(`(?m)^\.PHONY:(.*)$`).FindAllStringSubmatch(mk, -1) {
		phony = append(phony, strings.Fields(m[1])...)
	}
	for _, m := range regexp.MustCompile(`(?m)^make ([a-z-]+)$`).FindAllStringSubmatch(read(t, ".ci/run"), -1) {
		phony = append(phony, m[1])
	}
	if len(phony) < 20 {
		t.Fatalf("found %d phony and CI targets; the Makefile's .PHONY lines or .ci/run changed shape", len(phony))
	}
	for _, p := range phony {
		if !rules[p] {
			t.Errorf("Makefile: %s is phony or run by .ci/run but has no rule", p)
		}
	}

	cmd := exec.Command("make", "-s", "help")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("make help: %v", err)
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	col := -1
	for _, l := range lines {
		m := regexp.MustCompile(`^  ([a-zA-Z0-9_-]+) +()\S`).FindStringSubmatchIndex(l)
		if m == nil || !rules[l[m[2]:m[3]]] {
			t.Fatalf("make help: %q is not a target and its description", l)
		}
		if col < 0 {
			col = m[4]
		}
		if m[4] != col || l[m[4]-2:m[4]] != "  " {
			t.Errorf("make help: %q: the description starts at column %d, want %d after two spaces at least", l, m[4], col)
		}
	}
	if len(lines) < 20 {
		t.Errorf("make help lists %d targets", len(lines))
	}
}
