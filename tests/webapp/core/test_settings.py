"""Settings come from the environment through typed helpers that fail loudly on bad values, and a
DATABASE_URL (postgres:// or sqlite:///) decides the database."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from webapp.core.env import database_from_url, env_bool, env_int, env_list, env_str

ROOT = Path(__file__).resolve().parents[3]


# --- typed helpers ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("raw", ["1", "true", "True", "YES", "on", " true "])
def test_env_bool_true(raw, monkeypatch):
    monkeypatch.setenv("RS_FLAG", raw)
    assert env_bool("RS_FLAG", False) is True


@pytest.mark.parametrize("raw", ["0", "false", "No", "off", ""])
def test_env_bool_false(raw, monkeypatch):
    monkeypatch.setenv("RS_FLAG", raw)
    assert env_bool("RS_FLAG", True) is False


@pytest.mark.parametrize("raw", ["maybe", "2", "enabled", "tru"])
def test_env_bool_refuses_anything_else(raw, monkeypatch):
    monkeypatch.setenv("RS_FLAG", raw)
    with pytest.raises(RuntimeError, match=r"RS_FLAG must be one of true/false"):
        env_bool("RS_FLAG", False)


def test_env_helpers_use_the_default_when_unset(monkeypatch):
    for name in ("RS_FLAG", "RS_NUMBER", "RS_LIST", "RS_TEXT"):
        monkeypatch.delenv(name, raising=False)
    assert env_bool("RS_FLAG", True) is True
    assert env_int("RS_NUMBER", 7) == 7
    assert env_list("RS_LIST", ["a"]) == ["a"]
    assert env_str("RS_TEXT", "x") == "x"


def test_env_int(monkeypatch):
    monkeypatch.setenv("RS_NUMBER", "42")
    assert env_int("RS_NUMBER", 0) == 42
    monkeypatch.setenv("RS_NUMBER", "-3")
    assert env_int("RS_NUMBER", 0) == -3
    monkeypatch.setenv("RS_NUMBER", "  ")
    assert env_int("RS_NUMBER", 5) == 5  # blank counts as unset


@pytest.mark.parametrize("raw", ["ten", "1.5", "1e3", "0x10"])
def test_env_int_refuses_non_integers(raw, monkeypatch):
    monkeypatch.setenv("RS_NUMBER", raw)
    with pytest.raises(RuntimeError, match=r"RS_NUMBER must be an integer"):
        env_int("RS_NUMBER", 0)


def test_env_list_splits_on_commas_and_drops_blanks(monkeypatch):
    monkeypatch.setenv("RS_LIST", " a.example , b.example,,")
    assert env_list("RS_LIST", []) == ["a.example", "b.example"]
    monkeypatch.setenv("RS_LIST", "")
    assert env_list("RS_LIST", ["default"]) == []


# --- DATABASE_URL ----------------------------------------------------------------------------------------------


def test_postgres_url_is_parsed_into_a_django_database():
    db = database_from_url(
        "postgres://studio:p%40ss%2Fword@db.internal:6543/rollout_studio?sslmode=require&conn_max_age=0",
        sqlite_path=Path("/unused.sqlite3"),
    )
    assert db["ENGINE"] == "django.db.backends.postgresql"
    assert (db["NAME"], db["USER"], db["PASSWORD"], db["HOST"], db["PORT"]) == (
        "rollout_studio",
        "studio",
        "p@ss/word",
        "db.internal",
        "6543",
    )
    assert db["CONN_MAX_AGE"] == 0
    assert db["OPTIONS"] == {"sslmode": "require"}  # conn_max_age is ours, not a libpq option
    assert db["TEST"]["NAME"].startswith("test_rollout_studio")


@pytest.mark.parametrize("scheme", ["postgres", "postgresql"])
def test_postgres_url_defaults(scheme):
    db = database_from_url(f"{scheme}://postgres@127.0.0.1/rollout_studio", sqlite_path=Path("/unused"))
    assert (db["USER"], db["PASSWORD"], db["HOST"], db["PORT"]) == ("postgres", "", "127.0.0.1", "")
    assert db["CONN_MAX_AGE"] == 60 and db["CONN_HEALTH_CHECKS"] is True


def test_postgres_url_without_a_database_name_fails():
    with pytest.raises(RuntimeError, match="names no database"):
        database_from_url("postgres://postgres@127.0.0.1:5432/", sqlite_path=Path("/unused"))


@pytest.mark.parametrize("url", ["sqlite:///srv/studio/db.sqlite3", "sqlite:////srv/studio/db.sqlite3"])
def test_sqlite_url_names_an_absolute_file(url):
    db = database_from_url(url, sqlite_path=Path("/unused"))
    assert db["ENGINE"] == "django.db.backends.sqlite3"
    assert db["NAME"] == "/srv/studio/db.sqlite3"
    assert db["OPTIONS"]["transaction_mode"] == "IMMEDIATE"
    assert db["TEST"]["NAME"].startswith("/srv/studio/test_db")


@pytest.mark.parametrize("url", ["sqlite:///", "sqlite://"])
def test_sqlite_url_without_a_file_fails(url):
    with pytest.raises(RuntimeError, match="names no database file"):
        database_from_url(url, sqlite_path=Path("/unused"))


def test_no_url_means_the_embedded_sqlite_file(tmp_path):
    db = database_from_url("", sqlite_path=tmp_path / "db.sqlite3")
    assert (db["ENGINE"], db["NAME"]) == ("django.db.backends.sqlite3", str(tmp_path / "db.sqlite3"))
    assert "journal_mode=WAL" in db["OPTIONS"]["init_command"]


@pytest.mark.parametrize("url", ["mysql://root@localhost/db", "redis://localhost/0", "localhost:5432/db"])
def test_unsupported_database_urls_fail(url):
    with pytest.raises(RuntimeError, match="DATABASE_URL must be"):
        database_from_url(url, sqlite_path=Path("/unused"))


# --- the settings module as a whole ------------------------------------------------------------------------------

_SETTINGS_VARS = (
    "DATABASE_URL",
    "REDIS_URL",
    "DEBUG",
    "PRODUCTION",
    "SECRET_KEY",
    "ROLLOUT_STUDIO_VAR",
    "RUN_HEARTBEAT_TIMEOUT_S",
    "ALLOWED_HOSTS",
    "DJANGO_SETTINGS_MODULE",
)
_PRINT = (
    "import json, webapp.settings as s; print(json.dumps({'engine': s.DATABASES['default']['ENGINE'], "
    "'broker': s.CELERY_BROKER_URL, 'embedded': s.EMBEDDED, 'debug': s.DEBUG, 'hosts': s.ALLOWED_HOSTS}))"
)


def load_settings(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    """Import webapp.settings in a fresh interpreter with exactly these settings variables."""
    clean = {k: v for k, v in os.environ.items() if k not in _SETTINGS_VARS}
    clean.update({"ROLLOUT_STUDIO_VAR": str(tmp_path / "var"), **env})
    return subprocess.run(
        [sys.executable, "-c", _PRINT], cwd=ROOT, env=clean, capture_output=True, text=True, timeout=60
    )


def test_embedded_defaults(tmp_path):
    result = load_settings(tmp_path)
    assert result.returncode == 0, result.stderr
    loaded = json.loads(result.stdout)
    assert loaded["engine"] == "django.db.backends.sqlite3"
    assert loaded["embedded"] is True and loaded["broker"].startswith("redis+socket://")
    assert (tmp_path / "var" / "secret_key").exists()  # generated once, kept for the next start


def test_deployed_settings(tmp_path):
    result = load_settings(
        tmp_path,
        DATABASE_URL="postgres://u:p@db/rs",
        REDIS_URL="redis://cache:6379/0",
        DEBUG="yes",
        ALLOWED_HOSTS="studio.example,localhost",
    )
    assert result.returncode == 0, result.stderr
    loaded = json.loads(result.stdout)
    assert loaded == {
        "engine": "django.db.backends.postgresql",
        "broker": "redis://cache:6379/0",
        "embedded": False,
        "debug": True,
        "hosts": ["studio.example", "localhost"],
    }


@pytest.mark.parametrize(
    "env, message",
    [
        ({"DEBUG": "maybe"}, "DEBUG must be one of"),
        ({"RUN_HEARTBEAT_TIMEOUT_S": "a minute"}, "RUN_HEARTBEAT_TIMEOUT_S must be an integer"),
        ({"DATABASE_URL": "mysql://root@db/rs"}, "DATABASE_URL must be"),
        ({"DATABASE_URL": "postgres://db/"}, "names no database"),
        ({"REDIS_URL": "http://cache:6379"}, "REDIS_URL must start with"),
        ({"PRODUCTION": "true"}, "SECRET_KEY must be set"),
    ],
)
def test_bad_settings_stop_the_start(env, message, tmp_path):
    result = load_settings(tmp_path, **env)
    assert result.returncode != 0
    assert message in result.stderr


# --- the channel layer ------------------------------------------------------------------------------------


def channel_layer_config(tmp_path: Path, redis_url: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in _SETTINGS_VARS}
    env.update({"ROLLOUT_STUDIO_VAR": str(tmp_path / "var"), "REDIS_URL": redis_url})
    printed = subprocess.run(
        [sys.executable, "-c", "import json, webapp.settings as s; print(json.dumps(s.CHANNEL_LAYERS))"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(printed.stdout)["default"]


def test_deployments_on_two_databases_of_one_redis_hear_only_their_own_runs(tmp_path):
    """Redis pub/sub ignores the database number: without a prefix per database, a page of run 1 on one
    deployment (or test lane) got the run 1 events of another on the same server. Real Redis."""
    import asyncio

    import redis
    from channels_redis.pubsub import RedisPubSubChannelLayer

    try:
        redis.Redis(host="127.0.0.1", port=6379, socket_timeout=2).ping()
    except redis.ConnectionError:
        pytest.skip("no Redis on 127.0.0.1:6379")

    def layer(database: int) -> RedisPubSubChannelLayer:
        config = channel_layer_config(tmp_path, f"redis://127.0.0.1:6379/{database}")
        assert config["BACKEND"] == "channels_redis.pubsub.RedisPubSubChannelLayer"
        return RedisPubSubChannelLayer(**config["CONFIG"])

    async def scenario() -> tuple[dict, bool]:
        ours, theirs = layer(12), layer(14)
        try:
            page, other_page = await ours.new_channel(), await theirs.new_channel()
            await ours.group_add("run.1", page)
            await theirs.group_add("run.1", other_page)
            await theirs.group_send("run.1", {"type": "run.events", "events": [{"seq": 9000}]})
            await ours.group_send("run.1", {"type": "run.events", "events": [{"seq": 1}]})
            received = await asyncio.wait_for(ours.receive(page), timeout=5)
            try:
                await asyncio.wait_for(ours.receive(page), timeout=0.5)
                leaked = True
            except TimeoutError:
                leaked = False
            return received, leaked
        finally:
            await ours.flush()
            await theirs.flush()

    received, leaked = asyncio.run(scenario())
    assert received["events"] == [{"seq": 1}]
    assert not leaked


@pytest.mark.parametrize(
    "url, database",
    [
        ("redis://cache:6379/3", 3),
        ("redis://cache:6379", 0),
        ("unix:///run/redis.sock?db=5", 5),
        ("unix:///x.sock", 0),
    ],
)
def test_the_redis_database_a_url_names(url, database):
    from webapp.core.env import redis_database

    assert redis_database(url) == database
