"""When a part of the deployment is down: a launch whose broker (Redis) is unreachable still answers
201 with its committed run marked `dispatch_pending`, and the periodic job sends it once the broker is
back — reward-model trainings and LLM judges asked for from their pages likewise; a request that needs the database or Redis while it is down gets a 503 JSON body, never a 500;
/healthz names the part that does not answer."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from django.urls import reverse

from tests.webapp.html_forms import form_data
from tests.webapp.review_factories import make_group
from tests.webapp.rewards_factories import direct_snapshot, preference_texts
from webapp.core.dispatch import UNSENT, celery_app
from webapp.experiments.models import Checkpoint, Run
from webapp.experiments.services import rubric_create, run_dispatch_pending
from webapp.review import services as review
from webapp.review.models import QueueJudge
from webapp.review.services import queue_judges_dispatch_pending
from webapp.rewards.models import RewardModel
from webapp.rewards.services import reward_models_dispatch_pending

ROOT = Path(__file__).resolve().parents[3]
CLOSED_PORT_REDIS = "redis://127.0.0.1:1/0"  # nothing listens on port 1: the connection is refused


def use_broker(url: str) -> None:
    """Point the dashboard's Celery app at `url`. Its producer pool is looked up again by URL (kombu keeps
    one per broker, so the working broker's pool is found again, open, when the URL comes back)."""
    celery_app.amqp._producer_pool = None
    celery_app._pool = None
    celery_app.conf.broker_url = url


@pytest.fixture(scope="module")
def private_redis(tmp_path_factory):
    """A redis-server of these tests' own (the embedded default's binary, on a unix socket): no Celery
    worker of any lane or session consumes from it, so what the tests send stays there to be counted.
    (A database of the shared Redis is not enough: the suite's lanes spread over its databases, and the
    heavy lane's workers took these tasks from database 15.)"""
    from webapp.embedded import ensure_embedded_redis, stop_embedded_redis

    var_dir = tmp_path_factory.mktemp("private-redis")
    socket_path = ensure_embedded_redis(var_dir)
    yield socket_path
    stop_embedded_redis(var_dir)


@pytest.fixture
def private_broker(private_redis):
    """The private redis-server as the dashboard's broker, emptied afterwards."""
    import redis

    original = celery_app.conf.broker_url
    url = f"redis+socket://{private_redis}"
    use_broker(url)
    yield url
    use_broker(original)
    redis.Redis(unix_socket_path=str(private_redis)).flushdb()


@pytest.fixture
def broker_down(private_broker):
    """The broker is unreachable (a real refused connection) until the test calls the returned function."""
    use_broker(CLOSED_PORT_REDIS)
    return lambda: use_broker(private_broker)


@pytest.fixture
def queued_tasks(private_redis):
    """The tasks waiting on a queue of the private broker: (task name, args), oldest first."""
    import redis

    broker = redis.Redis(unix_socket_path=str(private_redis))

    def read(queue: str) -> list[tuple[str, list]]:
        messages = [json.loads(raw) for raw in reversed(broker.lrange(queue, 0, -1))]  # kombu LPUSHes
        return [(m["headers"]["task"], json.loads(base64.b64decode(m["body"]))[0]) for m in messages]

    return read


# What a page says of a run, reward model or judge whose task the broker could not take yet.
WAITING = "Waiting for the broker"
# What the next page says after a reward model or judge was asked for while the broker was away.
NOT_TAKEN = (
    "is saved, but Redis could not take it yet: it is sent to the cpu workers within about 15 s of Redis "
    "answering again; no need to ask again."
)


def flashed(response) -> list[str]:
    from django.contrib.messages import get_messages

    return [str(message) for message in get_messages(response.wsgi_request)]


def sent_once_when_the_broker_returns(job, resend, task: str, broker_back, queued_tasks) -> None:
    """While the broker is down `resend` (a kind's periodic re-send) sends nothing and `job` stays
    pending; once it is back, `job` is sent, once, and its task waits on the cpu queue."""
    assert resend() == []  # still down
    assert type(job).objects.get(pk=job.pk).dispatch_pending()
    broker_back()
    assert resend() == [job.pk]
    job.refresh_from_db()
    assert not job.dispatch_pending() and uuid.UUID(job.task_id)
    assert resend() == []  # sent once
    assert queued_tasks("cpu") == [(task, [job.pk])]


@pytest.fixture
def stopped_run(run):
    Run.objects.filter(pk=run.pk).update(status="LOST", current_step=4)
    Checkpoint.objects.create(run=run, step=4, path="/ckpt/4")
    return Run.objects.get(pk=run.pk)


# Real commits (not a test transaction): the after-commit dispatch runs inside the request, as deployed.
pytestmark = pytest.mark.django_db(transaction=True)


