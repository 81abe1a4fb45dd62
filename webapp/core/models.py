"""Fields shared by models of several apps."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from webapp.core.dispatch import UNSENT


class BackgroundJob(models.Model):
    """A piece of work a Celery worker does for someone (training a reward model, an LLM judge annotating a
    queue): who asked and when, which task and worker took it, when it started and ended, why it failed.
    The reaper of each kind fails the jobs whose worker stopped heartbeating
    (`webapp.fleet.selectors.lost_jobs`)."""

    error_message = models.TextField(blank=True)
    task_id = models.CharField(max_length=64, blank=True)
    worker = models.CharField(max_length=200, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Someone pressed Cancel while a worker had the job: its watcher (workers/cancel.py) reads this within
    # a second and the job stops at its next check (trainers.sdk.cancel), then turns CANCELLED.
    cancel_requested = models.BooleanField(default=False)

    # Each kind names its statuses (the values of its own `status` choices) for the shared rules below and
    # `webapp.core.jobs`.
    QUEUED_STATUS = "queued"
    RUNNING_STATUS = "running"
    CANCELLED_STATUS = "cancelled"

    class Meta:
        abstract = True

    def can_cancel(self) -> bool:
        """Queued jobs are dropped at once, running ones asked to stop; a job already asked to stop is not
        offered Cancel again. The pages and the APIs ask here."""
        status = getattr(self, "status", "")
        return status in (self.QUEUED_STATUS, self.RUNNING_STATUS) and not self.cancel_requested

    def dispatch_pending(self) -> bool:
        """Queued here but not yet handed to a worker queue: the broker could not take its task when the
        job was asked for (as `Run.dispatch_pending`). The periodic `workers.dispatch_pending` job sends
        it once the broker answers (`webapp.core.dispatch.send_pending`)."""
        return getattr(self, "status", "") == self.QUEUED_STATUS and self.task_id == UNSENT
