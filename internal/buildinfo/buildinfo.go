// Package buildinfo says which build of envoy-rls is running: the version,
// commit and build date that a release build stamps with -ldflags -X, or else
// what the Go toolchain recorded in the binary (runtime/debug.ReadBuildInfo).
package buildinfo

import (
	"runtime"
	"runtime/debug"
)

// Stamped by release builds (goreleaser, the Dockerfile, make build):
//
//	-X github.com/envoy-rls/envoy-rls/internal/buildinfo.version=v1.2.3
//	-X github.com/envoy-rls/envoy-rls/internal/buildinfo.revision=<commit>
//	-X github.com/envoy-rls/envoy-rls/internal/buildinfo.date=<RFC 3339>
//
// They are set by the linker and never written at run time.
var (
	version  string
	revision string
	date     string
)

// Info describes one build. Every field is a short, bounded string, safe as a
// metric label.
type Info struct {
	// Version is the release (v1.2.3), else the module version the Go
	// toolchain recorded, else "devel".
	Version string
	// Revision is the VCS commit, "unknown" when the build recorded none.
	Revision string
	// GoVersion is the Go toolchain that built the binary (go1.26.8).
	GoVersion string
	// Date is when the binary was built (release builds) or the commit's
	// time (vcs.time); "unknown" when neither is known.
	Date string
	// Modified reports a build from a work tree with uncommitted changes.
	Modified bool
}

// Get returns the running binary's Info.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return from(bi, version, revision, date)
}

// from combines the linker stamps with the toolchain's build info (nil when
// the binary has none); a stamp wins over what the toolchain recorded.
func from(bi *debug.BuildInfo, version, revision, date string) Info {
	in := Info{Version: version, Revision: revision, Date: date, GoVersion: runtime.Version()}
	if bi != nil {
		if bi.GoVersion != "" {
			in.GoVersion = bi.GoVersion
		}
		if in.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			in.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if in.Revision == "" {
					in.Revision = s.Value
				}
			case "vcs.time":
				if in.Date == "" {
					in.Date = s.Value
				}
			case "vcs.modified":
				in.Modified = s.Value == "true"
			}
		}
	}
	if in.Version == "" {
		in.Version = "devel"
	}
	if in.Revision == "" {
		in.Revision = "unknown"
	}
	if in.Date == "" {
		in.Date = "unknown"
	}
	return in
}
