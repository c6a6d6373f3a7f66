#!/usr/bin/env bash
# Makes helm-docs available for the chart README (`make chart-docs`
# regenerates it; deploy/helm's TestChartReadmeCurrent, run by `make test`
# after `make deps` calls this script, fails when it is stale): does
# nothing when the pinned helm-docs is on PATH or in the Go bin directory,
# otherwise builds it with `go install` into $(go env GOBIN) (default
# $(go env GOPATH)/bin). Prints the path of the helm-docs it found or built.
#   HELM_DOCS_VERSION   the version to build (default below)
set -euo pipefail

HELM_DOCS_VERSION="${HELM_DOCS_VERSION:-v1.14.2}"

gobin="$(go env GOBIN)"
if [ -z "$gobin" ]; then
  gobin="$(go env GOPATH)/bin"
fi

# The generated README depends on the helm-docs version (its table layout),
# so only the pinned version counts as found.
is_pinned() {
  [ -x "$1" ] && "$1" --version 2>/dev/null | grep -qF "${HELM_DOCS_VERSION#v}"
}

if onpath="$(command -v helm-docs 2>/dev/null)" && is_pinned "$onpath"; then
  echo "$onpath"
  exit 0
fi
if is_pinned "$gobin/helm-docs"; then
  echo "$gobin/helm-docs"
  exit 0
fi

echo "helm-docs ${HELM_DOCS_VERSION} not found: building it with go install into ${gobin} (once; cached afterwards)..." >&2
start=$(date +%s)
# -ldflags sets the version `helm-docs --version` prints (go install leaves
# it empty).
CGO_ENABLED=0 GOBIN="$gobin" GOFLAGS="${GOFLAGS:-} -buildvcs=false" \
  go install -trimpath \
  -ldflags "-s -w -X main.version=${HELM_DOCS_VERSION#v}" \
  "github.com/norwoodj/helm-docs/cmd/helm-docs@${HELM_DOCS_VERSION}"
echo "built helm-docs ${HELM_DOCS_VERSION} in $(( $(date +%s) - start ))s: $gobin/helm-docs" >&2
is_pinned "$gobin/helm-docs"
echo "$gobin/helm-docs"
