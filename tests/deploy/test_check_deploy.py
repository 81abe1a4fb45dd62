"""`manage.py check --deploy` is clean with production settings, and bad settings fail loudly."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def manage(*args: str, **env: str) -> subprocess.CompletedProcess:
    # The browser tests' conftest sets DJANGO_ALLOW_ASYNC_UNSAFE for this process; a deployment never has it.
    full_env = {k: v for k, v in os.environ.items() if k != "DJANGO_ALLOW_ASYNC_UNSAFE"} | env
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=full_env, capture_output=True, text=True)


def test_check_deploy_is_clean_with_production_settings():
    result = manage("check", "--deploy", "--fail-level", "WARNING", PRODUCTION="true",
                    SECRET_KEY="x" * 20 + "-a-long-random-production-secret-key-value", ALLOWED_HOSTS="studio.example.com")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_production_without_a_secret_key_refuses_to_start():
    env = {k: v for k, v in os.environ.items() if k != "SECRET_KEY"}
    result = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, capture_output=True, text=True,
                            env={**env, "PRODUCTION": "true"})
    assert result.returncode != 0
    assert "SECRET_KEY must be set" in result.stderr


def test_a_malformed_database_url_names_the_variable():
    result = manage("check", DATABASE_URL="mysql://somewhere/db")
    assert result.returncode != 0
    assert "DATABASE_URL must be postgres://" in result.stderr
