#!/usr/bin/env bash
# Writes the licence and notice texts of everything linked into the shipped
# binaries (envoy-rls, healthcheck): the Go standard library and every
# module, as resolved for linux without cgo. Release archives and images carry
# the result, since most of these licences (BSD, MIT, Apache-2.0 with NOTICE
# files) ask that binary distributions reproduce them.
#   scripts/third-party-notices.sh [OUT]   (default bin/THIRD_PARTY_NOTICES)
# Fails when a linked module has no licence file, so a new dependency cannot
# ship without one.
set -euo pipefail
cd "$(dirname "$0")/.."

out="${1:-bin/THIRD_PARTY_NOTICES}"
mkdir -p "$(dirname "$out")"
tmp="$(mktemp)"
trap 'rm -f "$tmp"' EXIT

section() { # name version dir
  local files
  files="$(find "$3" -maxdepth 1 -type f \( -iname 'LICENSE*' -o -iname 'LICENCE*' -o -iname 'COPYING*' -o -iname 'NOTICE*' \) | LC_ALL=C sort)"
  if [ -z "$files" ]; then
    echo "third-party-notices: no licence file in $1 $2 ($3)" >&2
    return 1
  fi
  printf '\n================================================================================\n%s %s\n' "$1" "$2"
  local f
  while IFS= read -r f; do
    printf -- '--- %s ---\n' "$(basename "$f")"
    cat "$f"
    printf '\n'
  done <<<"$files"
}

{
  echo "The envoy-rls binaries in this distribution are licensed under the Apache"
  echo "License 2.0 (LICENSE). They include the following third-party software,"
  echo "each listed with its version and its licence and notice files as published."
  section "Go standard library" "$(go env GOVERSION)" "$(go env GOROOT)"
  CGO_ENABLED=0 GOOS=linux go list -deps \
    -f '{{with .Module}}{{if not .Main}}{{.Path}}{{"\t"}}{{.Version}}{{"\t"}}{{.Dir}}{{end}}{{end}}' \
    ./cmd/envoy-rls ./deploy/healthcheck | LC_ALL=C sort -u |
    while IFS=$'\t' read -r path version dir; do
      section "$path" "$version" "$dir"
    done
} >"$tmp"
chmod 0644 "$tmp"
mv "$tmp" "$out"
trap - EXIT
echo "$out" >&2
