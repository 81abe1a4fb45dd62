"""The project's activity log: every review write records who did what, and so do the experiments'
writes below review (a run launched or cancelled, an environment or rubric versioned), which announce
themselves through `webapp.experiments.signals` (experiments never imports review)."""

from __future__ import annotations

from typing import Any

from webapp.experiments.models import Environment
from webapp.experiments.signals import definition_versioned, run_cancelled, run_launched
from webapp.projects.models import Project
from webapp.review.models import (
    Activity,
    ActivityVerb,
)


def log_activity(project: Project, actor, verb: str, *, trajectory=None, queue=None, **data: Any) -> Activity:
    return Activity.objects.create(
        project=project, actor=actor, verb=verb, trajectory=trajectory, queue=queue, data=data
    )


def _run_launched(sender: Any, *, run, user, **kwargs: Any) -> None:
    log_activity(run.project, user, ActivityVerb.RUN_LAUNCHED, run_id=run.pk, name=run.name)


def _run_cancelled(sender: Any, *, run, user, **kwargs: Any) -> None:
    log_activity(run.project, user, ActivityVerb.RUN_CANCELLED, run_id=run.pk, name=run.name)


def _definition_versioned(sender: Any, *, definition, version, user, **kwargs: Any) -> None:
    is_environment = isinstance(definition, Environment)
    log_activity(
        definition.project,
        user,
        ActivityVerb.ENVIRONMENT_VERSIONED if is_environment else ActivityVerb.RUBRIC_VERSIONED,
        **{"environment_id" if is_environment else "rubric_id": definition.pk},
        name=definition.name,
        version=version.number,
    )


def connect_activity_log() -> None:
    """Record the experiments' announcements (called once, from `ReviewConfig.ready`)."""
    run_launched.connect(_run_launched, dispatch_uid="review.activity.run_launched")
    run_cancelled.connect(_run_cancelled, dispatch_uid="review.activity.run_cancelled")
    definition_versioned.connect(_definition_versioned, dispatch_uid="review.activity.definition_versioned")
