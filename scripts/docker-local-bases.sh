#!/usr/bin/env bash
# Local stand-ins for the images a deployment pulls from Docker Hub (python:3.11-slim, postgres, redis),
# made from Debian packages where Docker Hub is not reachable (docs/deploy.md, "Building without Docker
# Hub"). The same docker-compose.yml then runs with
#   BASE_IMAGE=local/python:3.11 POSTGRES_IMAGE=local/postgres:15 REDIS_IMAGE=local/redis:7
# Needs root (debootstrap) and a running dockerd. MIRROR defaults to the Debian mirror the host's apt uses.
set -euo pipefail
SUITE="${SUITE:-bookworm}"
MIRROR="${MIRROR:-$(grep -rhoE '^(URIs: *|deb +)https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null \
  | grep -oE 'https?://[^ ]+' | head -n1 || true)}"
MIRROR="${MIRROR:-http://deb.debian.org/debian}"
DEBIAN_TAG="local/debian:$SUITE"
have() { docker image inspect "$1" >/dev/null 2>&1; }

if ! have "$DEBIAN_TAG"; then
  command -v debootstrap >/dev/null || apt-get install -y debootstrap
  ROOT="$(mktemp -d)"
  trap 'rm -rf "$ROOT"' EXIT
  debootstrap --variant=minbase "$SUITE" "$ROOT" "$MIRROR"
  # The image's apt uses the same mirror; no package lists or caches are kept.
  echo "deb $MIRROR $SUITE main" > "$ROOT/etc/apt/sources.list"
  rm -rf "$ROOT"/var/lib/apt/lists/* "$ROOT"/var/cache/apt/*.bin "$ROOT"/var/cache/apt/archives/*.deb
  tar -C "$ROOT" -c . | docker import - "$DEBIAN_TAG" >/dev/null
  echo "made $DEBIAN_TAG from $MIRROR"
fi

build() {  # build TAG < Dockerfile (no context: everything comes from the Debian archive)
  local tag="$1"
  if have "$tag"; then echo "$tag exists"; return; fi
  docker build -q -t "$tag" - >/dev/null
  echo "made $tag"
}

# python:3.11-slim: Debian's python3 is 3.11 (with its C headers, as in the official image); a venv on PATH gives `python` and `pip` as in the official image.
build local/python:3.11 <<DOCKERFILE
FROM $DEBIAN_TAG
RUN apt-get update && apt-get install -y --no-install-recommends python3 python3-venv python3-dev ca-certificates \
 && rm -rf /var/lib/apt/lists/* && python3 -m venv /opt/python
ENV PATH=/opt/python/bin:\$PATH LANG=C.UTF-8
DOCKERFILE

# postgres: Debian's PostgreSQL 15, with the official image's POSTGRES_USER/PASSWORD/DB first-start contract.
build local/postgres:15 <<'DOCKERFILE'
FROM local/debian:bookworm
RUN apt-get update && apt-get install -y --no-install-recommends postgresql-15 && rm -rf /var/lib/apt/lists/*
ENV PATH=/usr/lib/postgresql/15/bin:$PATH PGDATA=/var/lib/postgresql/data
RUN mkdir -p /var/run/postgresql "$PGDATA" && chown -R postgres:postgres /var/run/postgresql /var/lib/postgresql \
 && printf '%s\n' '#!/bin/sh' 'set -e' \
   'if [ ! -s "$PGDATA/PG_VERSION" ]; then' \
   '  chown -R postgres:postgres "$PGDATA"' \
   '  echo "$POSTGRES_PASSWORD" > /tmp/pw && chown postgres /tmp/pw' \
   '  su postgres -c "initdb -E UTF8 --locale=C.UTF-8 -U ${POSTGRES_USER:-postgres} --pwfile=/tmp/pw --auth-host=scram-sha-256 --auth-local=trust -D $PGDATA" >/dev/null' \
   '  rm /tmp/pw' \
   '  echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"' \
   '  su postgres -c "pg_ctl -D $PGDATA -o \"-c listen_addresses=\" -w start" >/dev/null' \
   '  [ "${POSTGRES_DB:-postgres}" = postgres ] || su postgres -c "createdb -U ${POSTGRES_USER:-postgres} ${POSTGRES_DB}"' \
   '  su postgres -c "pg_ctl -D $PGDATA -m fast -w stop" >/dev/null' \
   'fi' \
   'exec su postgres -c "exec postgres -D $PGDATA -c listen_addresses=*"' > /usr/local/bin/entrypoint \
 && chmod +x /usr/local/bin/entrypoint
EXPOSE 5432
CMD ["/usr/local/bin/entrypoint"]
DOCKERFILE

# redis: Debian's redis-server 7, in /data, reachable from the compose network (as the official image).
build local/redis:7 <<'DOCKERFILE'
FROM local/debian:bookworm
RUN apt-get update && apt-get install -y --no-install-recommends redis-server && rm -rf /var/lib/apt/lists/* \
 && mkdir /data && printf '%s\n' '#!/bin/sh' \
   'if [ "$1" = redis-server ]; then shift; exec redis-server --protected-mode no --dir /data "$@"; fi' \
   'exec "$@"' > /usr/local/bin/entrypoint && chmod +x /usr/local/bin/entrypoint
WORKDIR /data
EXPOSE 6379
ENTRYPOINT ["/usr/local/bin/entrypoint"]
CMD ["redis-server"]
DOCKERFILE
