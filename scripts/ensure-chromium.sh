#!/usr/bin/env bash
# The browser tests drive Debian's Chromium through Playwright (Playwright's own browser download
# is never used). Install it when missing and we are allowed to; otherwise say how.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then exit 0; fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing Debian's chromium for the browser tests…"
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
else
  echo "note: chromium is not installed; the browser tests will be skipped (sudo apt-get install chromium)" >&2
fi
