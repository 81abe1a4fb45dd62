"""The one background-job wrapper (`workers.jobs.run_job`) as each kind of job goes through it — a run, a
reward model's training, an LLM judge: a redelivered task skips a job already claimed, a cancel asked
while the work runs ends the job cancelled within seconds, and a failure is recorded in one format on
every kind ("{type}: {error}" first, then where it happened), re-raised when it is not an Exception."""

from __future__ import annotations

import time

import pytest

from tests.webapp.review_factories import make_group
from tests.webapp.rewards_factories import direct_snapshot, preference_texts
from tests.workers.test_judge_queue import ask
from trainers.sdk.cancel import check_cancel
from webapp.experiments.models import Run
from webapp.review import services as review_services
from webapp.review.models import QueueJudge
from webapp.rewards.models import RewardModel
from workers.execution import run_job_of
from workers.jobs import Failure, run_job
from workers.judge_execution import judge_job
from workers.reward_execution import reward_training_job


@pytest.fixture
def reward_model(project, users):
    snapshot = direct_snapshot(project=project, rows=preference_texts(6), user=users["bob"])
    return RewardModel.objects.create(project=project, name="style", version=1, snapshot=snapshot, params={})


@pytest.fixture
def judge(project, run, users):
    make_group(run, group=0, rewards=[1.0, 0.0])
    queue = review_services.queue_create(
        project=project, user=users["bob"], name="judged", runs=[run], annotators=[users["carol"]]
    )
    return ask(queue, users, "tone", dispatch=False)


def the_job(kind: str, request):
    """The job of `kind` (made by its fixture), its row re-read, and the row's error as one text."""
    if kind == "run":
        row = request.getfixturevalue("run")
        return run_job_of(row.pk, hostname="w1"), lambda: Run.objects.get(pk=row.pk)
    if kind == "reward model":
        row = request.getfixturevalue("reward_model")
        return reward_training_job(row.pk, hostname="w1"), lambda: RewardModel.objects.get(pk=row.pk)
    row = request.getfixturevalue("judge")
    return judge_job(row.pk, hostname="w1"), lambda: QueueJudge.objects.get(pk=row.pk)


def error_of(row) -> str:
    return row.error_message + "\n\n" + getattr(row, "error_traceback", "")


KINDS = ["run", "reward model", "queue judge"]
STARTED = {"run": "STARTING", "reward model": "training", "queue judge": "running"}
FAILED = {"run": "FAILED", "reward model": "failed", "queue judge": "failed"}
CANCELLED = {"run": "CANCELLED", "reward model": "cancelled", "queue judge": "cancelled"}


@pytest.mark.django_db
@pytest.mark.parametrize("kind", KINDS)
def test_a_redelivered_task_finds_the_job_claimed_and_skips_it(kind, request):
    job, row = the_job(kind, request)
    seen = []

    def work(stop_requested):
        seen.append(row().status)
        assert run_job(job, lambda _: "a second delivery ran it") == f"skipped ({STARTED[kind]})"
        return "done"

    assert run_job(job, work) == "done"
    assert seen == [STARTED[kind]] and row().worker == "w1"


@pytest.mark.django_db
@pytest.mark.parametrize("kind", KINDS)
def test_a_failure_is_recorded_the_same_way_on_every_kind_of_job(kind, request):
    job, row = the_job(kind, request)

    def work(stop_requested):
        raise ValueError("the snapshot is unreadable")

    assert run_job(job, work) == "failed"
    failed = row()
    assert failed.status == FAILED[kind] and failed.finished_at is not None
    message, _, trace = error_of(failed).partition("\n\n")
    assert message == "ValueError: the snapshot is unreadable"
    assert trace.startswith("Traceback (most recent call last):") and "in work" in trace
    assert run_job(job, work) == f"skipped ({FAILED[kind]})"  # ended: never run again


@pytest.mark.django_db
@pytest.mark.parametrize("kind", KINDS)
def test_an_interrupt_fails_the_job_and_still_reaches_celery(kind, request):
    job, row = the_job(kind, request)

    def work(stop_requested):
        raise KeyboardInterrupt  # not an Exception: Celery must see it (a worker shutting down)

    with pytest.raises(KeyboardInterrupt):
        run_job(job, work)
    assert row().status == FAILED[kind] and error_of(row()).startswith("KeyboardInterrupt")


@pytest.mark.django_db(transaction=True)  # the watcher reads the request on its own connection
@pytest.mark.parametrize("kind", KINDS)
def test_a_cancel_asked_while_the_work_runs_ends_the_job_cancelled_within_seconds(kind, request):
    job, row = the_job(kind, request)
    took = {}

    def work(stop_requested):
        type(row()).objects.filter(pk=row().pk).update(cancel_requested=True)  # the Cancel button's write
        asked = time.monotonic()
        while time.monotonic() - asked < 10:
            took["s"] = time.monotonic() - asked
            check_cancel()  # what the library's loops call between batches and decode steps
            time.sleep(0.05)
        return "never cancelled"

    assert run_job(job, work) == "cancelled"
    assert row().status == CANCELLED[kind] and not row().error_message
    assert took["s"] < 3  # the watcher polls every second


def test_the_failure_text_of_a_one_field_job_is_the_message_then_the_traceback():
    try:
        raise RuntimeError("Could not load the judge model")
    except RuntimeError as exc:
        failure = Failure.of(exc)
    assert failure.message == "RuntimeError: Could not load the judge model"
    assert failure.text == f"{failure.message}\n\n{failure.traceback}"
    assert len(Failure.of(ValueError("x" * 9000)).text) == 5000
