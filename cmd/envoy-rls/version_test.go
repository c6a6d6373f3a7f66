package main

import (
	"encoding/json"
	"os/exec"
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
