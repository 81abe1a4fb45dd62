"""The queue explained: where a queued run stands (position, what is ahead, which workers serve its
queue), the same on the run page, the runs list, the API, the live updates and the Workers page, and a
queue with no live worker said at launch."""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.urls import reverse
from django.utils import timezone

from tests.webapp.experiments.test_pages_runs import launch_form
from tests.webapp.factories import make_run
from tests.webapp.live.test_consumers import cookie_of, receive_snapshot, socket  # noqa: F401, F811 (a fixture)
from webapp.experiments.models import Run, RunStatus
from webapp.experiments.services import run_transition
from webapp.fleet.models import WorkerNode
from webapp.fleet.selectors import run_queue_state
from webapp.fleet.services import worker_report
from webapp.projects.services import project_create


@pytest.fixture
def line(project, environment, rubric, users):
    """On the cpu queue: an other team's run training, then bob's first, second and third run waiting."""
    from webapp.experiments.services import environment_create, rubric_create

    other = project_create(name="Other team", owner=users["eve"])
    theirs = make_run(
        other,
        environment_create(
            project=other, name="e", kind="arithmetic_calculator", config={}, user=users["eve"]
        ),
        rubric_create(project=other, name="r", spec=rubric.latest_version.spec, user=users["eve"]),
        users["eve"],
        "secret plan",
        status=RunStatus.RUNNING,
    )
    runs = [make_run(project, environment, rubric, users["bob"], f"bob {i}") for i in (1, 2, 3)]
    gpu = make_run(project, environment, rubric, users["bob"], "on the gpu", queue="gpu")
    return SimpleNamespace(theirs=theirs, runs=runs, gpu=gpu)


def serve(hostname: str, queues: list[str], **fields) -> None:
    worker_report(hostname=hostname, queues=queues, gpus=[], cpus=2, ray_address="local", pid=1, **fields)


def test_a_queued_run_knows_its_position_what_is_ahead_and_that_no_worker_serves_its_queue(line, project):
    first, second, third = line.runs
    state = run_queue_state(third)
    assert state["queue"] == "cpu" and state["position"] == 3
    # This project's runs ahead are named and linked; the other team's training run only counted.
    assert [(row["name"], row["status"]) for row in state["ahead"]] == [
        ("bob 1", "QUEUED"),
        ("bob 2", "QUEUED"),
    ]
    assert state["ahead"][0]["url"] == reverse("experiments:run_detail", args=[project.slug, first.pk])
    assert state["ahead_count"] == 3 and state["ahead_unnamed"] == 1
    assert "secret plan" not in str(state)
    assert state["workers"] == [] and "No live worker serves the cpu queue" in state["warning"]
    assert run_queue_state(first)["position"] == 1
    assert run_queue_state(line.gpu)["position"] == 1 and run_queue_state(line.gpu)["ahead_count"] == 0

    serve("cpu@box", ["cpu"], current_run_id=line.theirs.pk)
    serve("gpu@old", ["gpu"])
    WorkerNode.objects.filter(hostname="gpu@old").update(last_seen=timezone.now() - timedelta(minutes=5))
    state = run_queue_state(third)
    assert state["workers"] == [{"hostname": "cpu@box", "busy": True}] and state["warning"] == ""
    gpu = run_queue_state(line.gpu)
    assert gpu["workers"] == [] and gpu["workers_offline"] == 1 and "1 known, none reported" in gpu["warning"]
    # Not queued: no queue state.
    assert run_queue_state(line.theirs) is None


def test_the_run_page_the_runs_list_and_the_api_say_the_same(line, project, client_for, signed_in):
    third = line.runs[2]
    bob = client_for("bob")
    page = bob.get(reverse("experiments:run_detail", args=[project.slug, third.pk])).content.decode()
    panel = page.split("data-run-queue")[1].split("</div>")[0]
    assert "Position 3 on the cpu queue" in page
    assert f'href="/p/{project.slug}/runs/{line.runs[0].pk}/">bob 1</a>' in page
    assert "1 more run (other projects' runs are not named)" in page
    assert "No live worker serves the cpu queue" in page and "secret plan" not in page
    assert " hidden" not in panel.split(">")[0]

    listing = bob.get(reverse("experiments:run_list", args=[project.slug])).content.decode()
    row = listing.split(f'data-run-row="{third.pk}"')[1].split("</tr>")[0]
    assert "#3 on cpu" in row and "no live worker" in row

    body = signed_in("bob").get(f"/api/runs/{third.pk}/").json()
    assert body["queue_state"] == run_queue_state(Run.objects.get(pk=third.pk))
    assert body["queue_state"]["position"] == 3
    started = signed_in("bob").get(f"/api/runs/{line.theirs.pk}/")
    assert started.status_code == 404  # another team's run stays out of reach


