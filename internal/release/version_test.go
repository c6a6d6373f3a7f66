package release

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/envoy-rls/envoy-rls/internal/deploytest"
)

// TestOneVersion: the chart's version is the version of the tree, and
// everything that names a release agrees with it: the chart's appVersion
// (the image tag it deploys and whose flags it passes), every
// ghcr.io/envoy-rls/envoy-rls:TAG the user guides name (docs/releasing.md's
// 1.2.3 illustrates the scheme), and the tag the release workflow accepts.
func TestOneVersion(t *testing.T) {
	chart := deploytest.Chart(t)
	if !regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+$`).MatchString(chart.Version) || chart.AppVersion != chart.Version {
		t.Fatalf("Chart.yaml version %q, appVersion %q: want one MAJOR.MINOR.PATCH in both", chart.Version, chart.AppVersion)
	}
	image := regexp.MustCompile(`ghcr\.io/envoy-rls/envoy-rls:([0-9A-Za-z._-]+)`)
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join(root, "README.md"), filepath.Join(root, "deploy", "helm", "envoy-rls", "README.md"))
	named := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range image.FindAllStringSubmatch(string(b), -1) {
			if filepath.Base(f) == "releasing.md" && m[1] == "1.2.3" {
				continue
			}
			named++
			if m[1] != chart.AppVersion {
				t.Errorf("%s names %s: want the chart's appVersion %s", f, m[0], chart.AppVersion)
			}
		}
	}
	if named == 0 {
		t.Error("no guide names the image; the quick start lost it")
	}
}

// TestReleaseTagGuard runs the release workflow's check of the tag: the
// chart's version with a v (or a pre-release of it) passes, any other tag
// stops the release with a line saying what to change.
func TestReleaseTagGuard(t *testing.T) {
	var wf struct {
		Jobs map[string]struct {
			Steps []struct {
				Name string `yaml:"name"`
				Run  string `yaml:"run"`
			} `yaml:"steps"`
		} `yaml:"jobs"`
	}
	if err := yaml.Unmarshal([]byte(read(t, ".github/workflows/release.yml")), &wf); err != nil {
		t.Fatal(err)
	}
	script := ""
	for i, s := range wf.Jobs["release"].Steps {
		if s.Name == "Check that the tag is the chart's version" {
			script = s.Run
			if i != 1 {
				t.Errorf("the tag check is step %d; want it right after the checkout, before anything is built", i+1)
			}
		}
	}
	if script == "" {
		t.Fatal("release.yml has no step checking the tag against the chart's version")
	}
	version := deploytest.Chart(t).Version
	run := func(tag string) (string, error) {
		cmd := exec.Command("bash", "-c", script)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "GITHUB_REF_NAME="+tag)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	for _, tag := range []string{"v" + version, "v" + version + "-rc.1"} {
		if out, err := run(tag); err != nil {
			t.Fatalf("tag %s: %v\n%s", tag, err, out)
		}
	}
	for _, tag := range []string{"v0.1.0", version, "v" + version + "0", "x" + version} {
		out, err := run(tag)
		if err == nil || !strings.Contains(out, "is not the chart's version v"+version) {
			t.Errorf("tag %s: %v %q, want the release refused", tag, err, out)
		}
	}
}
