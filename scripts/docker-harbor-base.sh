#!/usr/bin/env bash
# A tiny local base image for the Harbor task tests (Docker Hub is not reachable here): bash and a few
# coreutils copied from this machine with the libraries they load, imported as local/harbor-base:1.
set -euo pipefail
TAG="${1:-local/harbor-base:1}"
if docker image inspect "$TAG" >/dev/null 2>&1; then echo "$TAG exists"; exit 0; fi
ROOT="$(mktemp -d)"
trap 'rm -rf "$ROOT"' EXIT
for tool in bash sh cat ls mkdir rm chmod sleep tail head grep mv cp env; do
  path="$(type -P "$tool")"
  for file in "$path" $(ldd "$path" 2>/dev/null | grep -o '/[^ ]*' || true); do
    mkdir -p "$ROOT$(dirname "$file")"
    cp -L "$file" "$ROOT$file"
  done
  mkdir -p "$ROOT/bin"
  [ -e "$ROOT/bin/$tool" ] || ln -s "$path" "$ROOT/bin/$tool"
done
mkdir -p "$ROOT/tmp" "$ROOT/app" "$ROOT/root"
tar -C "$ROOT" -c . | docker import - "$TAG" >/dev/null
echo "made $TAG"
