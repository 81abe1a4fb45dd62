"""The web app's one way to hand work to Celery workers: by task *name*, after the commit.

The dashboard never imports `workers/` (workers import the web app's services, not the reverse); it sends
named tasks through a Celery app configured from the same settings the workers read. Queues and task
names are declared here and nowhere else: `workers/celery.py` consumes exactly these queues and registers
tasks under exactly these names.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from celery import Celery
from django.db import models, transaction

log = logging.getLogger(__name__)


class Queue(models.TextChoices):
    """Where a run or a reward model trains: a run's `queue` field holds one of these."""

    CPU = "cpu", "CPU"
    GPU = "gpu", "GPU"


def queue_refusal(queue: str) -> str | None:
    """Why `queue` cannot take a run or a reward model; None when it is one of ours."""
    if queue in Queue.values:
        return None
    return f"Unknown queue {queue!r}; choose one of {', '.join(Queue.values)}."


# Small periodic jobs (the LOST-run reaper) go here, so they never wait behind a training run.
CONTROL_QUEUE = "control"
QUEUES: tuple[str, ...] = (*Queue.values, CONTROL_QUEUE)


class Task:
    """Names of the tasks `workers/` registers."""

    EXECUTE_RUN = "workers.execute_run"
    TRAIN_REWARD_MODEL = "workers.train_reward_model"
    JUDGE_QUEUE = "workers.judge_queue"
    REAP_LOST_RUNS = "workers.reap_lost_runs"
    DISPATCH_PENDING = "workers.dispatch_pending"
    PURGE_DELETED = "workers.purge_deleted"


celery_app = Celery("rollout_studio")
celery_app.config_from_object("django.conf:settings", namespace="CELERY")


# Publishing gives up after about a second when the broker is unreachable (Celery's default policy
# retries three times); the request that committed the work answers meanwhile.
celery_app.conf.task_publish_retry_policy = {
    "max_retries": 2,
    "interval_start": 0,
    "interval_step": 0.2,
    "interval_max": 0.5,
}


def send_task(task: str, *, args: list[Any], queue: str) -> str | None:
    """Send `task(*args)` to `queue` now; its Celery task id, or None when the broker could not take it
    (unreachable, refused). The failure is logged and never raised: the caller's write is already
    committed, and what was not sent is sent again later (`send_pending`)."""
    try:
        return celery_app.send_task(task, args=args, queue=queue).id
    except Exception:  # kombu OperationalError, redis ConnectionError, a DNS failure: all the same here
        log.exception("could not send %s%s to the %r queue; it will be sent again later", task, args, queue)
        return None


# The task id a row keeps when the broker could not take its task (a Celery id is a UUID, never this).
UNSENT = "unsent"
# How often the beat re-sends what the broker could not take: workers/celery.py schedules
# `Task.DISPATCH_PENDING` with it, the flash after asking reads it (the notice in _dispatch_pending.html
# and the APIs' help texts write "about 15 s").
DISPATCH_PENDING_PERIOD_S = 15
# How often the beat comes back for the rows of deleted runs and projects (webapp/experiments/services/
# deletion.py): a deletion whose purge was cut short finishes within this.
PURGE_DELETED_PERIOD_S = 30


def send_on_commit(
    task: str, *, args: list[Any], queue: str, on_sent: Callable[[str], Any] | None = None
) -> None:
    """Queue `task(*args)` on `queue` once the current transaction commits (at once outside one), so a
    worker never picks up a row that was rolled back. `on_sent` receives the Celery task id, or `UNSENT`
    when the broker could not take the task (see `send_task`): a failed dispatch never turns the
    committed write into an error, and the row says it is still to be sent."""

    def send() -> None:
        task_id = send_task(task, args=args, queue=queue)
        if on_sent is not None:
            on_sent(task_id or UNSENT)

    transaction.on_commit(send)


def send_pending(queued: models.QuerySet, *, task: str, queue_field: str = "queue") -> list[int]:
    """Send `task(pk)` for every row of `queued` (a kind's rows still queued) whose task the broker could
    not take (`task_id` reads `UNSENT`), to the queue its `queue_field` names, and record each task id;
    the ids of those sent now. While the broker still refuses, nothing is sent and the rows stay pending
    for the next call. A task sent twice is harmless: every kind's worker claims its row with a
    conditional update (QUEUED → started), so the second delivery finds it taken. Runs, reward models and
    queue judges each call this from their services (`run_dispatch_pending`, ...)."""
    sent = []
    for pk, queue in queued.filter(task_id=UNSENT).order_by("pk").values_list("pk", queue_field):
        task_id = send_task(task, args=[pk], queue=queue)
        if task_id is None:
            break  # the broker is still away: the others would fail the same way
        # Recorded only if still queued and unsent: a row cancelled meanwhile stays as it is (its task,
        # if a worker gets it, finds the row no longer queued and does nothing).
        if queued.filter(pk=pk, task_id=UNSENT).update(task_id=task_id):
            sent.append(pk)
    return sent


def revoke(task_id: str) -> None:
    """Drop a queued task that no worker has started (a cancelled, still-queued run)."""
    if task_id and task_id != UNSENT:
        celery_app.control.revoke(task_id)
