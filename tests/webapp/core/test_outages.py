"""When a part of the deployment is down: a launch whose broker (Redis) is unreachable still answers
201 with its committed run marked `dispatch_pending`, and the periodic job sends it once the broker is
back; a request that needs the database or Redis while it is down gets a 503 JSON body, never a 500;
/healthz names the part that does not answer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from webapp.core.dispatch import UNSENT, celery_app
from webapp.experiments.models import Checkpoint, Run
from webapp.experiments.services import run_dispatch_pending

ROOT = Path(__file__).resolve().parents[3]
CLOSED_PORT_REDIS = "redis://127.0.0.1:1/0"  # nothing listens on port 1: the connection is refused


def use_broker(url: str) -> None:
    """Point the dashboard's Celery app at `url`. Its producer pool is looked up again by URL (kombu keeps
    one per broker, so the working broker's pool is found again, open, when the URL comes back)."""
    celery_app.amqp._producer_pool = None
    celery_app._pool = None
    celery_app.conf.broker_url = url


PRIVATE_DB = 15  # a Redis database no test worker consumes from: what these tests send stays there


@pytest.fixture
def private_broker():
    """The tests' Redis, in a database of its own, emptied afterwards: tasks sent here reach no worker."""
    import redis
    from django.conf import settings

    original = celery_app.conf.broker_url
    if settings.REDIS_URL.startswith("unix://"):
        url = f"redis+socket://{settings.REDIS_URL.removeprefix('unix://')}?virtual_host={PRIVATE_DB}"
    else:
        url = settings.REDIS_URL.rsplit("/", 1)[0] + f"/{PRIVATE_DB}"
    use_broker(url)
    yield url
    use_broker(original)
    redis.Redis.from_url(settings.REDIS_URL, db=PRIVATE_DB).flushdb()


@pytest.fixture
def broker_down(private_broker):
    """The broker is unreachable (a real refused connection) until the test calls the returned function."""
    use_broker(CLOSED_PORT_REDIS)
    return lambda: use_broker(private_broker)


@pytest.fixture
def stopped_run(run):
    Run.objects.filter(pk=run.pk).update(status="LOST", current_step=4)
    Checkpoint.objects.create(run=run, step=4, path="/ckpt/4")
    return Run.objects.get(pk=run.pk)


# Real commits (not a test transaction): the after-commit dispatch runs inside the request, as deployed.
pytestmark = pytest.mark.django_db(transaction=True)


