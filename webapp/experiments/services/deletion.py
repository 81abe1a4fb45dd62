"""Deleting a run or a project: hidden at once, its rows purged in the background in short batches.

A request marks the row (`deleting_at`; the default managers hide marked rows from every page, API and
feed) and asks a control worker to purge it after the commit. The periodic `workers.purge_deleted` job
(webapp/core/dispatch.py) also picks up any marked row whose purge was cut short (a worker killed, a
broker away), so a deletion always finishes. The purge itself is `webapp.core.purge.purge`: dependants
deepest first, each transaction one batch, so the dashboard never waits on a long lock.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from webapp.core.broadcast import broadcast_on_commit
from webapp.core.dispatch import CONTROL_QUEUE, Task, send_task
from webapp.core.purge import purge
from webapp.experiments.models import ACTIVE_STATUSES, Run
from webapp.experiments.signals import run_deleted
from webapp.projects.models import Project

log = logging.getLogger(__name__)

# What a deletion's answer says (API and pages alike).
DELETED_IN_BACKGROUND = "Deleted: gone from every page now; its data is freed in the background."

# How long one tick of the periodic purge works before it lets the control queue's other jobs run.
PURGE_BUDGET_S = 5.0


def run_delete(*, run: Run, user) -> None:
    """Delete `run` (who may: `access_run_to_delete`): refused with the reason (`Run.delete_refusal`), else
    gone from every page now and purged in the background."""
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run.pk)  # two deletes of one run: one wins
        refusal = run.delete_refusal()
        if refusal is not None:
            raise ValidationError({"run": [refusal]})
        Run.objects.filter(pk=run.pk).update(deleting_at=timezone.now())
        run_deleted.send(sender=Run, run=run, user=user)
        # Pages open on the run say so at once instead of going on showing a run that is gone.
        who = getattr(user, "username", "") or "someone"
        broadcast_on_commit(
            run, [{"type": "deleted", "message": f"{who} deleted this run. {DELETED_IN_BACKGROUND}"}]
        )
        transaction.on_commit(_purge_soon)


def project_delete(*, project: Project, user) -> None:
    """Delete `project` (its owner's call; access checks MANAGE): refused while one of its runs is active.
    Its slug is freed at once for a new project."""
    with transaction.atomic():
        project = Project.objects.select_for_update().get(pk=project.pk)
        active = Run.objects.filter(project=project, status__in=ACTIVE_STATUSES).values_list("pk", flat=True)
        if active:
            runs = ", ".join(str(pk) for pk in active[:5])
            raise ValidationError({"project": [f"Runs still active ({runs}): cancel them (or wait) first."]})
        Project.objects.filter(pk=project.pk).update(
            deleting_at=timezone.now(), slug=f"deleted-{project.pk}-{project.slug}"[:80]
        )
        transaction.on_commit(_purge_soon)


def _purge_soon() -> None:
    send_task(Task.PURGE_DELETED, args=[], queue=CONTROL_QUEUE)  # not sent: the periodic job comes anyway


def purge_deleted(*, budget_s: float = PURGE_BUDGET_S) -> dict[str, list[int]]:
    """Purge the runs and projects marked for deletion, oldest first, for about `budget_s`; the ids purged
    whole. What is left waits for the next call (the periodic job's next tick). One that fails is logged
    and skipped, so it never holds up the others (the next tick tries it again)."""
    deadline = time.monotonic() + budget_s
    done: dict[str, list[int]] = {"runs": [], "projects": []}
    marked_runs = Run.all_objects.filter(deleting_at__isnull=False).order_by("deleting_at")
    for run_id in marked_runs.values_list("pk", flat=True):
        finished = _attempt("run", run_id, lambda pk: purge(Run, pk, budget_s=_left(deadline)))
        if finished:
            done["runs"].append(run_id)
        elif finished is False:
            return done
    marked_projects = Project.all_objects.filter(deleting_at__isnull=False).order_by("deleting_at")
    for project_id in marked_projects.values_list("pk", flat=True):
        finished = _attempt("project", project_id, lambda pk: _purge_project(pk, deadline))
        if finished:
            done["projects"].append(project_id)
        elif finished is False:
            return done
    return done


def _purge_project(project_id: int, deadline: float) -> bool:
    # Its runs first, one by one as a run is purged (their files with them).
    for run_id in Run.all_objects.filter(project_id=project_id).values_list("pk", flat=True):
        if not purge(Run, run_id, budget_s=_left(deadline)):
            return False
    return purge(Project, project_id, budget_s=_left(deadline))


def _attempt(what: str, pk: int, work: Callable[[int], bool]) -> bool | None:
    """`work(pk)` (True: purged whole, False: out of time), or None when it raised (logged)."""
    try:
        finished = work(pk)
    except Exception:  # a bug or a PROTECT nobody foresaw: say which, and let the others go on
        log.exception("could not purge deleted %s %s; the next tick tries again", what, pk)
        return None
    if finished:
        log.info("deleted %s %s purged", what, pk)
    return finished


def _left(deadline: float) -> float:
    return max(0.0, deadline - time.monotonic())
