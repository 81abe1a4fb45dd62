"""Cancel for background jobs (`webapp.core.models.BackgroundJob`: reward-model training, LLM judges),
as runs cancel (`webapp.experiments.services.transitions.run_request_cancel`).

A queued job is cancelled at once and its task revoked; a running one is asked to stop: the worker's
watcher reads `cancel_requested` every second (`workers/cancel.py`) and the job's loops stop at their next
`check_cancel()` (`trainers.sdk.cancel`: between batches, every decode step), after which the worker calls
`job_cancelled`. Each step is one conditional UPDATE, so a cancel racing the worker's claim or its finish
never overwrites what won.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from webapp.core.dispatch import revoke
from webapp.core.models import BackgroundJob

CANCEL_REQUESTED = "cancel_requested"


def job_request_cancel(job: BackgroundJob) -> str:
    """Cancel `job`: returns its CANCELLED status when it was still queued, `CANCEL_REQUESTED` when a
    worker has it; a ValidationError when it already ended."""
    model = type(job)
    rows = model.objects.filter(pk=job.pk)  # type: ignore[attr-defined]
    if rows.filter(status=job.QUEUED_STATUS).update(
        status=job.CANCELLED_STATUS, cancel_requested=True, finished_at=timezone.now()
    ):
        task_id = rows.values_list("task_id", flat=True).first() or ""
        transaction.on_commit(lambda: revoke(task_id))
        return job.CANCELLED_STATUS
    if rows.filter(status=job.RUNNING_STATUS).update(cancel_requested=True):
        return CANCEL_REQUESTED
    current = rows.first()
    status = current.get_status_display().lower() if current is not None else "gone"
    raise ValidationError({"status": [f"A {status} job cannot be cancelled."]})


def job_cancel_requested(model: type[BackgroundJob], pk: int) -> bool:
    """What the worker's watcher polls."""
    return bool(model.objects.filter(pk=pk, cancel_requested=True).exists())  # type: ignore[attr-defined]


def job_cancelled(model: type[BackgroundJob], pk: int) -> bool:
    """The worker stopped the job it was asked to stop: running → cancelled, once."""
    return bool(
        model.objects.filter(pk=pk, status=model.RUNNING_STATUS).update(  # type: ignore[attr-defined]
            status=model.CANCELLED_STATUS, finished_at=timezone.now()
        )
    )
