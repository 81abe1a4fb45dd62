"""Reads for the activity page and the project home's recent activity: the log as lines a person reads —
filtered by kind and person, a run of one person's judgements in one queue as one line ("carol judged 30
pairs in queue 2"), so two comments are not buried under them, and the place where what is new since the
reader's last visit begins."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import QuerySet

from webapp.experiments.models import Run
from webapp.projects.models import Project
from webapp.review.models import GROUPED_VERBS, KIND_OF_VERB, Activity, ActivityKind

ACTIVITY_PAGE = 300  # log rows read for one page (a run of grouped judgements counts each)


@dataclass
class ActivityLine:
    """One line of the activity page: `latest` and `count - 1` more like it just before it."""

    latest: Activity
    count: int = 1
    oldest_at: datetime | None = None
    new: bool = False  # since the reader's last visit
    seen_from_here: bool = False  # the first line the reader had seen: "since you were last here" above it

    @property
    def grouped_verb(self) -> str:
        """The line's verb: "judged 30 pairs in" for a group, the activity's own for one."""
        if self.count > 1:
            return GROUPED_VERBS[self.latest.verb].format(n=self.count)
        return self.latest.get_verb_display()


def _group_key(activity: Activity) -> tuple | None:
    if activity.verb not in GROUPED_VERBS:
        return None
    return (activity.actor_id, activity.verb, activity.queue_id)


def mark_deleted_targets(activities: list[Activity]) -> None:
    """Mark the rows whose run, or whose trajectory's run, has been deleted (or is being purged), so that
    their line names it without a link that would 404: one query for the page."""
    run_ids = {a.data.get("run_id") for a in activities if isinstance((a.data or {}).get("run_id"), int)}
    run_ids |= {a.trajectory.run_id for a in activities if a.trajectory_id is not None}
    if not run_ids:
        return
    live = set(Run.objects.filter(pk__in=run_ids).values_list("pk", flat=True))
    for activity in activities:
        run_id = (activity.data or {}).get("run_id")
        activity.run_deleted = isinstance(run_id, int) and run_id not in live
        activity.trajectory_deleted = (
            activity.trajectory_id is not None and activity.trajectory.run_id not in live
        )


def activity_lines(activities: list[Activity], *, since: datetime | None = None) -> list[ActivityLine]:
    """Newest first, consecutive groupable rows of one person (and queue) merged into one line. A line is
    `new` when its latest row is newer than `since`; a group never spans the "since" boundary."""
    mark_deleted_targets(activities)
    lines: list[ActivityLine] = []
    for activity in activities:
        is_new = since is not None and activity.created_at > since
        last = lines[-1] if lines else None
        key = _group_key(activity)
        if last is not None and key is not None and key == _group_key(last.latest) and last.new == is_new:
            last.count += 1
            last.oldest_at = activity.created_at
            continue
        lines.append(ActivityLine(latest=activity, oldest_at=activity.created_at, new=is_new))
    first_seen = next((i for i, line in enumerate(lines) if not line.new), None)
    if (
        since is not None and first_seen
    ):  # (none new: nothing to mark; all new: the marker would close the list)
        lines[first_seen].seen_from_here = True
    return lines


def activity_queryset(project: Project, *, kind: str = "", person: str = "") -> QuerySet[Activity]:
    rows = Activity.objects.filter(project=project)
    if kind in ActivityKind.values:
        rows = rows.filter(verb__in=[verb for verb, of in KIND_OF_VERB.items() if of == kind])
    if person:
        rows = rows.filter(actor__username=person)
    return rows.select_related("project", "actor", "trajectory", "queue").order_by("-created_at", "-id")


def activity_page(
    project: Project,
    *,
    kind: str = "",
    person: str = "",
    since: datetime | None = None,
    limit: int = ACTIVITY_PAGE,
) -> list[ActivityLine]:
    return activity_lines(list(activity_queryset(project, kind=kind, person=person)[:limit]), since=since)


def activity_people(project: Project) -> list[str]:
    """Who appears in the project's log (the person filter's choices), by name."""
    names = Activity.objects.filter(project=project, actor__isnull=False).values_list(
        "actor__username", flat=True
    )
    return sorted(set(names))
