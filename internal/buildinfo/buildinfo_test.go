package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestFrom(t *testing.T) {
	vcs := &debug.BuildInfo{
		GoVersion: "go1.26.8",
		Main:      debug.Module{Path: "github.com/envoy-rls/envoy-rls", Version: "(devel)"},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "abc123"},
			{Key: "vcs.time", Value: "2026-11-30T01:02:03Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	tests := []struct {
		name                    string
		bi                      *debug.BuildInfo
		version, revision, date string
		want                    Info
	}{
		{
			name: "stamps win",
			bi:   vcs, version: "v1.2.3", revision: "def456", date: "2026-12-01T00:00:00Z",
			want: Info{Version: "v1.2.3", Revision: "def456", GoVersion: "go1.26.8", Date: "2026-12-01T00:00:00Z", Modified: true},
		},
		{
			name: "toolchain's vcs settings",
			bi:   vcs,
			want: Info{Version: "devel", Revision: "abc123", GoVersion: "go1.26.8", Date: "2026-11-30T01:02:03Z", Modified: true},
		},
		{
			name: "go install of a tagged module",
			bi:   &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.4.0"}},
			want: Info{Version: "v0.4.0", Revision: "unknown", GoVersion: "go1.26.8", Date: "unknown"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := from(tt.bi, tt.version, tt.revision, tt.date)
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
	if got := from(nil, "", "", ""); got.Version != "devel" || got.Revision != "unknown" || got.GoVersion == "" {
		t.Errorf("no build info: got %+v", got)
	}
}
