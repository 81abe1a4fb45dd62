"""The project's activity log: every review write records who did what, and so do the experiments'
writes below review (a run launched or cancelled, an environment or rubric versioned; a member joined, an
invitation made or revoked), which announce themselves through `webapp.experiments.signals` and
`webapp.projects.signals` (neither app imports review)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.utils import timezone

from webapp.experiments.models import Environment
from webapp.experiments.signals import definition_versioned, run_cancelled, run_deleted, run_launched
from webapp.projects.models import Project
from webapp.projects.signals import invitation_created, invitation_revoked, member_joined
from webapp.review.models import (
    Activity,
    ActivityVerb,
    ActivityVisit,
)


def log_activity(project: Project, actor, verb: str, *, trajectory=None, queue=None, **data: Any) -> Activity:
    return Activity.objects.create(
        project=project, actor=actor, verb=verb, trajectory=trajectory, queue=queue, data=data
    )


def activity_visit(*, project: Project, user) -> datetime | None:
    """Record that `user` is reading the project's activity now; returns when they last did (None: never)."""
    now = timezone.now()
    visit, created = ActivityVisit.objects.get_or_create(
        project=project, user=user, defaults={"seen_at": now}
    )
    if created:
        return None
    previous = visit.seen_at
    ActivityVisit.objects.filter(pk=visit.pk).update(seen_at=now)
    return previous


def _run_launched(sender: Any, *, run, user, **kwargs: Any) -> None:
    log_activity(run.project, user, ActivityVerb.RUN_LAUNCHED, run_id=run.pk, name=run.name)


def _run_cancelled(sender: Any, *, run, user, **kwargs: Any) -> None:
    log_activity(run.project, user, ActivityVerb.RUN_CANCELLED, run_id=run.pk, name=run.name)


def _run_deleted(sender: Any, *, run, user, **kwargs: Any) -> None:
    # No `run_id`: the line names a run that no longer has a page to link to.
    log_activity(run.project, user, ActivityVerb.RUN_DELETED, deleted_run_id=run.pk, name=run.name)


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


def _member_joined(sender: Any, *, membership, added_by=None, invitation=None, **kwargs: Any) -> None:
    data: dict[str, Any] = {"role": membership.role}
    if added_by is not None and added_by.pk != membership.user_id:
        data["added_by"] = added_by.username
    if invitation is not None:
        data["invitation_id"] = invitation.pk
    log_activity(membership.project, membership.user, ActivityVerb.MEMBER_JOINED, **data)


def _invitation_created(sender: Any, *, invitation, user, **kwargs: Any) -> None:
    log_activity(
        invitation.project,
        user,
        ActivityVerb.MEMBER_INVITED,
        role=invitation.role,
        invitation_id=invitation.pk,
    )


def _invitation_revoked(sender: Any, *, invitation, user, **kwargs: Any) -> None:
    log_activity(
        invitation.project,
        user,
        ActivityVerb.INVITATION_REVOKED,
        role=invitation.role,
        invitation_id=invitation.pk,
    )


def connect_activity_log() -> None:
    """Record the experiments' announcements (called once, from `ReviewConfig.ready`)."""
    run_launched.connect(_run_launched, dispatch_uid="review.activity.run_launched")
    run_cancelled.connect(_run_cancelled, dispatch_uid="review.activity.run_cancelled")
    run_deleted.connect(_run_deleted, dispatch_uid="review.activity.run_deleted")
    definition_versioned.connect(_definition_versioned, dispatch_uid="review.activity.definition_versioned")
    member_joined.connect(_member_joined, dispatch_uid="review.activity.member_joined")
    invitation_created.connect(_invitation_created, dispatch_uid="review.activity.invitation_created")
    invitation_revoked.connect(_invitation_revoked, dispatch_uid="review.activity.invitation_revoked")
