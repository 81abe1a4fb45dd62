"""The suite's parallel workers keep apart (tests/parallel.py): each xdist worker its own var dir and
Redis database, so one worker's Celery worker never takes the other's runs."""

from __future__ import annotations

import os

from tests.parallel import isolate_worker, worker_redis_url


def test_each_worker_gets_its_own_redis_database_and_the_first_keeps_the_urls():
    assert worker_redis_url("redis://127.0.0.1:6379/15", 0) == "redis://127.0.0.1:6379/15"
    assert worker_redis_url("redis://127.0.0.1:6379/15", 1) == "redis://127.0.0.1:6379/14"
    assert worker_redis_url("redis://:pw@redis:6379", 1) == "redis://:pw@redis:6379/15"  # db 0, wrapped
    assert worker_redis_url("rediss://cache:6380/3?ssl_cert_reqs=none", 2) == (
        "rediss://cache:6380/1?ssl_cert_reqs=none"
    )
    assert worker_redis_url("unix:///srv/var/redis.sock", 1) == "unix:///srv/var/redis.sock"


def test_a_worker_keeps_its_state_under_its_own_var_dir():
    environ = {
        "PYTEST_XDIST_WORKER": "gw1",
        "ROLLOUT_STUDIO_VAR": "var/test",
        "REDIS_URL": "redis://h:6379/15",
    }
    isolate_worker(environ)
    assert environ["ROLLOUT_STUDIO_VAR"] == os.path.join("var/test", "gw1")
    assert environ["REDIS_URL"] == "redis://h:6379/14"


def test_without_xdist_nothing_changes():
    environ = {"ROLLOUT_STUDIO_VAR": "var/test", "REDIS_URL": "redis://h:6379/15"}
    isolate_worker(environ)
    assert environ == {"ROLLOUT_STUDIO_VAR": "var/test", "REDIS_URL": "redis://h:6379/15"}


def test_this_session_runs_where_its_worker_says(settings):
    """The settings this process read already name the worker's own directory."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        assert settings.VAR_DIR.name == worker
