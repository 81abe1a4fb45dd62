#!/usr/bin/env bash
# System tools some tests drive, from Debian's packages, installed when missing and we are allowed to:
# - chromium for the browser tests (Playwright launches it by path; its own browser download is never used);
# - a compose client to check docker-compose.yml with `config` when the docker client is here but its
#   compose plugin is not (Debian's docker-compose reads the same file; no engine is needed).
# Without root or apt the tests that need them skip, and this says how to get them.
set -euo pipefail
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium chromium-driver)
if command -v docker >/dev/null 2>&1 && ! docker compose version >/dev/null 2>&1 \
    && ! command -v docker-compose >/dev/null 2>&1; then
  missing+=(docker-compose)
fi
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing ${missing[*]} for the tests…"
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
else
  echo "note: ${missing[*]} not installed; the tests that need them will be skipped (sudo apt-get install ${missing[*]})" >&2
fi
