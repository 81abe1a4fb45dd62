"""Typed readers for environment variables that fail loudly on bad values."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlparse

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str) -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise RuntimeError(f"{name} must be one of true/false/1/0/yes/no (got {raw!r})")


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise RuntimeError(f"{name} must be an integer (got {raw!r})") from None


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def redis_database(url: str) -> int:
    """The database number a Redis URL names, as redis-py reads it: `redis://host:6379/3` → 3,
    `unix:///path.sock?db=3` → 3, none → 0."""
    parsed = urlparse(url)
    query = dict(parse_qsl(parsed.query))
    raw = query.get("db") or (parsed.path.lstrip("/") if parsed.scheme in ("redis", "rediss") else "")
    try:
        return int(raw or 0)
    except ValueError:
        raise RuntimeError(f"REDIS_URL names no database number: {url!r}") from None


def database_from_url(url: str, *, sqlite_path: Path) -> dict[str, Any]:
    """Django DATABASES entry for a postgres:// or sqlite:/// URL; SQLite at `sqlite_path` if empty."""
    if not url:
        return _sqlite(sqlite_path)
    parsed = urlparse(url)
    if parsed.scheme in ("postgres", "postgresql", "postgresql+psycopg"):
        if not parsed.path.strip("/"):
            raise RuntimeError(f"DATABASE_URL names no database: {url!r}")
        options: dict[str, Any] = dict(parse_qsl(parsed.query))
        # ?pool=true: psycopg's connection pool (needs psycopg[pool]). Under ASGI (daphne, uvicorn) every
        # request runs in a fresh thread context, so persistent connections are never reused — each
        # request would connect anew; a pool keeps them. Django requires CONN_MAX_AGE=0 with a pool.
        if str(options.get("pool", "")).lower() in ("1", "true", "yes", "on"):
            options["pool"] = True
            options["conn_max_age"] = 0
        else:
            options.pop("pool", None)
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": unquote(parsed.path.lstrip("/")),
            "USER": unquote(parsed.username or ""),
            "PASSWORD": unquote(parsed.password or ""),
            "HOST": parsed.hostname or "",
            "PORT": str(parsed.port or ""),
            "CONN_MAX_AGE": int(options.pop("conn_max_age", 60)),
            "CONN_HEALTH_CHECKS": True,
            "TEST": {"NAME": f"test_{unquote(parsed.path.lstrip('/'))}_{os.getpid()}"},
            "OPTIONS": options,
        }
    if parsed.scheme == "sqlite":
        # sqlite:///abs/path.db and sqlite:////abs/path.db both name /abs/path.db (POSIX would keep
        # a leading "//" as written, which names the same file under a different string).
        file = parsed.path.lstrip("/")
        if not file:
            raise RuntimeError(f"DATABASE_URL names no database file: {url!r}")
        return _sqlite(Path("/" + file))
    raise RuntimeError(f"DATABASE_URL must be postgres://… or sqlite:///… (got scheme {parsed.scheme!r})")


def _sqlite(path: Path) -> dict[str, Any]:
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(path),
        # WAL lets the web server read while the worker writes; IMMEDIATE avoids lock upgrades
        # failing with "database is locked" under concurrent writers.
        # A file, not memory, for the test database too: browser and worker tests share it with
        # the server and worker processes they start.
        # Named per process so concurrent test runs on one machine never share a database.
        "TEST": {"NAME": str(path.with_name(f"test_{path.stem}_{os.getpid()}.sqlite3"))},
        "OPTIONS": {
            "timeout": 30,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        },
    }


# Keys that have been published (in our compose file's history, Dockerfiles, tutorials): a deployment
# using one signs its sessions and run tokens with a key anyone can read.
PUBLIC_SECRET_KEYS = frozenset(
    {"change-me-in-production", "changeme", "change-me", "build-only", "secret", "secret-key", "insecure"}
)
MIN_SECRET_KEY_CHARS = 50


def secret_key_problem(key: str) -> str | None:
    """Why `key` is not fit to sign a deployment's sessions and tokens (None when it is). The rules of
    Django's check --deploy (security.W009), plus known public keys: refused at start-up, not just warned of."""
    if key.strip().lower() in PUBLIC_SECRET_KEYS or "change-me" in key.lower() or "changeme" in key.lower():
        return "is a published placeholder"
    if key.startswith("django-insecure-"):
        return "is one of Django's generated development keys (django-insecure-…)"
    if len(key) < MIN_SECRET_KEY_CHARS:
        return f"is too short ({len(key)} characters; at least {MIN_SECRET_KEY_CHARS})"
    if len(set(key)) < 5:
        return "has fewer than 5 different characters"
    return None


def make_private_dir(path: Path) -> None:
    """Create `path` readable by its owner only (0700), and tighten it if it already exists."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        path.chmod(0o700)
    except PermissionError:  # not ours (a mounted volume): its owner decides
        pass


def make_private_files(*paths: Path) -> None:
    """0600 for those of `paths` that exist (SQLite's database, -wal and -shm files)."""
    for path in paths:
        try:
            path.chmod(0o600)
        except (FileNotFoundError, PermissionError):
            pass
