"""Runs on a real Celery worker process, reporting over HTTP to a real daphne server, streaming to a
real websocket client. What these prove is plumbing, not learning: the runs train the tiny random Llama
(`tiny_model_path`, a local model directory like a user's own) with tiny settings, except the cancel
mid-evaluation, which needs an evaluation that lasts (the bundled model's)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time

import pytest
import websockets
from django.test import Client

from tests.processes import asgi_server, celery_worker
from webapp.experiments.models import Checkpoint, Run
from webapp.experiments.services import run_create, run_request_cancel
from webapp.fleet.services import reap_lost_runs
from webapp.rollouts.models import MetricPoint, RunEvent, Trajectory
from webapp.rollouts.selectors.runs import lineage_trajectories

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

TINY = {
    "group_size": 2,
    "prompts_per_step": 1,
    "max_new_tokens": 8,
    "eval_tasks": 0,
    "checkpoint_every": 1,
    "temperature": 1.0,
}


@pytest.fixture
def tiny_environment(project, users):
    from webapp.experiments.services import environment_create

    return environment_create(
        project=project,
        name="tiny arithmetic",
        kind="arithmetic_calculator",
        config={"max_turns": 1},
        user=users["alice"],
    )


def launch(project, environment, rubric, user, **knobs) -> Run:
    run, _ = run_create(
        project=project,
        name="on a worker",
        environment=environment,
        rubric=rubric,
        preset="grpo",
        overrides={**TINY, **knobs},
        user=user,
    )
    return run


def wait_for(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def status_of(run: Run) -> str:
    return Run.objects.values_list("status", flat=True).get(pk=run.pk)


def test_a_launched_run_trains_on_a_worker_and_streams_to_a_websocket(
    project, tiny_environment, rubric, users, tiny_model_path
):
    client = Client()
    client.force_login(users["dave"])  # a viewer may watch
    cookie = client.cookies["sessionid"].value

    with asgi_server() as url, celery_worker("cpu", DASHBOARD_URL=url):
        received: list[dict] = []

        async def watch(run_id: int) -> None:
            ws_url = url.replace("http://", "ws://") + f"/ws/runs/{run_id}/"
            async with websockets.connect(
                ws_url, additional_headers={"Cookie": f"sessionid={cookie}", "Origin": url}
            ) as socket:
                while True:
                    frame = json.loads(await asyncio.wait_for(socket.recv(), timeout=240))
                    received.append(frame)
                    event = frame.get("event", {})
                    if event.get("type") == "status" and event.get("status") in ("SUCCEEDED", "FAILED"):
                        return

        run = launch(project, tiny_environment, rubric, users["bob"], max_steps=2, model=tiny_model_path)
        asyncio.run(watch(run.pk))
        # The worker's final heartbeat, after the final status: the run's peak memory (issue 25).
        wait_for(lambda: Run.objects.get(pk=run.pk).peak_rss_mb, 30, "the run's peak memory")

    run.refresh_from_db()
    assert run.status == "SUCCEEDED", run.error_message + run.error_traceback
    assert run.current_step == 2 and run.worker
    assert Trajectory.objects.filter(run=run, split="train").count() == 2 * 2
    assert MetricPoint.objects.filter(run=run, key="reward/mean").count() == 2
    assert Checkpoint.objects.filter(run=run).count() >= 2
    events = [frame["event"] for frame in received if frame.get("type") == "event"]
    assert {e.get("step") for e in events if e["type"] == "metrics"} >= {1, 2}
    assert any(e["type"] == "trajectories" for e in events)
    assert received[0]["type"] == "snapshot"
    # The worker process held torch, the model, its optimizer and the rollouts: hundreds of MB at least.
    print(f"peak resident memory of the tiny run's worker: {run.peak_rss_mb} MB")
    assert run.peak_rss_mb > 200


def test_a_run_cancelled_mid_evaluation_stops_within_10_s_and_frees_the_worker(
    project, tiny_environment, rubric, users
):
    """Issue 25: the cancel lands wherever the run is (here: inside a long first evaluation, which used to
    run to its end first), and the next queued run starts at once."""
    with asgi_server() as url, celery_worker("cpu", DASHBOARD_URL=url):
        run = launch(
            project, tiny_environment, rubric, users["bob"], max_steps=50, eval_tasks=32, max_new_tokens=128
        )
        following = launch(project, tiny_environment, rubric, users["bob"], max_steps=1)
        wait_for(
            lambda: RunEvent.objects.filter(run=run, type="phase", summary__phase="evaluating").exists(),
            240,
            "the first evaluation",
        )
        time.sleep(2)  # well inside the evaluation: 32 tasks of up to 128 tokens
        asked = time.monotonic()
        assert run_request_cancel(run=Run.objects.get(pk=run.pk)) == "cancel_requested"
        assert not Run.objects.get(pk=run.pk).can_cancel()  # the button stops offering itself
        wait_for(lambda: status_of(run) == "CANCELLED", 60, "the run to stop")
        took = time.monotonic() - asked
        wait_for(lambda: status_of(following) != "QUEUED", 30, "the next run to start")
        freed = time.monotonic() - asked
        assert run_request_cancel(run=Run.objects.get(pk=following.pk)) == "cancel_requested"
        wait_for(lambda: status_of(following) == "CANCELLED", 60, "the next run to stop")
    print(
        f"cancel mid-evaluation: request → CANCELLED {took:.1f} s (goal ≤ 10 s), next run claimed {freed:.1f} s"
    )
    assert took <= 10
    run.refresh_from_db()
    assert run.current_step == 0 and run.finished_at
    assert not MetricPoint.objects.filter(run=run, key__startswith="eval/").exists()  # stopped inside it


def test_a_killed_worker_loses_the_run_which_resumes_itself_without_gaps_or_duplicates(
    project, tiny_environment, rubric, users, tiny_model_path
):
    # Enough steps that the tiny model is still training when checkpoint 2 is seen and the worker dies.
    steps = 12
    with asgi_server() as url:
        with celery_worker("cpu", name="doomed", DASHBOARD_URL=url) as worker:
            run = launch(
                project,
                tiny_environment,
                rubric,
                users["bob"],
                max_steps=steps,
                auto_resume=1,
                model=tiny_model_path,
            )
            wait_for(lambda: Checkpoint.objects.filter(run=run, step__gte=2).exists(), 300, "checkpoint 2")
            os.killpg(worker.pid, signal.SIGKILL)  # the worker and everything it started, mid-run
            worker.wait()
        time.sleep(3)
        # The reaper marks it LOST and, as the run asked (auto_resume), queues a resume from its checkpoint.
        with celery_worker("cpu", name="rescuer", DASHBOARD_URL=url, purge=False):
            assert reap_lost_runs(timeout_s=2) == [run.pk]
            assert status_of(run) == "LOST"
            resumed = Run.objects.get(parent=run)
            assert resumed.parent_checkpoint.step >= 2 and resumed.auto_resume_count == 1
            wait_for(lambda: status_of(resumed) in ("SUCCEEDED", "FAILED"), 300, "the resumed run to finish")

    resumed.refresh_from_db()
    assert resumed.status == "SUCCEEDED", resumed.error_message + resumed.error_traceback
    keys = [
        (t.step, t.group_index, t.sample_index)
        for t in lineage_trajectories(run=resumed).filter(split="train")
    ]
    assert sorted(keys) == [(step, 0, sample) for step in range(1, steps + 1) for sample in range(2)]
    own_steps = set(Trajectory.objects.filter(run=resumed).values_list("step", flat=True))
    assert min(own_steps) == resumed.parent_checkpoint.step + 1
