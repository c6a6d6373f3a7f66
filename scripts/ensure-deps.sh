#!/usr/bin/env bash
# Installs what the test suite needs when it is missing: redis-server and
# redis-cli (Debian's redis-server package, Redis 7.0 on bookworm). The tests
# start their own redis-server processes on free loopback ports.
set -euo pipefail
if command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "redis-server is missing and this user cannot install it: run 'apt-get install -y redis-server' as root" >&2
    exit 1
  fi
fi
echo "installing redis-server (apt-get)..." >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq redis-server redis-tools >/dev/null
# Debian starts a system redis on :6379; the tests do not use it.
command -v redis-server >/dev/null
