#!/usr/bin/env bash
# Installs what the test suite needs when it is missing: redis-server and
# redis-cli (Debian's redis-server package, Redis 7.0 on bookworm), curl and
# jq (the docs' recipes, run by their tests), and Debian's chromium, the
# headless browser of the console's test. The tests
# start their own redis-server processes on free loopback ports and their own
# browser.
set -euo pipefail
missing=()
if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
  missing+=(redis-server redis-tools)
fi
for tool in curl jq; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
  missing+=(chromium)
fi
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "${missing[*]} missing and this user cannot install them: run 'apt-get install -y ${missing[*]}' as root" >&2
    exit 1
  fi
fi
echo "installing ${missing[*]} (apt-get)..." >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
# Debian starts a system redis on :6379; the tests do not use it.
command -v redis-server >/dev/null
command -v jq >/dev/null
command -v chromium >/dev/null || command -v chromium-browser >/dev/null
