"""A run's status changes (the one conditional UPDATE every writer goes through), cancel, and the
progress the list pages show."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from webapp.core.broadcast import broadcast_on_commit
from webapp.core.dispatch import revoke
from webapp.experiments.models import (
    ALLOWED_TRANSITIONS,
    FINAL_STATUSES,
    Run,
    RunStatus,
)
from webapp.experiments.signals import run_cancelled, run_moved


def run_transition(
    run_id: int, to: str, *, only_from: tuple[str, ...] | None = None, announce: bool = True, **fields: Any
) -> bool:
    """Move a run to status `to` if the status machine allows it from its current status (and, with
    `only_from`, only from those statuses).

    A conditional UPDATE, so two racing writers (worker, reaper, cancel button) can never both win.
    Returns whether this call made the change. The change is broadcast after the commit unless
    `announce` is off: ingestion sends the trainer's status event itself, with its sequence number.
    """
    allowed_from = [status for status, targets in ALLOWED_TRANSITIONS.items() if to in targets]
    if only_from is not None:
        allowed_from = [status for status in allowed_from if status in only_from]
    now = timezone.now()
    values: dict[str, Any] = {"status": to, "status_changed_at": now, **fields}
    if to == RunStatus.RUNNING:
        values.setdefault("started_at", now)
        values.setdefault("heartbeat_at", now)
    if to in FINAL_STATUSES:
        values.setdefault("finished_at", now)
    with transaction.atomic():
        changed = Run.objects.filter(pk=run_id, status__in=allowed_from).update(**values)
        if changed and announce:
            broadcast_on_commit(Run(pk=run_id), [Run.objects.get(pk=run_id).status_event()])
        if changed:
            # A run that started or ended moved every run queued behind it (fleet tells their pages).
            queue = Run.objects.filter(pk=run_id).values_list("queue", flat=True).first()
            if queue:
                run_moved.send(sender=Run, run_id=run_id, queue=queue)
    return bool(changed)


def run_request_cancel(*, run: Run, user=None) -> str:
    """Cancel a run: a queued run is cancelled at once (and its task revoked); a running one is asked
    to stop cooperatively — a dashboard worker's watcher reads the request within a second and the trainer
    stops at its next check (`trainers.sdk.cancel`: a decode step, a turn, a micro-batch); an external
    trainer learns it from its next ingestion reply. The page hears the request at once, with the actions
    that apply now (no second Cancel)."""
    # Conditional updates against the row, not `run.status`: if a worker claimed the run since `run`
    # was read, it must be asked to stop rather than be marked cancelled under the trainer's feet.
    if run_transition(run.pk, RunStatus.CANCELLED, only_from=(RunStatus.QUEUED,), cancel_requested=True):
        task_id = Run.objects.filter(pk=run.pk).values_list("task_id", flat=True).first() or ""
        transaction.on_commit(lambda: revoke(task_id))
        run_cancelled.send(sender=Run, run=run, user=user)
        return RunStatus.CANCELLED
    if Run.objects.filter(pk=run.pk, status__in=[RunStatus.STARTING, RunStatus.RUNNING]).update(
        cancel_requested=True
    ):
        state = Run.objects.get(pk=run.pk).page_state()
        broadcast_on_commit(
            run, [{"type": "cancel_requested", "cancel_requested": True, "actions": state["actions"]}]
        )
        run_cancelled.send(sender=Run, run=run, user=user)
        return "cancel_requested"
    current = Run.objects.get(pk=run.pk)
    raise ValidationError({"status": [f"A {current.get_status_display().lower()} run cannot be cancelled."]})


def run_record_progress(
    *, run_id: int, step: int, last_reward: float | None, best_reward: float | None
) -> None:
    """Keep the list pages' denormalised progress in step with ingested metrics (Run.progress_after,
    under the run's row lock)."""
    with transaction.atomic():
        run = (
            Run.objects.select_for_update()
            .only("pk", "current_step", "best_reward", "best_reward_step")
            .get(pk=run_id)
        )
        Run.objects.filter(pk=run_id).update(
            **run.progress_after(step=step, last_reward=last_reward, best_reward=best_reward)
        )
