// Package release has no code: its tests keep the release files
// (.goreleaser.yaml, release.Dockerfile, Dockerfile, Makefile, the release
// workflow) consistent with each other, with the Helm chart's image and with
// internal/buildinfo, so a release publishes what the chart and the docs name.
package release
