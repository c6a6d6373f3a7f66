#!/usr/bin/env bash
# Makes helm available for `make helm-check` and the chart test
# (deploy/helm/chart_test.go): does nothing when a helm v3 is already on PATH
# or in the Go bin directory, otherwise builds the pinned version with
# `go install` into $(go env GOBIN) (default $(go env GOPATH)/bin). The first
# build takes minutes on a cold module cache; later runs return at once.
# Prints the path of the helm it found or built on stdout.
#   HELM_VERSION   the version to build (default below)
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-v3.22.0}"

gobin="$(go env GOBIN)"
if [ -z "$gobin" ]; then
  gobin="$(go env GOPATH)/bin"
fi

is_helm3() {
  [ -x "$1" ] && "$1" version --short 2>/dev/null | grep -q '^v3\.'
}

# A helm v3 on PATH (a CI image may ship one) is good enough: the chart uses
# nothing newer than v3.x templates.
if onpath="$(command -v helm 2>/dev/null)" && is_helm3 "$onpath"; then
  echo "$onpath"
  exit 0
fi
if is_helm3 "$gobin/helm"; then
  echo "$gobin/helm"
  exit 0
fi

echo "helm not found: building helm.sh/helm/v3 ${HELM_VERSION} with go install into ${gobin} (once; cached afterwards)..." >&2
start=$(date +%s)
# -ldflags sets the version `helm version` prints (go install leaves it
# empty); CGO is not needed.
CGO_ENABLED=0 GOBIN="$gobin" GOFLAGS="${GOFLAGS:-} -buildvcs=false" \
  go install -trimpath \
  -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}" \
  "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}"
echo "built helm ${HELM_VERSION} in $(( $(date +%s) - start ))s: $gobin/helm" >&2
is_helm3 "$gobin/helm"
echo "$gobin/helm"
