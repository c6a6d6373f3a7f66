package compose_test

import (
	"encoding/json"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/app"
	"github.com/envoy-rls/envoy-rls/internal/binarytest"
	"github.com/envoy-rls/envoy-rls/internal/deploytest"
	"github.com/envoy-rls/envoy-rls/internal/options"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
)

// dockerfile is what the quick start relies on from the Dockerfile's final
// stage.
type dockerfile struct {
	entrypoint, cmd []string
	expose          []string
	user            string
}

// readDockerfile reads the ENTRYPOINT, CMD, EXPOSE and USER of the final
// stage of the repository's Dockerfile. ENTRYPOINT and CMD must be in exec
// (JSON) form.
func readDockerfile(t *testing.T) dockerfile {
	t.Helper()
	var d dockerfile
	for _, line := range deploytest.DockerfileFinalStage(t, "Dockerfile") {
		instr, rest, _ := strings.Cut(line, " ")
		switch instr {
		case "ENTRYPOINT", "CMD":
			var words []string
			if err := json.Unmarshal([]byte(rest), &words); err != nil {
				t.Fatalf("Dockerfile %s %s: not exec form: %v", instr, rest, err)
			}
			if instr == "CMD" {
				d.cmd = words
			} else {
				d.entrypoint = words
			}
		case "EXPOSE":
			d.expose = strings.Fields(rest)
		case "USER":
			d.user = rest
		}
	}
	return d
}

// chartImage returns image.repository from the chart's values.yaml and the
// chart's appVersion, the tag the chart deploys by default.
func chartImage(t *testing.T) (repository, appVersion string) {
	t.Helper()
	repository = deploytest.ChartValue[string](t, "image", "repository")
	if appVersion = deploytest.Chart(t).AppVersion; appVersion == "" {
		t.Fatal("the chart has no appVersion")
	}
	return repository, appVersion
}

// docCommands returns the commands of file (relative to the module root)
// that start with prefix, $PWD and other expansions kept as written. A
// command the test cannot split fails it.
func docCommands(t *testing.T, file string, prefix ...string) []deploytest.DocCommand {
	t.Helper()
	var out []deploytest.DocCommand
	for _, c := range deploytest.MarkdownCommands(t, filepath.Join(binarytest.ModuleRoot(t), file)) {
		if len(c.Words) >= len(prefix) && slices.Equal(c.Words[:len(prefix)], prefix) {
			if c.Err != nil {
				t.Fatalf("%s:%d: %s: %v", file, c.Line, c.Text, c.Err)
			}
			out = append(out, c)
		}
	}
	return out
}

// quickstartDoc holds the Docker quick start.
const quickstartDoc = "docs/deploy.md"

