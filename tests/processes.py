"""Start the real processes the product runs — an ASGI server, Celery workers — against the test
database, for browser and worker tests."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from urllib.parse import quote

import requests

ROOT = Path(__file__).resolve().parents[1]


def database_url_for_tests() -> str:
    from django.db import connection

    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    auth = quote(db["USER"] or "")
    if db.get("PASSWORD"):
        auth += ":" + quote(db["PASSWORD"])
    host = db["HOST"] or "127.0.0.1"
    return f"postgres://{auth}@{host}:{db['PORT'] or 5432}/{db['NAME']}"


def log_dir() -> Path:
    from django.conf import settings

    return Path(settings.VAR_DIR)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def child_env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "DATABASE_URL": database_url_for_tests(), "PYTHONUNBUFFERED": "1", **extra}
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    return env


@contextmanager
def asgi_server(**extra_env: str):
    """daphne serving webapp.asgi on a free port; yields its base URL. Its settings are the product's
    with the tests' fast password hasher (tests/server_settings.py)."""
    extra_env = {"DJANGO_SETTINGS_MODULE": "tests.server_settings", **extra_env}
    port = free_port()
    log = open(log_dir() / f"test-daphne-{port}.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "webapp.asgi:application"],
        cwd=ROOT,
        env=child_env(**extra_env),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"daphne exited early; see {log.name}")
            try:
                if requests.get(f"{url}/healthz", timeout=1).ok:
                    break
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"daphne did not answer within 60 s; see {log.name}")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@contextmanager
def celery_worker(queues: str = "cpu", *, name: str = "test", purge: bool = True, **extra_env: str):
    """A real Celery worker process (solo pool) consuming `queues`; yields the Popen.

    `purge` drops messages other tests left in the queues (runs of databases long gone), so start the
    worker before queueing the run under test."""
    log_path = log_dir() / f"test-worker-{name}.log"
    log = open(log_path, "w")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "workers",
            "worker",
            "-Q",
            queues,
            "--pool",
            "solo",
            "--loglevel",
            "INFO",
            "-n",
            f"{name}@%h",
            "--without-mingle",
            "--without-gossip",
            *(["--purge"] if purge else []),
        ],
        cwd=ROOT,
        env=child_env(**extra_env),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 90
        while "ready." not in log_path.read_text():
            if proc.poll() is not None:
                raise RuntimeError(f"the worker exited early:\n{log_path.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the worker did not start:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.2)
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
        log.close()


class Shared:
    """One expensive thing (a daphne server, Chromium) shared by consecutive tests that use it.

    The first test whose fixtures name `fixture` starts it; it stays for the tests after it that name
    the fixture too, and stops as soon as the next test does not (`release_unneeded`, called from the
    root conftest after each test's teardown) or when its session fixture ends — so nothing outlives
    the tests that need it, and a Postgres test database is never dropped while the server holds it.
    What a test changes in it must be undone by that test (its browser contexts are closed for it).
    """

    live: list[Shared] = []

    def __init__(self, fixture: str, start) -> None:
        self.fixture, self.start = fixture, start
        self.stack: ExitStack | None = None
        self.value = None

    def get(self):
        if self.stack is None:
            # One of a kind at a time: a module that imports the browser fixtures has its own fixture
            # definitions (and Shared), and two Playwright instances cannot share the test's thread.
            for other in list(Shared.live):
                if other.fixture == self.fixture:
                    other.close()
            stack = ExitStack()
            try:
                self.value = stack.enter_context(self.start())
            except BaseException:
                stack.close()
                raise
            self.stack = stack
            Shared.live.append(self)
        return self.value

    def close(self) -> None:
        stack, self.stack, self.value = self.stack, None, None
        if self in Shared.live:
            Shared.live.remove(self)
        if stack is not None:
            stack.close()


def release_unneeded(nextitem) -> None:
    """Stop each shared thing the next test (None at the end) does not use."""
    needed = set(getattr(nextitem, "fixturenames", ()))
    for shared in list(Shared.live):
        if shared.fixture not in needed:
            shared.close()
