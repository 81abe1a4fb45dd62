"""`manage.py check --deploy` is clean with production settings, bad settings fail loudly (a weak or
published SECRET_KEY included), and the embedded default keeps its state private."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def manage(*args: str, **env: str) -> subprocess.CompletedProcess:
    # The browser tests' conftest sets DJANGO_ALLOW_ASYNC_UNSAFE for this process; a deployment never has it.
    full_env = {k: v for k, v in os.environ.items() if k != "DJANGO_ALLOW_ASYNC_UNSAFE"} | env
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=full_env, capture_output=True, text=True
    )


def test_check_deploy_is_clean_with_production_settings():
    result = manage(
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
        PRODUCTION="true",
        SECRET_KEY="x" * 20 + "-a-long-random-production-secret-key-value",
        ALLOWED_HOSTS="studio.example.com",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_production_without_a_secret_key_refuses_to_start():
    env = {k: v for k, v in os.environ.items() if k != "SECRET_KEY"}
    result = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**env, "PRODUCTION": "true"},
    )
    assert result.returncode != 0
    assert "SECRET_KEY must be set" in result.stderr


def test_a_malformed_database_url_names_the_variable():
    result = manage("check", DATABASE_URL="mysql://somewhere/db")
    assert result.returncode != 0
    assert "DATABASE_URL must be postgres://" in result.stderr


@pytest.mark.parametrize(
    "key, reason",
    [
        ("change-me-in-production", "published placeholder"),
        ("build-only", "published placeholder"),
        ("django-insecure-" + "a1b2c3d4e5" * 5, "development keys"),
        ("short-but-random-Xq9", "too short"),
        ("ab" * 40, "fewer than 5 different characters"),
    ],
)
def test_production_refuses_a_weak_or_published_secret_key(key, reason):
    result = manage("check", PRODUCTION="true", SECRET_KEY=key, ALLOWED_HOSTS="studio.example.com")
    assert result.returncode != 0
    assert "SECRET_KEY" in result.stderr and reason in result.stderr, result.stderr[-500:]


def test_outside_production_any_secret_key_is_accepted():
    assert manage("check", SECRET_KEY="dev", PRODUCTION="false").returncode == 0


def test_the_state_folder_and_the_sqlite_files_are_the_owners_only(tmp_path):
    """var/ holds the database, the secret key and the redis socket: 0700, and the SQLite files 0600
    (a folder made 0755 by an earlier version is tightened at start-up)."""
    var = tmp_path / "var"
    var.mkdir(mode=0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DJANGO_ALLOW_ASYNC_UNSAFE")}
    # The modes are read while the connection is open: SQLite removes its -wal and -shm files at the end.
    script = (
        "import django, json, os, stat; django.setup(); from django.db import connection; "
        "connection.cursor().execute('CREATE TABLE t (x int)'); "
        f"print(json.dumps({{n: stat.S_IMODE(os.stat(os.path.join({str(var)!r}, n)).st_mode) "
        f"for n in os.listdir({str(var)!r}) if os.path.isfile(os.path.join({str(var)!r}, n))}}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**env, "ROLLOUT_STUDIO_VAR": str(var), "DJANGO_SETTINGS_MODULE": "webapp.settings"},
    )
    assert result.returncode == 0, result.stderr
    assert stat.S_IMODE(var.stat().st_mode) == 0o700
    files = json.loads(result.stdout.strip().splitlines()[-1])
    assert {"db.sqlite3", "db.sqlite3-wal", "db.sqlite3-shm", "secret_key"} <= set(files), files
    assert {name: mode for name, mode in files.items() if mode != 0o600} == {}
