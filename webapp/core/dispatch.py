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


celery_app = Celery("rollout_studio")
celery_app.config_from_object("django.conf:settings", namespace="CELERY")


def send_on_commit(
    task: str, *, args: list[Any], queue: str, on_sent: Callable[[str], Any] | None = None
) -> None:
    """Queue `task(*args)` on `queue` once the current transaction commits (at once outside one), so a
    worker never picks up a row that was rolled back. `on_sent` receives the Celery task id."""

    def send() -> None:
        result = celery_app.send_task(task, args=args, queue=queue)
        if on_sent is not None:
            on_sent(result.id)

    transaction.on_commit(send)


def revoke(task_id: str) -> None:
    """Drop a queued task that no worker has started (a cancelled, still-queued run)."""
    if task_id:
        celery_app.control.revoke(task_id)
