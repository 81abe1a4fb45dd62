"""Fixtures shared by the whole suite.

The web tests run on whatever DATABASE_URL / REDIS_URL name (CI: the machine's Postgres and Redis);
without them, on SQLite and the embedded redis-server, exactly like the demo. Tests of `trainers/`
need no Django at all (they also run with `-p no:django`).
"""

from __future__ import annotations

from contextlib import contextmanager

import pytest
from django.contrib.auth import get_user_model


def _django_active(config) -> bool:
    return config.pluginmanager.hasplugin("django")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """After a test's teardown: stop the shared server/Chromium the next test does not use."""
    try:
        return (yield)
    finally:
        from tests.processes import release_unneeded

        release_unneeded(nextitem)


@pytest.fixture(scope="session", autouse=True)
def _embedded_redis(request):
    """Start the embedded redis-server when no REDIS_URL is set (the embedded default), and stop it at the
    end of the session if this session started it: a plain `pytest` run (the deploy tier's host-side
    process was one) left its redis-server running for hours. One that already answered (a demo on the
    same var dir) is left alone."""
    started_here = False
    if _django_active(request.config):
        from django.conf import settings

        if settings.EMBEDDED:
            from webapp.embedded import ensure_embedded_redis, socket_answers

            started_here = not socket_answers(settings.VAR_DIR / "redis.sock")
            ensure_embedded_redis(settings.VAR_DIR)
    yield
    if started_here:
        from webapp.embedded import stop_embedded_redis

        stop_embedded_redis(settings.VAR_DIR)


@pytest.fixture(scope="session", autouse=True)
def _static_files_found_per_request(request):
    """WhiteNoise's middleware indexes every static file when it is built (the finders' ~240 files, with a
    stat and a header set for each): once per server process, but once per test client in a test process —
    ~30 ms of each of the ~2,600 web tests, a third of their time. With autorefresh it looks a file up
    when one is asked for instead; the servers the tests start (tests/server_settings.py) index as
    production does."""
    if _django_active(request.config):
        from django.conf import settings

        settings.WHITENOISE_AUTOREFRESH = True
    yield


@pytest.fixture(scope="session", autouse=True)
def _private_artifact_dirs(request, tmp_path_factory):
    """Checkpoints and reward models of this session go to a temp dir that is removed at the end.

    A worker-run checkpoint of the default model is ~1.6 GB with its optimizer; left in var/test,
    they piled up across sessions until a disk filled. The environment variables reach the web and
    worker processes the tests start.
    """
    import os
    import shutil

    root = tmp_path_factory.mktemp("artifacts")
    dirs = {"RUN_ARTIFACTS_DIR": root / "runs", "REWARD_MODELS_DIR": root / "reward_models"}
    saved = {name: os.environ.get(name) for name in dirs}
    os.environ.update({name: str(path) for name, path in dirs.items()})
    if _django_active(request.config):
        from django.conf import settings

        for name, path in dirs.items():
            setattr(settings, name, path)
    yield
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(autouse=True)
def _drop_this_tests_artifacts(request):
    """A slow or browser test's worker-run checkpoints (1.6–3.1 GB each with the optimizer) go when the test ends,
    not at the end of the session: a whole suite's worth (DPO, resume, lineage runs) outgrew a small
    disk. Only what appeared during this test is removed, so a fixture's earlier run stays."""
    import os
    import shutil
    from pathlib import Path

    from tests.parallel import is_heavy

    if not is_heavy(request.keywords):
        yield
        return
    roots = [
        Path(os.environ[name]) for name in ("RUN_ARTIFACTS_DIR", "REWARD_MODELS_DIR") if name in os.environ
    ]
    before = {path for root in roots if root.is_dir() for path in root.iterdir()}
    yield
    for root in roots:
        if root.is_dir():
            for path in set(root.iterdir()) - before:
                shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(autouse=True)
def _give_back_memory_after_heavy_tests(request):
    """After a slow or browser test, collect what it freed and hand glibc's emptied heaps back to the OS
    (trainers.learn.memory.release_memory, as a worker does after a run). Each in-process training test
    left ~1.5 GB resident otherwise: the heavy lane's process reached 7.5 GB by the ecosystem training tests
    and, beside the Ray cluster of test_distributed's sharded run, the node's memory (22.5 of 23.5 GB),
    where Ray's memory monitor killed its workers."""
    yield
    from tests.parallel import is_heavy

    if is_heavy(request.keywords):
        from trainers.learn.memory import release_memory

        release_memory()


SINK_THREAD_PREFIX = "rollout-studio-sink-"  # trainers/sdk/reporting.py names its thread so
LEFT_SINKS: list[str] = []


@pytest.fixture(autouse=True)
def _no_reporting_thread_left_behind(request):
    """A test that starts an SDK run and never finishes or closes it leaves its reporting thread posting to a
    server the test has stopped: its retries log "reporting to … failed" into whatever runs next (CI's quick
    lane did, long after the test). Such a test is named in the session's summary; a thread a wider-scoped
    fixture started (set up before this snapshot) is named at the end if it is still running then."""
    import threading

    def sinks() -> set[str]:
        return {
            t.name for t in threading.enumerate() if t.name.startswith(SINK_THREAD_PREFIX) and t.is_alive()
        }

    before = sinks()
    yield
    for name in sorted(sinks() - before):
        LEFT_SINKS.append(f"{request.node.nodeid} left {name} running")


