"""A bench's own Postgres database: made before it runs and dropped after, on the server DATABASE_URL
names (the benches that measure Postgres — year, explorer, ingest, deletion, the soak's stack — had each
copied these lines). Each connects to the server's `postgres` database to create or drop the other."""

from __future__ import annotations

import sys
from urllib.parse import urlparse


def require_postgres(url: str, bench: str) -> None:
    """Stop the bench with a plain message unless `url` names a Postgres database."""
    if urlparse(url).scheme not in ("postgres", "postgresql"):
        raise SystemExit(f"{bench} measures Postgres: set DATABASE_URL=postgres://…")


def admin_url(url: str) -> str:
    """The same server's `postgres` database, as psycopg takes it (no Django-only query options)."""
    return urlparse(url)._replace(scheme="postgresql", path="/postgres", query="").geturl()


def database_name(url: str) -> str:
    return urlparse(url).path.lstrip("/")


def create_database(url: str, *, fresh: bool) -> None:
    """Create the database `url` names where it is missing; `fresh`: drop it first (what a run left)."""
    import psycopg

    name = database_name(url)
    with psycopg.connect(admin_url(url), autocommit=True) as conn:
        if fresh:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone() is None:
            conn.execute(f'CREATE DATABASE "{name}"')


def ensure_database(url: str) -> None:
    """Create the database `url` names where it is missing, if `url` names Postgres (a bench that also
    measures the embedded SQLite default passes its URL through unchanged)."""
    if urlparse(url).scheme in ("postgres", "postgresql"):
        create_database(url, fresh=False)


def drop_database(url: str) -> None:
    """Drop the database `url` names, after closing this process's Django connections where Django is
    set up (FORCE ends every other session on it)."""
    import psycopg

    if "django.db" in sys.modules:
        from django.conf import settings

        if settings.configured:
            from django.db import connections

            connections.close_all()
    with psycopg.connect(admin_url(url), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{database_name(url)}" WITH (FORCE)')
