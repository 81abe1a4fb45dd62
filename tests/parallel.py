"""pytest plugin (loaded from pyproject's addopts: `-p tests.parallel`): the suite in parallel processes.

`make test` runs the suite as pytest processes in lanes (`scripts/run_tests.py`), two at a time: the `slow`
tests (the real model, Ray, Celery workers, servers: most of them use both cores while they train) one
after another in the *heavy* lane, so that two of them never race for the cores and their time limits
hold; the other lanes queue for whichever slot is free first: the ~3,300 quick in-process tests (one core
each) in the *quick* lane, the `browser` tests that train nothing (a daphne server and Chromium, waiting on
each other more than computing) in the *browser* lane, and the bench smokes in two halves. `make test-fast` runs the quick ones in two
pytest-xdist workers, a file at a time each.

Each of those processes starts its own servers, Celery workers, Ray clusters and Chromium, and they must
not meet another process's: a Celery worker consuming the queue of a shared broker takes the other's runs.
So before Django reads its settings (a plugin is imported before any conftest, and pytest-django loads the
settings before the first conftest), each lane and each xdist worker gets

- its own state directory under ROLLOUT_STUDIO_VAR (`…/heavy`, `…/quick/gw1`: the embedded redis-server's
  socket, the SQLite databases, the secret key and the logs of the processes the tests start), and
- with REDIS_URL, its own Redis database (Celery's broker and the channel layer's groups).

Test databases are already named per process (webapp.core.env). One plain `pytest` changes nothing.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from urllib.parse import urlsplit, urlunsplit

from webapp.core.env import redis_database

REDIS_DATABASES = 16  # redis-server's default `databases`
LANE_VARIABLE = "ROLLOUT_STUDIO_TEST_LANE"
# The real model, Ray, workers, servers, Chromium, bench scripts (`bench_second` only comes with `bench`).
HEAVY_MARKERS = ("slow", "browser", "bench")


def is_heavy(keywords) -> bool:
    """Whether a test (its `request.keywords`) is one of the heavy lane's."""
    return any(marker in keywords for marker in HEAVY_MARKERS)


# name → the pytest marker expression of its tests; the first lane keeps the REDIS_URL's own database.
# Every test is in exactly one lane (tests/test_parallel.py).
LANES = {
    "heavy": "slow",
    "quick": " and ".join(f"not {marker}" for marker in HEAVY_MARKERS),
    "browser": "browser and not slow",
    # Every script under bench/ at its smoke size (tests/bench/test_smoke.py): subprocesses, one at a time,
    # in two halves of about equal time (the heavier half is `bench_second`), so the two slots end together.
    "bench": "bench and not bench_second and not slow and not browser",
    "bench_second": "bench_second and not slow and not browser",
}
# The lanes scripts/run_tests.py starts, in this order, in whichever of its two slots is free first (the
# heavy lane holds the first slot from the start).
QUEUED = ("quick", "browser", "bench", "bench_second")
WORKERS_PER_LANE = 3  # Redis databases set apart for each lane's xdist workers: 5 lanes × 3 ≤ 16


def slot(lane: str | None, worker_id: str | None) -> int:
    """This process's place among the suite's processes: 0 for the first lane's (or a lone) process."""
    lane_index = list(LANES).index(lane) if lane else 0
    worker_index = int(worker_id.removeprefix("gw")) if worker_id else 0
    return lane_index * WORKERS_PER_LANE + worker_index


def own_redis_url(url: str, slot: int) -> str:
    """`url` with the database `slot` places below its own (wrapping at 0): slot 0 keeps the URL's."""
    parts = urlsplit(url)
    if parts.scheme == "unix":  # the embedded redis-server: one per var dir already
        return url
    base = redis_database(url)
    return urlunsplit(parts._replace(path=f"/{(base - slot) % REDIS_DATABASES}"))


def isolate(environ: MutableMapping[str, str]) -> None:
    """Give this lane / xdist worker process its own var dir and Redis database (see the module docstring)."""
    lane = environ.get(LANE_VARIABLE) or None
    worker_id = environ.get("PYTEST_XDIST_WORKER") or None
    if lane is None and worker_id is None:
        return
    if lane is not None and lane not in LANES:
        raise RuntimeError(f"{LANE_VARIABLE}={lane!r}: the lanes are {', '.join(LANES)}")
    parts = [part for part in (lane, worker_id) if part]
    environ["ROLLOUT_STUDIO_VAR"] = os.path.join(environ.get("ROLLOUT_STUDIO_VAR", "var"), *parts)
    if environ.get("REDIS_URL"):
        environ["REDIS_URL"] = own_redis_url(environ["REDIS_URL"], slot(lane, worker_id))


isolate(os.environ)
