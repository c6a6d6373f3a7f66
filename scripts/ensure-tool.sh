#!/usr/bin/env bash
# Makes one pinned developer tool available and prints its path on stdout:
#   scripts/ensure-tool.sh helm|helm-docs|goreleaser|actionlint
#   scripts/ensure-tool.sh --find TOOL   print the path only if it is already
#                                        there (exit 1 otherwise; the tests use this)
# A tool counts as found when the pinned version is on PATH or in
# $(go env GOBIN) (default $(go env GOPATH)/bin); otherwise it is built with
# `go install` from the Go module proxy into that directory, once. helm is the
# exception: any helm v3 on PATH will do (the chart uses nothing newer than
# v3 templates). Cold builds take from half a minute (actionlint, helm-docs)
# to several minutes (helm) and up to twenty on a loaded 2-core machine
# (goreleaser); later runs return at once.
#   HELM_VERSION, HELM_DOCS_VERSION, GORELEASER_VERSION, ACTIONLINT_VERSION
#   override the pins below.
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-v3.22.0}"
# The chart README's table layout depends on the helm-docs version.
HELM_DOCS_VERSION="${HELM_DOCS_VERSION:-v1.14.2}"
GORELEASER_VERSION="${GORELEASER_VERSION:-v2.15.1}"
ACTIONLINT_VERSION="${ACTIONLINT_VERSION:-v1.7.12}"

find_only=false
if [ "${1:-}" = "--find" ]; then
  find_only=true
  shift
fi

# Per tool: the version, the package, how it prints its version, and the
# -X that stamps that version (go install leaves it empty for some).
ldflags=""
case "${1:-}" in
helm)
  version="$HELM_VERSION" pkg="helm.sh/helm/v3/cmd/helm" version_args=(version --short)
  ldflags="-X helm.sh/helm/v3/internal/version.version=${version}"
  ;;
helm-docs)
  version="$HELM_DOCS_VERSION" pkg="github.com/norwoodj/helm-docs/cmd/helm-docs" version_args=(--version)
  ldflags="-X main.version=${version#v}"
  ;;
goreleaser)
  version="$GORELEASER_VERSION" pkg="github.com/goreleaser/goreleaser/v2" version_args=(--version)
  ;;
actionlint)
  version="$ACTIONLINT_VERSION" pkg="github.com/rhysd/actionlint/cmd/actionlint" version_args=(-version)
  ;;
*)
  echo "usage: $0 [--find] helm|helm-docs|goreleaser|actionlint" >&2
  exit 2
  ;;
esac
tool="$1"

gobin="$(go env GOBIN)"
if [ -z "$gobin" ]; then
  gobin="$(go env GOPATH)/bin"
fi

# Built by go install, tools report the module version (v1.2.3); released
# binaries may print it without the v.
v="${version#v}"
pattern="(^|[^0-9.])v?${v//./\\.}([^0-9.]|\$)"
[ "$tool" = helm ] && pattern='^v3\.'
is_pinned() {
  [ -x "$1" ] && "$1" "${version_args[@]}" 2>/dev/null | grep -qE "$pattern"
}

for candidate in "$(command -v "$tool" 2>/dev/null || true)" "$gobin/$tool"; do
  if [ -n "$candidate" ] && is_pinned "$candidate"; then
    echo "$candidate"
    exit 0
  fi
done
if $find_only; then
  echo "$tool $version not found on PATH or in $gobin: run scripts/ensure-tool.sh $tool (make deps)" >&2
  exit 1
fi

echo "$tool $version not found: building $pkg@$version with go install into $gobin (once; cached afterwards)..." >&2
start=$(date +%s)
CGO_ENABLED=0 GOBIN="$gobin" GOFLAGS="${GOFLAGS:-} -buildvcs=false" \
  go install -trimpath -ldflags "-s -w $ldflags" "$pkg@$version"
echo "built $tool $version in $(($(date +%s) - start))s: $gobin/$tool" >&2
if ! is_pinned "$gobin/$tool"; then
  echo "$gobin/$tool does not report version $version" >&2
  exit 1
fi
echo "$gobin/$tool"
