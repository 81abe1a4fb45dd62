"""pytest plugin (loaded from pyproject's addopts: `-p tests.parallel`): the suite in parallel processes.

`make test` runs the suite in two pytest-xdist worker processes. Each test session starts its own
servers, Celery workers, Ray clusters and Chromium, and those must not meet another session's: a
Celery worker consuming the queue of a shared broker takes the other session's runs. So before
Django reads its settings (a plugin is imported before any conftest, and pytest-django loads the
settings before the first conftest), each xdist worker gets

- its own state directory, `<ROLLOUT_STUDIO_VAR>/<worker id>` (the embedded redis-server's socket,
  the SQLite databases, the secret key and the logs of the processes the tests start), and
- with REDIS_URL, its own Redis database (Celery's broker and the channel layer's groups).

Test databases are already named per process (webapp.core.env). A run without xdist, or a single
worker, changes nothing.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from urllib.parse import urlsplit, urlunsplit

REDIS_DATABASES = 16  # redis-server's default `databases`


def worker_index(worker_id: str) -> int:
    """0 for xdist's "gw0", 1 for "gw1", …"""
    return int(worker_id.removeprefix("gw"))


def worker_redis_url(url: str, index: int) -> str:
    """`url` with the database `index` places below its own (wrapping at 0): worker 0 keeps the URL's."""
    parts = urlsplit(url)
    if parts.scheme == "unix":  # the embedded redis-server: a socket per worker's var dir already
        return url
    base = int(parts.path.lstrip("/") or 0)
    database = (base - index) % REDIS_DATABASES
    return urlunsplit(parts._replace(path=f"/{database}"))


def isolate_worker(environ: MutableMapping[str, str]) -> None:
    """Give this xdist worker process its own var dir and Redis database (see the module docstring)."""
    worker_id = environ.get("PYTEST_XDIST_WORKER")
    if not worker_id:
        return
    environ["ROLLOUT_STUDIO_VAR"] = os.path.join(environ.get("ROLLOUT_STUDIO_VAR", "var"), worker_id)
    if environ.get("REDIS_URL"):
        environ["REDIS_URL"] = worker_redis_url(environ["REDIS_URL"], worker_index(worker_id))


isolate_worker(os.environ)