// TestDockerQuickstart checks the Docker quick start of docs/deploy.md against what it
// runs: the image name is the chart's image at the chart's appVersion, the
// published container ports are the Dockerfile's EXPOSE and the ports the
// binary listens on by default, the mount target is the --config path of
// the Dockerfile's CMD, and the mounted directory is a rule directory the
// loader accepts. The build line, before it, tags that same image.
func TestDockerQuickstart(t *testing.T) {
	root := binarytest.ModuleRoot(t)
	repo, appVersion := chartImage(t)
	df := readDockerfile(t)

	// The image runs `envoy-rls serve --config DIR` with arguments serve
	// accepts, on the default ports, as a non-root user.
	if len(df.entrypoint) != 1 || filepath.Base(df.entrypoint[0]) != "envoy-rls" {
		t.Fatalf("Dockerfile ENTRYPOINT %q: want the envoy-rls binary alone", df.entrypoint)
	}
	if len(df.cmd) < 1 || df.cmd[0] != "serve" {
		t.Fatalf("Dockerfile CMD %q: want serve first", df.cmd)
	}
	if err := app.CheckServeArgs(df.cmd[1:], func(string) string { return "" }); err != nil {
		t.Errorf("Dockerfile CMD %q: envoy-rls serve rejects it: %v", df.cmd, err)
	}
	configDir := ""
	for i, a := range df.cmd {
		if a == "--config" && i+1 < len(df.cmd) {
			configDir = df.cmd[i+1]
		} else if v, ok := strings.CutPrefix(a, "--config="); ok {
			configDir = v
		}
	}
	if configDir == "" {
		t.Fatalf("Dockerfile CMD %q has no --config", df.cmd)
	}
	if strings.HasPrefix(df.user, "0") || df.user == "" || df.user == "root" {
		t.Errorf("Dockerfile USER %q: want a numeric non-root user", df.user)
	}
	var defaultPorts []string
	for _, addr := range []string{options.DefaultGRPCAddr, options.DefaultAdminAddr} {
		_, p, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatal(err)
		}
		defaultPorts = append(defaultPorts, p)
	}
	if !sameSet(df.expose, defaultPorts) {
		t.Errorf("Dockerfile EXPOSE %v, but serve listens on %v by default", df.expose, defaultPorts)
	}

	runs := docCommands(t, quickstartDoc, "docker", "run")
	if len(runs) != 1 {
		t.Fatalf(quickstartDoc+": %d docker run commands, want 1", len(runs))
	}
	run := runs[0]
	var ports, mounts []string
	image := ""
	words := run.Words[2:]
	for i := 0; i < len(words) && image == ""; i++ {
		switch w := words[i]; w {
		case "--rm", "-it", "-d":
		case "-p", "-v", "-e":
			if i+1 >= len(words) {
				t.Fatalf(quickstartDoc+":%d: %s without a value", run.Line, w)
			}
			i++
			if w == "-p" {
				ports = append(ports, words[i])
			} else if w == "-v" {
				mounts = append(mounts, words[i])
			}
		default:
			if strings.HasPrefix(w, "-") {
				t.Fatalf(quickstartDoc+":%d: docker run option %s is not understood by this test; teach it", run.Line, w)
			}
			image = w
		}
	}

	if want := repo + ":" + appVersion; image != want {
		t.Errorf(quickstartDoc+":%d: image %q, want the chart's %q (image.repository:appVersion)", run.Line, image, want)
	}
	var published []string
	for _, p := range ports {
		parts := strings.Split(p, ":")
		published = append(published, parts[len(parts)-1])
		if len(parts) < 2 || parts[len(parts)-2] != parts[len(parts)-1] {
			t.Errorf(quickstartDoc+":%d: -p %s: publish on the same host port, so the docs' localhost:PORT calls work", run.Line, p)
		}
	}
	if !sameSet(published, df.expose) {
		t.Errorf(quickstartDoc+":%d: publishes container ports %v, the Dockerfile exposes %v", run.Line, published, df.expose)
	}
	if len(mounts) != 1 {
		t.Fatalf(quickstartDoc+":%d: mounts %v, want the rules directory only", run.Line, mounts)
	}
	parts := strings.Split(mounts[0], ":")
	if len(parts) != 3 || parts[1] != configDir || parts[2] != "ro" {
		t.Errorf(quickstartDoc+":%d: -v %s: want SRC:%s:ro (the Dockerfile's --config)", run.Line, mounts[0], configDir)
	}
	src, ok := strings.CutPrefix(parts[0], "$PWD/")
	if !ok {
		t.Fatalf(quickstartDoc+":%d: mount source %s is not under $PWD (the repository root)", run.Line, parts[0])
	}
	if _, err := descriptors.Load(filepath.Join(root, src), descriptors.Options{Secret: make([]byte, 32)}); err != nil {
		t.Errorf(quickstartDoc+":%d: the mounted %s does not load: %v", run.Line, src, err)
	}

	builds := docCommands(t, quickstartDoc, "docker", "build")
	if len(builds) != 1 {
		t.Fatalf(quickstartDoc+": %d docker build commands, want 1", len(builds))
	}
	b := builds[0]
	if len(b.Words) != 5 || b.Words[2] != "-t" || b.Words[4] != "." {
		t.Fatalf(quickstartDoc+":%d: %q: want docker build -t IMAGE .", b.Line, b.Words)
	}
	// The build tags the image the run line starts and the chart deploys
	// (a tree's release is published only once it is tagged), and comes first.
	if want := repo + ":" + appVersion; b.Words[3] != want {
		t.Errorf(quickstartDoc+":%d: builds %s, want the chart's image %s (image.repository:appVersion)", b.Line, b.Words[3], want)
	}
	if b.Line > run.Line {
		t.Errorf(quickstartDoc+":%d: the docker build comes after the docker run (line %d) that needs its image", b.Line, run.Line)
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b)) && len(a) > 0
}
