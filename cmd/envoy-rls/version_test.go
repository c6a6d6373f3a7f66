package main

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/binarytest"
)

// A release build stamps the version, commit and date with -ldflags -X (the
// way goreleaser, the Dockerfile and make build do); `envoy-rls version`
// must print those stamps.
func TestVersionOfStampedBuild(t *testing.T) {
	const pkg = "github.com/envoy-rls/envoy-rls/internal/buildinfo"
	ldflags := "-X " + pkg + ".version=v9.9.9" +
		" -X " + pkg + ".revision=feedc0ffee" +
		" -X " + pkg + ".date=2026-12-01T12:00:00Z"
	bin := buildBinary(t, binarytest.LDFlags(ldflags))
	goVersion, err := exec.Command("go", "env", "GOVERSION").Output()
	if err != nil {
		t.Fatal(err)
	}

	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatalf("envoy-rls version: exit %d: %v", exitCode(err), err)
	}
	for _, want := range []string{
		"version:    v9.9.9\n",
		"revision:   feedc0ffee\n",
		"go version: " + strings.TrimSpace(string(goVersion)) + "\n",
		"build date: 2026-12-01T12:00:00Z\n",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("envoy-rls version lacks %q:\n%s", want, out)
		}
	}

	out, err = exec.Command(bin, "version", "--output", "json").Output()
	if err != nil {
		t.Fatalf("envoy-rls version --output json: exit %d: %v", exitCode(err), err)
	}
	var v struct {
		Version   string `json:"version"`
		Revision  string `json:"revision"`
		BuildDate string `json:"build_date"`
	}
	if err := json.Unmarshal(out, &v); err != nil || v.Version != "v9.9.9" || v.Revision != "feedc0ffee" || v.BuildDate != "2026-12-01T12:00:00Z" {
		t.Fatalf("envoy-rls version --output json: %v\n%s", err, out)
	}
}

// A plain `go build` in a Git clone (no -ldflags stamps) reports what Go's
// VCS stamping recorded, as docs/releasing.md says: on an untagged commit
// the pseudo-version v0.0.0-<commit time>-<12 hex of the commit>, with
// +dirty and modified true once the work tree has changes. The module is
// copied into a new repository of one commit; -buildvcs=true only undoes a
// GOFLAGS that turns stamping off.
func TestVersionOfPlainBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	root, repo := binarytest.ModuleRoot(t), t.TempDir()
	files, err := exec.Command("git", "-C", root, "ls-files", "--cached", "--others", "--exclude-standard", "--", "go.mod", "go.sum", "cmd", "internal", "pkg").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	for _, f := range strings.Fields(string(files)) {
		b, err := os.ReadFile(filepath.Join(root, f))
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted in the work tree
		}
		if err == nil {
			err = os.MkdirAll(filepath.Dir(filepath.Join(repo, f)), 0o755)
		}
		if err == nil {
			err = os.WriteFile(filepath.Join(repo, f), b, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", repo, "-c", "user.name=test", "-c", "user.email=test@example.invalid"}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_DATE=2026-01-02T03:04:05Z", "GIT_COMMITTER_DATE=2026-01-02T03:04:05Z")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("init", "-q")
	git("add", ".")
	git("commit", "-q", "-m", "one commit")
	commit := git("rev-parse", "HEAD")

	version := func() (v struct {
		Version  string `json:"version"`
		Revision string `json:"revision"`
		Modified bool   `json:"modified"`
	}) {
		t.Helper()
		bin := filepath.Join(t.TempDir(), "envoy-rls")
		build := exec.Command("go", "build", "-buildvcs=true", "-o", bin, "./cmd/envoy-rls")
		build.Dir = repo
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, out)
		}
		out, err := exec.Command(bin, "version", "--output", "json").Output()
		if err == nil {
			err = json.Unmarshal(out, &v)
		}
		if err != nil {
			t.Fatalf("envoy-rls version: %v\n%s", err, out)
		}
		return v
	}
	pseudo := "v0.0.0-20260102030405-" + commit[:12]
	if v := version(); v.Version != pseudo || v.Revision != commit || v.Modified {
		t.Errorf("clean clone: %+v, want version %s, revision %s, not modified", v, pseudo, commit)
	}
	git("tag", "v1.2.3")
	if v := version(); v.Version != "v1.2.3" || v.Revision != commit {
		t.Errorf("tagged commit: %+v, want version v1.2.3", v)
	}
	git("tag", "-d", "v1.2.3")
	if err := os.WriteFile(filepath.Join(repo, "notes.txt"), []byte("a change\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if v := version(); v.Version != pseudo+"+dirty" || v.Revision != commit || !v.Modified {
		t.Errorf("work tree with a change: %+v, want version %s+dirty, modified", v, pseudo)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "releasing.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile("pseudo-version such as `v0\\.0\\.0-[0-9]{14}-[0-9a-f]{12}`, with `\\+dirty`").Match(doc) {
		t.Error("docs/releasing.md does not show the pseudo-version and +dirty a plain go build reports")
	}
}
