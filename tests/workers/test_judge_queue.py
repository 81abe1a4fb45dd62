"""An LLM judge annotates a preference queue for real: asked as the queue page asks it, a Celery worker
picks the task up, loads the bundled SmolLM2-135M (the criterion names "policy": the model the queue's
run trains) and asks it about every pair in both orders. A judge whose model cannot be loaded ends
FAILED with the reason (that task runs in this process: no model gets loaded)."""

from __future__ import annotations

import time

import pytest
from django.utils import timezone

from tests.processes import celery_worker
from tests.webapp.review_factories import make_group
from webapp.experiments.services import rubric_create
from webapp.fleet.models import WorkerNode
from webapp.review import selectors, services
from webapp.review.models import JudgeStatus, JudgeVerdict, QueueJudge

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

CRITERIA = {
    "tone": {"name": "tone", "kind": "llm_judge", "weight": 1.0, "params": {"model": "policy"}},
    "gone": {
        "name": "gone",
        "kind": "llm_judge",
        "weight": 1.0,
        "params": {"model": "/nonexistent/judge-model"},
    },
}


@pytest.fixture
def queue(project, run, users):
    for group in range(2):
        make_group(run, group=group, rewards=[1.0, 0.0])
    return services.queue_create(
        project=project,
        user=users["bob"],
        name="judged",
        runs=[run],
        annotators=[users["carol"]],
        instructions="Prefer the correct sum.",
    )


def ask(queue, users, criterion: str, *, dispatch: bool) -> QueueJudge:
    spec = {"aggregation": "weighted_sum", "criteria": [CRITERIA[criterion]]}
    version = rubric_create(project=queue.project, name=f"judges {criterion}", spec=spec, user=users["alice"])
    return services.queue_judge_start(
        queue=queue,
        user=users["bob"],
        rubric_version=version.latest_version,
        criterion_name=criterion,
        dispatch=dispatch,
    )


def wait_for(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def test_the_bundled_model_judges_every_pair_in_both_orders(queue, users):
    with celery_worker("cpu", name="judge"):
        started = time.monotonic()
        judge = ask(queue, users, "tone", dispatch=True)
        wait_for(lambda: QueueJudge.objects.get(pk=judge.pk).status in ("done", "failed"), 150, "the judge")
        print(
            f"\nqueue judge: {queue.pairs.count()} pairs in both orders in {time.monotonic() - started:.1f}s"
        )
    judge.refresh_from_db()
    assert judge.status == JudgeStatus.DONE, judge.error_message
    assert (judge.pairs_done, judge.pairs_total) == (2, 2) and judge.worker.startswith("judge@")
    assert judge.task_id  # recorded when it was queued, after the commit
    verdicts = list(JudgeVerdict.objects.filter(judge=judge))
    assert len(verdicts) == 4
    for pair in queue.pairs.all():
        orders = sorted(v.left_is_a for v in verdicts if v.pair_id == pair.pk)
        assert orders == [False, True]  # B shown first, A shown first
    assert all(v.choice in ("a", "b", "") for v in verdicts)
    # The model answered with a response number after the reply prefix, so every answer is readable.
    assert all(v.choice for v in verdicts), [v.reply for v in verdicts]
    # Its answers feed the page's statistics: a verdict per pair and a bias row per order.
    summary = selectors.queue_agreement(queue)
    assert [row.order for row in summary.bias if row.rater == judge.label] == ["", "A first", "B first"]
    assert summary.consistency[0].items == 2


def test_a_judge_whose_model_cannot_load_fails_with_the_reason(queue, users):
    from workers.judge_tasks import judge_queue

    # A worker online that reports the model (so the rubric may name it) but cannot load it after all.
    now = timezone.now()
    WorkerNode.objects.create(
        hostname="judge@elsewhere",
        queues=["cpu"],
        judge_models=["/nonexistent/judge-model"],
        started_at=now,
        last_seen=now,
    )
    judge = ask(queue, users, "gone", dispatch=False)
    judge_queue.apply(args=[judge.pk])
    judge.refresh_from_db()
    assert judge.status == JudgeStatus.FAILED
    assert "Could not load the judge model '/nonexistent/judge-model'" in judge.error_message
    assert judge.finished_at is not None and not judge.verdicts.exists()
