#!/usr/bin/env bash
# tools/scripts/ensure-reference.sh — builds the reference service
# (github.com/envoyproxy/ratelimit, the one envoy-rls competes with) into
# bin/ratelimit-reference with `go install` from the Go module proxy, once,
# and prints its path. Only the comparison runs of tools/scripts/bench.sh use it
# (--target reference); no test needs it. Nothing of its source is kept in
# this repository.
set -euo pipefail
cd "$(dirname "$0")/../.."
# The version measured in docs/performance.md.
VERSION=${REFERENCE_VERSION:-v1.4.1-0.20260122083618-3fb702589d36}
OUT=bin/ratelimit-reference
if [ ! -x "$OUT" ] || [ "$(cat "$OUT.version" 2>/dev/null)" != "$VERSION" ]; then
  mkdir -p bin
  TMP=$(mktemp -d)
  trap 'rm -rf "$TMP"' EXIT
  echo "ensure-reference.sh: go install github.com/envoyproxy/ratelimit/src/service_cmd@$VERSION" >&2
  GOBIN="$TMP" GOFLAGS=-mod=mod ${GO:-go} install "github.com/envoyproxy/ratelimit/src/service_cmd@$VERSION"
  mv "$TMP/service_cmd" "$OUT"
  echo "$VERSION" >"$OUT.version"
fi
echo "$OUT"
