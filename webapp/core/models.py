"""Fields shared by models of several apps."""

from __future__ import annotations

from django.conf import settings
from django.db import models


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

    class Meta:
        abstract = True