def test_a_resume_while_the_broker_is_down_answers_201_and_is_sent_when_it_returns(
    signed_in, stopped_run, broker_down
):
    response = signed_in("bob").post(f"/api/runs/{stopped_run.pk}/resume/", {}, format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["status"] == "QUEUED" and body["dispatch_pending"] is True and body["task_id"] == UNSENT
    resumed = Run.objects.get(pk=body["id"])
    assert resumed.dispatch_pending()
    # Still down: nothing is sent, the run stays pending (and says so).
    assert run_dispatch_pending() == []
    assert Run.objects.get(pk=resumed.pk).dispatch_pending()

    broker_down()  # Redis is back
    assert run_dispatch_pending() == [resumed.pk]
    resumed.refresh_from_db()
    assert not resumed.dispatch_pending() and uuid.UUID(resumed.task_id)
    detail = signed_in("bob").get(f"/api/runs/{resumed.pk}/").json()
    assert detail["dispatch_pending"] is False
    assert run_dispatch_pending() == []  # sent once


def test_a_fork_while_the_broker_is_down_is_committed_once(signed_in, stopped_run, broker_down):
    response = signed_in("bob").post(
        f"/api/runs/{stopped_run.pk}/fork/", {"overrides": {"learning_rate": 1e-5}}, format="json"
    )
    assert response.status_code == 201, response.content
    assert response.json()["dispatch_pending"] is True
    assert Run.objects.filter(parent=stopped_run).count() == 1


def test_a_dpo_run_while_the_broker_is_down_answers_201_and_is_sent_when_it_returns(
    signed_in, run, users, project, broker_down
):
    from tests.webapp.review_factories import make_group
    from webapp.review import services as review

    make_group(run, rewards=[1.0, 0.0])
    queue = review.queue_create(
        project=project, user=users["bob"], name="prefs", runs=[run], annotators=[users["bob"]]
    )
    pair = review.next_pair(queue=queue, annotator=users["bob"]).pair
    review.judgement_submit(pair=pair, annotator=users["bob"], choice="a")
    snapshot = review.snapshot_create(queue, users["bob"])

    response = signed_in("bob").post(
        f"/api/preference-snapshots/{snapshot.pk}/dpo-runs/", {"name": "dpo", "config": {}}, format="json"
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["kind"] == "dpo" and body["dispatch_pending"] is True and body["task_id"] == UNSENT
    assert Run.objects.filter(kind="dpo").count() == 1

    broker_down()  # Redis is back
    assert run_dispatch_pending() == [body["id"]]
    assert uuid.UUID(Run.objects.get(pk=body["id"]).task_id)


def test_a_run_sent_normally_is_not_pending(signed_in, stopped_run, private_broker):
    response = signed_in("bob").post(f"/api/runs/{stopped_run.pk}/resume/", {}, format="json")
    body = response.json()
    assert response.status_code == 201 and body["dispatch_pending"] is False and uuid.UUID(body["task_id"])


PROBE = """
import json, django
django.setup()
from django.test import Client
client = Client(raise_request_exception=False)
answers = {}
for path in ["/healthz", "/api/projects/", "/accounts/login/"]:
    if path == "/accounts/login/":  # a sign-in reads the user table
        response = client.post(path, {"username": "alice", "password": "not-her-password"})
    else:  # a script's token is looked up in the database
        response = client.get(path, headers={"Authorization": "Bearer rsu_" + "x" * 40})
    answers[path] = [response.status_code, response.headers.get("Content-Type", ""), response.content.decode()]
print(json.dumps(answers))
"""


def probe(tmp_path: Path, **env: str) -> dict:
    """A real Django process whose database or Redis is unreachable, asked for a few pages."""
    full_env = {k: v for k, v in os.environ.items() if k != "DJANGO_ALLOW_ASYNC_UNSAFE"}
    full_env |= {"ROLLOUT_STUDIO_VAR": str(tmp_path), "DJANGO_SETTINGS_MODULE": "webapp.settings", **env}
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_with_the_database_down_requests_get_503_json_and_healthz_names_it(tmp_path):
    answers = probe(
        tmp_path,
        DATABASE_URL="postgres://nobody@127.0.0.1:1/none",
        REDIS_URL=os.environ.get("REDIS_URL", CLOSED_PORT_REDIS),
    )
    status, content_type, body = answers["/healthz"]
    assert status == 503 and json.loads(body)["database"].startswith("unreachable")
    for path in ["/api/projects/", "/accounts/login/"]:
        status, content_type, body = answers[path]
        assert status == 503, (path, body[:300])
        assert content_type == "application/json"
        assert json.loads(body)["error"] == "service_unavailable"
        assert "database" in json.loads(body)["detail"]


def the_tests_database_url() -> dict[str, str]:
    """The probe's database must answer: on Postgres that is the tests' own database (the one DATABASE_URL
    names may not exist on a fresh CI machine); on SQLite the probe makes its own under its var dir."""
    from django.db import connection

    db = connection.settings_dict
    if db["ENGINE"] != "django.db.backends.postgresql":
        return {}
    user = f"{db['USER']}:{db['PASSWORD']}" if db.get("PASSWORD") else db["USER"]
    return {"DATABASE_URL": f"postgres://{user}@{db['HOST']}:{db['PORT'] or 5432}/{db['NAME']}"}


def test_with_redis_down_healthz_says_so(tmp_path):
    answers = probe(tmp_path, REDIS_URL=CLOSED_PORT_REDIS, **the_tests_database_url())
    status, _, body = answers["/healthz"]
    assert status == 503
    assert json.loads(body) == {
        "ok": False,
        "database": "ok",
        "redis": "unreachable: ConnectionError",
    }


def test_healthz_answers_ok_when_both_parts_answer(client):
    assert client.get("/healthz").json() == {"ok": True, "database": "ok", "redis": "ok"}