def pytest_terminal_summary(terminalreporter):
    import threading

    named = {line.rsplit(" left ", 1)[1].split()[0] for line in LEFT_SINKS}
    for thread in threading.enumerate():
        if thread.name.startswith(SINK_THREAD_PREFIX) and thread.is_alive() and thread.name not in named:
            LEFT_SINKS.append(f"(a fixture) left {thread.name} running at the end of the session")
    if LEFT_SINKS:
        terminalreporter.section("SDK runs left reporting (finish or close them)")
        for line in LEFT_SINKS:
            terminalreporter.write_line(line)


@pytest.fixture(autouse=True)
def _fast_password_hashing(request):
    """Hashing passwords properly costs ~0.3 s a user; tests make many users. The web servers the tests
    start verify with the same hasher (tests/server_settings.py)."""
    if _django_active(request.config):
        settings = request.getfixturevalue("settings")
        settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    yield


# --- the people and objects of a story ---------------------------------------------------------------
# alice owns the project, bob researches, carol annotates, dave views, and eve is an outsider.
PASSWORD = "correct-horse-battery"

ROLES = {"alice": "owner", "bob": "researcher", "carol": "annotator", "dave": "viewer"}

ARITHMETIC_CONFIG: dict = {}
RUBRIC_SPEC = {
    "aggregation": "weighted_sum",
    "criteria": [
        {"name": "correct", "kind": "numeric_match", "weight": 1.0, "params": {}},
        {"name": "format", "kind": "regex", "weight": 0.2, "params": {"pattern": "<answer>.*</answer>"}},
    ],
}


# The story's objects are made by plain functions too, for fixtures of a wider scope (a module's world
# built once: tests/webapp/projects/test_access_apis.py).
def make_users() -> dict:
    User = get_user_model()
    made = {name: User.objects.create_user(name, f"{name}@example.com", PASSWORD) for name in [*ROLES, "eve"]}
    return made


def make_project(users):
    from webapp.projects.models import Membership
    from webapp.projects.services import project_create

    project = project_create(name="Agents", owner=users["alice"])
    for name, role in ROLES.items():
        if role != "owner":
            Membership.objects.create(project=project, user=users[name], role=role)
    return project


def make_environment(project, users):
    from webapp.experiments.services import environment_create

    return environment_create(
        project=project,
        name="arith",
        kind="arithmetic_calculator",
        config=dict(ARITHMETIC_CONFIG),
        user=users["alice"],
    )


def make_rubric(project, users):
    from webapp.experiments.services import rubric_create

    return rubric_create(project=project, name="correctness", spec=RUBRIC_SPEC, user=users["alice"])


def make_run(project, environment, rubric, users):
    from webapp.experiments.services import run_create

    run, _token = run_create(
        project=project,
        name="first run",
        environment=environment,
        rubric=rubric,
        preset="grpo",
        overrides={},
        user=users["bob"],
        dispatch=False,
    )
    return run


@contextmanager
def story_once(django_db_blocker):
    """The story's people and objects, made once for a module's many tests (yields a dict: users, project,
    environment, rubric, run), inside a transaction that is rolled back when the `with` ends. Each test
    that asks for `db` then runs in a savepoint of it and is rolled back to it — Django's setUpTestData
    pattern; give each test copies (copy.deepcopy) so that none sees another's changes in memory."""
    from django.db import transaction
    from django.test.utils import override_settings

    with (
        django_db_blocker.unblock(),
        override_settings(PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"]),
        transaction.atomic(),
    ):
        users = make_users()
        project = make_project(users)
        environment = make_environment(project, users)
        rubric = make_rubric(project, users)
        run = make_run(project, environment, rubric, users)
        yield {"users": users, "project": project, "environment": environment, "rubric": rubric, "run": run}
        transaction.set_rollback(True)


@pytest.fixture
def users(db):
    return make_users()


@pytest.fixture
def project(users):
    return make_project(users)


@pytest.fixture
def environment(project, users):
    return make_environment(project, users)


@pytest.fixture
def rubric(project, users):
    return make_rubric(project, users)


@pytest.fixture
def run(project, environment, rubric, users):
    return make_run(project, environment, rubric, users)


@pytest.fixture
def signed_in(users):
    """A DRF test client signed in as one of the story's people: `signed_in("bob")`."""
    from rest_framework.test import APIClient

    def make(name: str) -> APIClient:
        client = APIClient()
        client.force_login(users[name])
        return client

    return make


@pytest.fixture
def client_for(client, users):
    """client_for("bob") -> a test client signed in as bob."""

    def sign_in(name: str):
        client.force_login(users[name])
        return client

    return sign_in


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory) -> str:
    """A local model directory holding a tiny random Llama (tests/fixtures/tiny_model.py), written once per
    session: pass it as a run's `model` where a test proves plumbing (workers, resume, cancel, streaming,
    DPO → GRPO) rather than what a model learns or says."""
    from tests.fixtures.tiny_model import save_tiny_llama

    return str(save_tiny_llama(tmp_path_factory.mktemp("tiny-model") / "tiny-llama"))