def test_launching_on_a_queue_no_live_worker_serves_warns_at_once(
    client_for, signed_in, project, environment, rubric, monkeypatch, django_capture_on_commit_callbacks
):
    monkeypatch.setattr(
        "webapp.core.dispatch.celery_app.send_task", lambda name, args, queue: SimpleNamespace(id="task-1")
    )
    bob = client_for("bob")
    posted, _presets, _keys = launch_form(bob, project)
    posted.update({"name": "waits", "queue": "gpu"})
    with django_capture_on_commit_callbacks(execute=True):
        response = bob.post(reverse("experiments:run_create", args=[project.slug]), posted, follow=True)
    page = response.content.decode()
    assert "queued on the gpu queue" in page and "No live worker serves the gpu queue" in page

    # The API launches it too (a warning, not a refusal), and says so in its answer.
    with django_capture_on_commit_callbacks(execute=True):
        created = signed_in("bob").post(
            f"/api/projects/{project.slug}/runs/",
            {"name": "api waits", "environment": environment.pk, "rubric": rubric.pk, "queue": "gpu"},
            format="json",
        )
    assert created.status_code == 201, created.content
    assert created.json()["queue_state"]["position"] == 2
    assert "No live worker serves the gpu queue" in created.json()["queue_state"]["warning"]

    serve("gpu@box", ["gpu"])
    with django_capture_on_commit_callbacks(execute=True):
        response = bob.post(
            reverse("experiments:run_create", args=[project.slug]), {**posted, "name": "served"}, follow=True
        )
    assert "No live worker" not in response.content.decode()


@pytest.mark.django_db(transaction=True)
def test_runs_behind_learn_live_when_a_run_ahead_starts_and_when_a_worker_comes(line, cookie_of):  # noqa: F811
    first, second, third = line.runs
    bob = cookie_of("bob")

    async def next_queue_state(ws) -> dict:
        while True:
            frame = await ws.receive_json_from(timeout=10)
            if frame["type"] == "event" and frame["event"]["type"] == "queue":
                return frame["event"]["queue"]

    async def scenario():
        async with socket(third, bob) as ws:
            snapshot = await receive_snapshot(ws)
            assert snapshot["run"]["queue"]["position"] == 3
            assert await sync_to_async(run_transition)(first.pk, RunStatus.STARTING)
            state = await next_queue_state(ws)
            assert state["position"] == 2 and [row["name"] for row in state["ahead"]] == ["bob 1", "bob 2"]
            assert state["ahead"][0]["status"] == "STARTING" and state["warning"]

            await sync_to_async(serve)("cpu@new", ["cpu"])
            state = await next_queue_state(ws)
            assert state["workers"] == [{"hostname": "cpu@new", "busy": False}] and state["warning"] == ""
            # A page opened now starts from the same state (the websocket's snapshot carries it).
            fresh = await sync_to_async(Run.objects.get)(pk=third.pk)
            assert (await sync_to_async(run_queue_state)(fresh)) == state

    async_to_sync(scenario)()


@pytest.mark.django_db(transaction=True)
def test_a_worker_that_dies_silently_is_announced_within_the_reapers_period(line, cookie_of):  # noqa: F811
    from webapp.fleet.models import ONLINE_WITHIN
    from webapp.fleet.services import announce_silent_workers

    third = line.runs[2]
    serve("cpu@doomed", ["cpu"])
    bob = cookie_of("bob")

    async def scenario():
        async with socket(third, bob) as ws:
            assert (await receive_snapshot(ws))["run"]["queue"]["warning"] == ""
            # Killed: it never says it stops; its last report slips past ONLINE_WITHIN.
            gone = timezone.now() - ONLINE_WITHIN - timedelta(seconds=5)
            await sync_to_async(WorkerNode.objects.filter(hostname="cpu@doomed").update)(last_seen=gone)
            assert await sync_to_async(announce_silent_workers)() == ["cpu@doomed"]
            while True:
                frame = await ws.receive_json_from(timeout=10)
                if frame["type"] == "event" and frame["event"]["type"] == "queue":
                    break
            state = frame["event"]["queue"]
            assert state["workers"] == [] and "No live worker serves the cpu queue" in state["warning"]
            # Told in one period, not in every one after.
            later = timezone.now() + timedelta(seconds=15)
            assert await sync_to_async(announce_silent_workers)(now=later) == []

    async_to_sync(scenario)()


def test_the_workers_page_lists_queued_runs_per_queue(line, project, client_for):
    serve("cpu@box", ["cpu"], current_run_id=line.theirs.pk)
    page = client_for("bob").get("/workers/").content.decode()
    cpu = page.split('data-queue="cpu"')[1].split("</tr>")[0]
    assert cpu.index("#1") < cpu.index("bob 1") < cpu.index("#2") < cpu.index("bob 2") < cpu.index("bob 3")
    assert "secret plan" not in page
    gpu = page.split('data-queue="gpu"')[1].split("</tr>")[0]
    assert "on the gpu" in gpu and "No live worker serves the gpu queue" in gpu
    # eve sees her own run training and bob's three waiting runs as counted only
    page = client_for("eve").get("/workers/").content.decode()
    cpu = page.split('data-queue="cpu"')[1].split("</tr>")[0]
    assert "3 runs of other projects" in cpu and "bob 1" not in page
