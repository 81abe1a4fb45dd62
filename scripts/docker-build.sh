#!/usr/bin/env bash
# Builds the CPU image rollout-studio:latest with BuildKit (the Dockerfile mounts wheelhouse/ and the
# `pip_cert` secret for its install step). Where the PyTorch CPU index is not reachable, the CPU torch
# wheel is taken from this machine's pip find-links folder (or WHEELS=folder) into wheelhouse/, and the
# CA bundle pip trusts here (its `cert`, or PIP_CERT=file) is passed as a build secret, never kept.
#   BASE_IMAGE=local/python:3.11 scripts/docker-build.sh     (after scripts/docker-local-bases.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
TAG="${TAG:-rollout-studio:latest}"
PIP="$(command -v pip3 || command -v pip || true)"
pipconf() { [ -n "$PIP" ] && "$PIP" config get "$1" 2>/dev/null | head -n1 || true; }
WHEELS="${WHEELS:-$(pipconf global.find-links)}"
PIP_CERT="${PIP_CERT:-$(pipconf global.cert)}"
args=(--build-arg "BASE_IMAGE=${BASE_IMAGE:-python:3.11-slim}")
torch="$(ls "${WHEELS:-/nonexistent}"/torch-2.13.0+cpu-*.whl 2>/dev/null | head -n1 || true)"
if [ -n "$torch" ]; then
  cp -u "$torch" wheelhouse/
  args+=(--build-arg TORCH_INDEX=)   # the wheelhouse alone: the CPU index is not asked
fi
[ -n "$PIP_CERT" ] && [ -f "$PIP_CERT" ] && args+=(--secret "id=pip_cert,src=$PIP_CERT")
# A client that builds with BuildKit: `docker` with the buildx plugin, or a 20.10 client (built in).
DOCKER="${DOCKER:-}"
if [ -z "$DOCKER" ]; then
  for client in docker /usr/bin/docker; do
    if DOCKER_BUILDKIT=1 "$client" build --help 2>/dev/null | grep -q -- --secret; then DOCKER="$client"; break; fi
  done
fi
[ -n "$DOCKER" ] || { echo "no docker client with BuildKit (install the buildx plugin)" >&2; exit 1; }
start=$(date +%s)
DOCKER_BUILDKIT=1 "$DOCKER" build --progress=plain "${args[@]}" -t "$TAG" . 
echo "built $TAG in $(( $(date +%s) - start )) s"
