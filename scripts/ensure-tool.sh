#!/usr/bin/env bash
# Makes a pinned release tool available for `make release-check`: does
# nothing when the pinned version is on PATH (a CI runner may install the
# released binary) or in $(go env GOBIN) (default $(go env GOPATH)/bin),
# otherwise builds it with `go install` from the Go module proxy. The first build takes minutes on a cold module cache (goreleaser is
# large); later runs return at once. Prints the tool's path on stdout.
#   scripts/ensure-tool.sh goreleaser|actionlint
#   GORELEASER_VERSION, ACTIONLINT_VERSION   override the pins below
set -euo pipefail

GORELEASER_VERSION="${GORELEASER_VERSION:-v2.15.1}"
ACTIONLINT_VERSION="${ACTIONLINT_VERSION:-v1.7.12}"

case "${1:-}" in
goreleaser)
  version="$GORELEASER_VERSION"
  pkg="github.com/goreleaser/goreleaser/v2"
  version_args=(--version)
  ;;
actionlint)
  version="$ACTIONLINT_VERSION"
  pkg="github.com/rhysd/actionlint/cmd/actionlint"
  version_args=(-version)
  ;;
*)
  echo "usage: $0 goreleaser|actionlint" >&2
  exit 2
  ;;
esac
tool="$1"

gobin="$(go env GOBIN)"
if [ -z "$gobin" ]; then
  gobin="$(go env GOPATH)/bin"
fi

# Built by go install, both tools report the module version (v1.2.3);
# released binaries may print it without the v.
v="${version#v}"
pattern="(^|[^0-9.])v?${v//./\\.}([^0-9.]|\$)"
is_pinned() {
  [ -x "$1" ] && "$1" "${version_args[@]}" 2>/dev/null | grep -qE "$pattern"
}

for candidate in "$(command -v "$tool" 2>/dev/null || true)" "$gobin/$tool"; do
  if [ -n "$candidate" ] && is_pinned "$candidate"; then
    echo "$candidate"
    exit 0
  fi
done

echo "$tool $version not found in $gobin: building $pkg@$version with go install (once; cached afterwards)..." >&2
start=$(date +%s)
CGO_ENABLED=0 GOBIN="$gobin" GOFLAGS="${GOFLAGS:-} -buildvcs=false" \
  go install -trimpath "$pkg@$version"
echo "built $tool $version in $(($(date +%s) - start))s: $gobin/$tool" >&2
if ! is_pinned "$gobin/$tool"; then
  echo "$gobin/$tool does not report version $version" >&2
  exit 1
fi
echo "$gobin/$tool"
