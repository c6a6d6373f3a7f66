package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/buildinfo"
)

var release = buildinfo.Info{
	Version: "v1.2.3", Revision: "0123456789abcdef", GoVersion: "go1.26.8",
	Date: "2026-12-01T10:00:00Z", Modified: true,
}

func TestVersionOutput(t *testing.T) {
	const text = "version:    v1.2.3\n" +
		"revision:   0123456789abcdef\n" +
		"go version: go1.26.8\n" +
		"build date: 2026-12-01T10:00:00Z\n" +
		"modified:   true\n"
	const js = `{"version":"v1.2.3","revision":"0123456789abcdef","go_version":"go1.26.8","build_date":"2026-12-01T10:00:00Z","modified":true}` + "\n"
	tests := []struct {
		args    []string
		want    string
		wantErr string
	}{
		{args: nil, want: text},
		{args: []string{"--output", "text"}, want: text},
		{args: []string{"--output", "json"}, want: js},
		{args: []string{"--output=json"}, want: js},
		{args: []string{"--help"}, want: versionUsage},
		{args: []string{"--output", "yaml"}, wantErr: `--output="yaml": must be text or json`},
		{args: []string{"extra"}, wantErr: "version takes no arguments"},
		{args: []string{"--nope"}, wantErr: "--nope"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var stdout bytes.Buffer
			err := writeVersion(tt.args, release, &stdout)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want one containing %q", err, tt.wantErr)
				}
				if stdout.Len() != 0 {
					t.Fatalf("stdout on error: %q", stdout.String())
				}
				return
			}
			if err != nil {
				t.Fatalf("err %v", err)
			}
			if stdout.String() != tt.want {
				t.Fatalf("stdout\n%s\nwant\n%s", stdout.String(), tt.want)
			}
		})
	}
}

// The command reports what buildinfo.Get says about the running binary (the
// test binary carries no stamps; cmd/envoy-rls tests the stamped release
// build).
func TestVersionCommand(t *testing.T) {
	for _, args := range [][]string{{"version", "--output", "json"}, {"--version", "--output=json"}} {
		var stdout bytes.Buffer
		if err := run(context.Background(), args, noEnv, &stdout, io.Discard, hooks{}); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		var got versionJSON
		if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, stdout.String())
		}
		in := buildinfo.Get()
		want := versionJSON{Version: in.Version, Revision: in.Revision, GoVersion: in.GoVersion, BuildDate: in.Date, Modified: in.Modified}
		if got != want || got.Version == "" || got.GoVersion == "" {
			t.Fatalf("%v: %+v, want %+v", args, got, want)
		}
	}
	var stdout bytes.Buffer
	if err := run(context.Background(), []string{"help"}, noEnv, &stdout, io.Discard, hooks{}); err != nil || !strings.Contains(stdout.String(), "envoy-rls version") {
		t.Fatalf("help does not list the version command (%v):\n%s", err, stdout.String())
	}
}

// A running server logs its build once at start and exports it on /metrics.
func TestServeAnnouncesBuild(t *testing.T) {
	rules := writeRules(t, t.TempDir(), testRules)
	r := startServe(t, []string{"--config", rules}, nil, hooks{})
	in := buildinfo.Get()

	code, metrics := r.get(t, "/metrics")
	line := fmt.Sprintf("envoy_rls_build_info{goversion=%q,revision=%q,version=%q} 1\n", in.GoVersion, in.Revision, in.Version)
	if code != 200 || !strings.Contains(metrics, line) {
		t.Fatalf("/metrics %d lacks %q:\n%s", code, line, metrics)
	}

	var builds []map[string]any
	for _, l := range strings.Split(r.logs.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "envoy-rls build" {
			builds = append(builds, m)
		}
	}
	if len(builds) != 1 {
		t.Fatalf("%d build lines in the log, want 1:\n%s", len(builds), r.logs)
	}
	b := builds[0]
	if b["level"] != "info" || b["version"] != in.Version || b["revision"] != in.Revision ||
		b["go_version"] != in.GoVersion || b["build_date"] != in.Date || b["modified"] != in.Modified {
		t.Fatalf("build line %v, want the fields of %+v", b, in)
	}
}