def test_a_resume_while_the_broker_is_down_answers_201_and_is_sent_when_it_returns(
    signed_in, stopped_run, broker_down, queued_tasks
):
    response = signed_in("bob").post(f"/api/runs/{stopped_run.pk}/resume/", {}, format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["status"] == "QUEUED" and body["dispatch_pending"] is True and body["task_id"] == UNSENT
    resumed = Run.objects.get(pk=body["id"])
    assert resumed.dispatch_pending()
    page = signed_in("bob").get(
        reverse("experiments:run_detail", args=[stopped_run.project.slug, resumed.pk])
    )
    assert WAITING in page.content.decode()

    sent_once_when_the_broker_returns(
        resumed, run_dispatch_pending, "workers.execute_run", broker_down, queued_tasks
    )
    detail = signed_in("bob").get(f"/api/runs/{resumed.pk}/").json()
    assert detail["dispatch_pending"] is False
    page = signed_in("bob").get(
        reverse("experiments:run_detail", args=[stopped_run.project.slug, resumed.pk])
    )
    assert WAITING not in page.content.decode()


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


@pytest.fixture
def snapshot(project, users):
    return direct_snapshot(project=project, rows=preference_texts(6), user=users["bob"])


def train_from_the_page(client, project, snapshot, name: str) -> RewardModel:
    url = reverse("rewards:reward_model_create", args=[project.slug])
    data = form_data(client.get(url + f"?snapshot={snapshot.pk}").content.decode(), "train-form")
    data.update(name=name)
    response = client.post(url, data)
    assert response.status_code == 302, response.content.decode()[:500]
    assert flashed(response)[-1] == f"{name} v1 {NOT_TAKEN}"
    return RewardModel.objects.get(name=name)


def test_a_reward_model_trained_while_the_broker_is_down_is_sent_when_it_returns(
    client_for, signed_in, project, snapshot, broker_down, queued_tasks
):
    client = client_for("bob")
    reward_model = train_from_the_page(client, project, snapshot, "tone")
    assert (
        reward_model.status == "queued" and reward_model.task_id == UNSENT and reward_model.dispatch_pending()
    )
    detail_url = reverse("rewards:reward_model_detail", args=[project.slug, reward_model.pk])
    assert WAITING in client.get(detail_url).content.decode()
    assert signed_in("bob").get(f"/api/reward-models/{reward_model.pk}/").json()["dispatch_pending"] is True

    sent_once_when_the_broker_returns(
        reward_model, reward_models_dispatch_pending, "workers.train_reward_model", broker_down, queued_tasks
    )
    assert WAITING not in client.get(detail_url).content.decode()
    assert signed_in("bob").get(f"/api/reward-models/{reward_model.pk}/").json()["dispatch_pending"] is False


@pytest.fixture
def judged_queue(project, run, users):
    """A preference queue of 4 pairs and a rubric with an LLM-judge criterion."""
    for group in range(4):
        make_group(run, group=group, rewards=[1.0, 0.0])
    queue = review.queue_create(
        project=project, user=users["bob"], name="q", runs=[run], annotators=[users["carol"]], seed=3
    )
    spec = {"criteria": [{"name": "tone", "kind": "llm_judge", "params": {"model": "smollm2-135m"}}]}
    version = rubric_create(project=project, name="style", spec=spec, user=users["alice"]).latest_version
    return queue, version


def ask_from_the_page(client, project, judged_queue) -> QueueJudge:
    queue, version = judged_queue
    response = client.post(
        reverse("review:queue_judge_start", args=[project.slug, queue.pk]),
        {"criterion": f"{version.pk}:tone", "worker_queue": "cpu"},
    )
    assert response.status_code == 302
    judge = QueueJudge.objects.get(queue=queue)
    assert flashed(response)[-1] == f"{judge.label} {NOT_TAKEN}"
    return judge


def test_a_judge_asked_while_the_broker_is_down_is_sent_when_it_returns(
    client_for, project, judged_queue, broker_down, queued_tasks
):
    client = client_for("bob")
    judge = ask_from_the_page(client, project, judged_queue)
    assert judge.status == "queued" and judge.task_id == UNSENT and judge.dispatch_pending()
    panel_url = reverse("review:queue_judges", args=[project.slug, judge.queue_id])
    assert WAITING in client.get(panel_url).content.decode()

    sent_once_when_the_broker_returns(
        judge, queue_judges_dispatch_pending, "workers.judge_queue", broker_down, queued_tasks
    )
    assert WAITING not in client.get(panel_url).content.decode()


def test_the_periodic_job_sends_every_kind_once_and_never_a_cancelled_one(
    client_for, project, snapshot, judged_queue, stopped_run, broker_down, queued_tasks
):
    from workers.tasks import dispatch_pending

    client = client_for("bob")
    kept = train_from_the_page(client, project, snapshot, "kept")
    dropped = train_from_the_page(client, project, snapshot, "dropped")
    judge = ask_from_the_page(client, project, judged_queue)
    resumed = client.post(reverse("experiments:run_resume", args=[project.slug, stopped_run.pk]))
    assert resumed.status_code == 302
    run = Run.objects.get(parent=stopped_run)
    assert all(job.dispatch_pending() for job in [kept, dropped, judge, run])
    assert dispatch_pending() == {"runs": [], "reward_models": [], "judges": []}  # still down

    cancel = client.post(reverse("rewards:reward_model_cancel", args=[project.slug, dropped.pk]))
    assert cancel.status_code == 302
    dropped.refresh_from_db()
    assert dropped.status == "cancelled" and not dropped.dispatch_pending()
    client.post(reverse("review:queue_judge_cancel", args=[project.slug, judge.queue_id, judge.pk]))
    judge.refresh_from_db()
    assert judge.status == "cancelled" and not judge.dispatch_pending()

    broker_down()  # Redis is back
    assert dispatch_pending() == {"runs": [run.pk], "reward_models": [kept.pk], "judges": []}
    assert dispatch_pending() == {"runs": [], "reward_models": [], "judges": []}
    assert sorted(queued_tasks("cpu")) == [
        ("workers.execute_run", [run.pk]),
        ("workers.train_reward_model", [kept.pk]),
    ]


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
