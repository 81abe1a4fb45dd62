"""Reads of a run's rollouts, metrics and checkpoints. Callers have already checked access to the run.

Metric curves are read through `webapp.rollouts.metrics` (the one downsampling).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from django.db.models import Prefetch, QuerySet

from trainers.rubrics import alarms
from webapp.experiments.models import Checkpoint, Run
from webapp.rollouts.models import MetricPoint, RunEvent, Trajectory, Turn


def trajectory_list(
    *,
    run: Run,
    step: int | None = None,
    split: str | None = None,
    min_reward: float | None = None,
    max_reward: float | None = None,
    group_index: int | None = None,
    task_id: str | None = None,
    status: str | None = None,
) -> QuerySet[Trajectory]:
    """A run's trajectories in (step, group, sample) order, filtered by whichever arguments are given."""
    trajectories = Trajectory.objects.filter(run=run)
    if step is not None:
        trajectories = trajectories.filter(step=step)
    if split:
        trajectories = trajectories.filter(split=split)
    if min_reward is not None:
        trajectories = trajectories.filter(reward__gte=min_reward)
    if max_reward is not None:
        trajectories = trajectories.filter(reward__lte=max_reward)
    if group_index is not None:
        trajectories = trajectories.filter(group_index=group_index)
    if task_id:
        trajectories = trajectories.filter(task_id=task_id)
    if status:
        trajectories = trajectories.filter(status=status)
    return trajectories.order_by("step", "group_index", "sample_index", "id")


def trajectory_get(*, run: Run, trajectory_id: int) -> Trajectory | None:
    """One trajectory of `run` with its turns in order (None when the run has no such trajectory)."""
    return (
        Trajectory.objects.filter(run=run, pk=trajectory_id)
        .prefetch_related(Prefetch("turns", queryset=Turn.objects.order_by("index")))
        .first()
    )


def checkpoint_list(*, run: Run, include_deleted: bool = True) -> QuerySet[Checkpoint]:
    checkpoints = Checkpoint.objects.filter(run=run)
    if not include_deleted:
        checkpoints = checkpoints.filter(deleted=False)
    return checkpoints.order_by("step")


def run_event_lines(*, run: Run, chunk: int = 2000) -> Iterator[str]:
    """The run's event log as JSON lines, oldest first: one {"seq", "type", "received_at", ...summary}
    per accepted event (what ingestion kept of it). Read in chunks, so a long log streams."""
    events = (
        RunEvent.objects.filter(run=run).order_by("seq").values_list("seq", "type", "summary", "created_at")
    )
    for seq, kind, summary, created_at in events.iterator(chunk_size=chunk):
        line = {**(summary or {}), "seq": seq, "type": kind, "received_at": created_at.isoformat()}
        yield json.dumps(line, separators=(",", ":"), default=str) + "\n"


def lineage_trajectories(*, run: Run) -> QuerySet[Trajectory]:
    """A run's trajectories as its lineage saw them: for a resumed run, the parent's (recursively)
    up to the checkpoint it resumed from, then its own. Steps the parent trained after that
    checkpoint were redone by the resumed run, so each step appears exactly once."""
    from django.db.models import Q

    condition = Q(run=run)
    child = run
    while child.lineage == "resume" and child.parent_id and child.parent_checkpoint is not None:
        condition |= Q(run_id=child.parent_id, step__lte=child.parent_checkpoint.step)
        # Each ancestor contributes only up to where its own child resumed from it.
        parent = Run.objects.select_related("parent_checkpoint").get(pk=child.parent_id)
        child = parent
    return Trajectory.objects.filter(condition).order_by("step", "split", "group_index", "sample_index")


def trajectory_queryset() -> QuerySet[Trajectory]:
    """Trajectories with the run and project the access helper and the review services read."""
    return Trajectory.objects.select_related("run__project")


def _alarm_criteria(run: Run) -> tuple[list[dict[str, Any]], list[str], list[str]]:
    criteria = ((run.resolved_config or {}).get("rubric") or {}).get("criteria") or []
    learned, verifiable = alarms.criteria_by_signal(criteria)
    return criteria, learned, verifiable


def run_can_raise_hacking_alarm(run: Run) -> bool:
    """Whether the run's rubric has both a learned (or judge) and a verifiable criterion to compare."""
    _criteria, learned, verifiable = _alarm_criteria(run)
    return bool(learned and verifiable)


def run_hacking_alarm(run: Run, *, window: int = alarms.WINDOW) -> alarms.RunAlarm | None:
    """The run-level reward-hacking alarm (trainers.rubrics.alarms.run_alarm) from the run's rubric and its
    last `window` steps of per-criterion means (`criterion/<name>` metrics)."""
    criteria, learned, verifiable = _alarm_criteria(run)
    if not learned or not verifiable:
        return None
    keys = {f"criterion/{name}": name for name in (*learned, *verifiable)}
    steps = list(
        MetricPoint.objects.filter(run=run, key__in=list(keys))
        .order_by("-step")
        .values_list("step", flat=True)
        .distinct()[:window]
    )
    if len(steps) < 2:
        return None
    series: dict[str, list[tuple[int, float]]] = {}
    for key, step, value in MetricPoint.objects.filter(
        run=run, key__in=list(keys), step__gte=min(steps)
    ).values_list("key", "step", "value"):
        series.setdefault(keys[key], []).append((step, value))
    return alarms.run_alarm(criteria, series, window=window)
