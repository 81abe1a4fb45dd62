"""Queue runs on Celery after the transaction that created them commits."""

from __future__ import annotations

import logging

from django.db import transaction

from webapp.experiments.models import Run

log = logging.getLogger(__name__)


def enqueue_run_on_commit(run: Run) -> None:
    run_id, queue = run.pk, run.queue
    transaction.on_commit(lambda: enqueue_run(run_id, queue))


def enqueue_run(run_id: int, queue: str) -> None:
    from workers.tasks import execute_run

    result = execute_run.apply_async(args=[run_id], queue=queue)
    Run.objects.filter(pk=run_id).update(task_id=result.id)


def revoke_run_task(run: Run) -> None:
    if not run.task_id:
        return
    from workers.celery import app

    app.control.revoke(run.task_id)
